"""Numerics on the training thread: NaN/Inf, gradient norm, replica checksums, batch statistics.

What runs when (``HookConfig``; ``numerics`` turns it all off):

- every ``backward()``: the loss (already a Python float for a CPU loss) is checked with
  ``math.isfinite`` (~50 ns); the first non-finite loss of an episode (an episode ends at the next
  finite loss) is looked into at once: the step's batch and model inputs are checked, then the
  forward is replayed with module checks (:mod:`diag.hook.nonfinite`); at most
  ``nonfinite_max_events`` episodes per process. A loss on a device is read by the hook thread
  (:mod:`diag.hook.numerics_events`), which arms module checks for the next forward.
- every data-loader batch: a reference to it is kept until the step ends (the one the loop holds
  anyway), so a non-finite step can check its input; the first batch of every
  ``numerics_every``-th step goes to the hook thread for :class:`~diag.schema.BatchStats`.
- every forward of a DDP-wrapped module in training (grad enabled): its arguments are kept until
  the step ends, for the replay (a forward pre-hook, ~2 us).
- every ``numerics_every``-th step, before the step's closing optimizer ``step()``: per-tensor
  gradient norms with one ``torch._foreach_norm`` (one stacked tensor; the hook thread reads it,
  so a GPU job does not wait for it here).
- every ``fingerprint_every``-th step, after it: the replicas' parameter sums
  (:mod:`diag.hook.fingerprint`).
- every ``GradScaler.update()``: its scale (read here on the CPU, cloned on a device).

Records go to the hook's bounded queue as tuples (tags ``"gnorm"``, ``"fp"``, ``"batch"``,
``"nonfinite"``, ``"scale"``); nothing here raises into the job (the callers count errors).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from diag.config import HookConfig
from diag.hook import nonfinite as nf
from diag.hook.fingerprint import Replicas

TAGS = frozenset({"gnorm", "fp", "batch", "nonfinite", "scale"})


class Numerics:
    """The training-thread half of the numerics tier (one per installed hook)."""

    def __init__(
        self,
        cfg: HookConfig,
        torch: Any,
        *,
        emit: Callable[[tuple[Any, ...]], None],
        error: Callable[[BaseException], None],
        pg_info: Callable[[Any], tuple[str, int]],
    ) -> None:
        self.cfg = cfg
        self.torch = torch
        self.emit = emit
        self.error = error
        self.every = max(0, cfg.numerics_every)
        self.fp_every = max(0, cfg.fingerprint_every)
        self.replicas = Replicas(torch, pg_info, cfg.fingerprint_max_elements)
        self.batch: Any = None  # the step's last batch (released at the step's end)
        self.batch_sent = -1  # the step whose sampled batch went out
        self.inputs: tuple[Any, tuple[Any, ...], dict[str, Any]] | None = None
        self.in_episode = False
        self.num_episodes = 0
        self.num_suppressed = 0  # episodes beyond nonfinite_max_events
        self.last_scale: float | None = None
        self.stepped = False  # the closing optimizer stepped since the last backward
        # Module checks armed by the hook thread (a device loss it read late): the step whose
        # loss was first non-finite, and the check while it runs on a forward.
        self.window_for: tuple[int, float] | None = None
        self._window: tuple[int, float, nf.ModuleCheck, Any] | None = None

    def sampled(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    # ---------------------------------------------------------------- callbacks
    def on_batch(self, batch: Any, step: int) -> None:
        """A data-loader batch of ``step`` (the DataLoader ``__next__`` wrapper)."""
        self.batch = batch
        if self.window_for is not None and self._window is None:
            self._arm()  # a job without DDP: the checks start with the next batch
        if self.batch_sent != step and self.sampled(step):
            self.batch_sent = step
            self.emit(("batch", step, batch, "sampled"))

    def on_forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Forward pre-hook of a DDP-wrapped module: keep the inputs of a training forward."""
        try:
            if not self.torch.is_grad_enabled():
                return
            self.inputs = (module, args, kwargs)
            if self.window_for is not None and self._window is None:
                self._arm()
        except Exception as exc:
            self.error(exc)

    def on_loss(self, loss: Any, step: int) -> None:
        """The loss of a ``backward()`` call: a float (CPU loss), a device tensor or None."""
        self.stepped = False
        if not isinstance(loss, float):
            return
        if math.isfinite(loss):
            self.in_episode = False
        elif not self.in_episode:
            self.in_episode = True
            self._nonfinite(step, loss)

    def pre_step(self, optimizer: Any, step: int) -> None:
        """Before the closing optimizer's ``step()``: gradient norms on sampled steps."""
        if not self.sampled(step):
            return
        params = [
            p
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None and p.grad.layout == self.torch.strided
        ]
        if not params:
            return
        torch = self.torch
        with torch.no_grad():
            norms = torch._foreach_norm([p.grad for p in params])
            device = norms[0].device
            stacked = torch.stack([n.to(device, torch.float32) for n in norms])
        self.emit(("gnorm", step, stacked, tuple(params)))

    def post_step(self, step: int) -> None:
        """After the closing optimizer's ``step()``: fingerprints; the step's refs released."""
        self.batch = None
        self.inputs = None
        self.stepped = True
        if self._window is not None:
            self._close_window()
        if self.fp_every > 0 and step % self.fp_every == 0:
            for group in self.replicas.groups():
                sums = self.replicas.sums(group)
                if sums is not None:
                    self.emit(("fp", step, group.name, group.size, sums, len(group.params),
                               group.num_sampled, group.num_total))  # fmt: skip

    def on_scale(self, scaler: Any, step: int) -> None:
        """After ``GradScaler.update()``: its scale (a CPU value when it changed; a device
        tensor's copy every time, compared on the hook thread). ``step`` is the tracker's step
        in progress; the update belongs to the one that just ended if the optimizer stepped
        (when the scaler skipped the step for an Inf, no step ended)."""
        scale = getattr(scaler, "_scale", None)
        if scale is None:
            return
        if self.stepped:
            step -= 1
        if scale.device.type == "cpu":
            value = float(scale)
            if value != self.last_scale:
                self.last_scale = value
                self.emit(("scale", step, value))
        else:
            self.emit(("scale", step, scale.detach().clone()))

    def add_replica(self, ddp: Any) -> Any:
        """A DDP module was built: fingerprint it and keep its forward inputs. Returns the
        pre-hook's handle (removed when the hook is uninstalled)."""
        self.replicas.add(ddp)
        return ddp.module.register_forward_pre_hook(self._pre_hook, with_kwargs=True)

    def _pre_hook(self, module: Any, args: Any, kwargs: Any) -> None:
        self.on_forward(module, args, kwargs)

    # -------------------------------------------------------------- non-finite
    def _nonfinite(self, step: int, loss: float) -> None:
        """The first non-finite loss of an episode, on the training thread: find where."""
        if self.num_episodes >= self.cfg.nonfinite_max_events:
            self.num_suppressed += 1
            return
        self.num_episodes += 1
        torch = self.torch
        if self.batch is not None:
            self.emit(("batch", step, self.batch, "nonfinite"))
        bad_in = nf.first_bad(self.batch, torch, "batch") if self.batch is not None else None
        if bad_in is None and self.inputs is not None:
            bad_in = nf.first_bad((self.inputs[1], self.inputs[2]), torch, "input")
        if bad_in is not None:
            self.emit(("nonfinite", step, "input", "", bad_in.label, bad_in.num_nonfinite,
                       bad_in.num_elements, "batch", True, loss))  # fmt: skip
            return
        if not (self.cfg.nonfinite_replay and self.inputs is not None):
            self.emit(("nonfinite", step, "loss", "", "", 0, 0, "loss", False, loss))
            return
        module, args, kwargs = self.inputs
        found, again = nf.replay(torch, module, args, kwargs, self.replicas.module_name)
        self._emit_found(step, loss, found, "replay", again)

    def _emit_found(
        self, step: int, loss: float, found: nf.Found | None, method: str, again: bool
    ) -> None:
        if found is None:
            self.emit(("nonfinite", step, "loss", "", "", 0, 0, method, again, loss))
            return
        tensor = found.tensor if found.params_finite else f"{found.tensor} (parameters non-finite)"
        self.emit(("nonfinite", step, found.where, found.module, tensor, found.num_nonfinite,
                   found.num_elements, method, again, loss))  # fmt: skip

    # ---------------------------------------------------- window (device losses)
    def request_window(self, step: int, loss: float) -> None:
        """From the hook thread: the loss of ``step`` (read late) was non-finite."""
        if self.window_for is None and self.num_episodes < self.cfg.nonfinite_max_events:
            self.num_episodes += 1
            self.window_for = (step, loss)

    def _arm(self) -> None:
        assert self.window_for is not None
        step, loss = self.window_for
        check = nf.ModuleCheck(self.torch, self.replicas.module_name)
        self._window = (step, loss, check, check.install())

    def _close_window(self) -> None:
        assert self._window is not None
        step, loss, check, handle = self._window
        handle.remove()
        self._window = None
        self.window_for = None
        self._emit_found(step, loss, check.found, "window", check.found is not None)
