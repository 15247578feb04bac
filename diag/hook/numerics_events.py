"""Numerics on the hook thread: the training thread's records become schema 1.4 events.

Reading the small tensors the training thread left (per-tensor gradient norms, parameter sums, a
device loss, a device loss scale) happens here, so a GPU job's training thread never waits for
its device because of diag. Batch statistics are computed here too, over a strided sample of at
most ``batch_stats_max_elements`` per tensor on sampled steps (torch releases the GIL inside its
ops, so this costs the training thread little).

- ``grad_norm = sqrt(sum_i norm_i**2)`` over the per-tensor norms, in float64; a NaN or Inf in
  any gradient makes it non-finite and is counted in ``num_nonfinite_grads``. The
  :class:`~diag.schema.NumericsSample` of a sampled step is sent once its step record arrives
  (which carries the loss); a gradient that is non-finite while that loss is finite is a
  :class:`~diag.schema.NonFinite` ``where="grad"`` (the first of an episode).
- A loss on a device is read here (the step record's loss becomes a float, so the step event
  does not read it again); the first non-finite one of an episode arms module checks for the
  next forward on the training thread (:meth:`Numerics.request_window`).
- The loss scale is sent when it changes.
"""

from __future__ import annotations

import math
from typing import Any

from diag import schema
from diag.hook import nonfinite as nf
from diag.hook.events import EventFactory
from diag.hook.fingerprint import combine
from diag.hook.numerics import Numerics

LOSS = 11  # index of the loss in a tracker ("step", ...) record


def batch_stats(torch: Any, batch: Any, max_elements: int, full: bool) -> dict[str, Any]:
    """The :class:`~diag.schema.BatchStats` payload of ``batch`` (``full``: every element)."""
    num_tensors = num_elements = num_bad = num_finite = 0
    low, high, abs_sum = math.inf, -math.inf, 0.0
    sampled = False
    with torch.no_grad():
        for _, t in nf.tensors(batch, torch):
            if t.is_complex():
                continue
            flat = t.detach().reshape(-1)
            if not full and flat.numel() > max_elements > 0:
                flat = flat[:: -(-flat.numel() // max_elements)]
                sampled = True
            num_tensors += 1
            n = flat.numel()
            finite = torch.isfinite(flat)
            k = int(finite.sum())
            num_elements += n
            num_bad += n - k
            if k:
                vals = flat if k == n else flat[finite]
                low = min(low, float(vals.min()))
                high = max(high, float(vals.max()))
                abs_sum += float(vals.abs().sum(dtype=torch.float64))
                num_finite += k
    return {
        "num_tensors": num_tensors,
        "num_elements": num_elements,
        "num_nonfinite": num_bad,
        "min_value": low if num_finite else None,
        "max_value": high if num_finite else None,
        "mean_abs": abs_sum / num_finite if num_finite else None,
        "sampled": sampled,
    }


class NumericsEvents:
    """Turns numerics records into events (hook thread only)."""

    def __init__(self, numerics: Numerics, ev: EventFactory, torch: Any) -> None:
        self.numerics = numerics
        self.ev = ev
        self.torch = torch
        self.max_elements = numerics.cfg.batch_stats_max_elements
        # step -> (grad norm, tensors, non-finite tensors, first non-finite parameter's name)
        self.pending: dict[int, tuple[float, int, int, str]] = {}
        self.scale: float | None = None
        self.device_episode = False
        self.grad_episode = False

    def step_record(self, rec: tuple[Any, ...], out: list[schema.Event]) -> tuple[Any, ...]:
        """A tracker step record passing by: read a device loss (returned as a float in the
        record), arm module checks on the first non-finite one, send the step's sample."""
        step, loss = rec[1], rec[LOSS]
        if loss is not None and not isinstance(loss, float):
            loss = float(loss.item())
            rec = (*rec[:LOSS], loss, *rec[LOSS + 1 :])
            if math.isfinite(loss):
                self.device_episode = False
            elif not self.device_episode:
                self.device_episode = True
                self.numerics.request_window(step, loss)
        for s in sorted(k for k in self.pending if k <= step):
            out.extend(self._sample(s, loss if s == step else None))
        return rec

    def record(self, rec: tuple[Any, ...]) -> list[schema.Event]:
        """Events for one numerics record (see :data:`diag.hook.numerics.TAGS`)."""
        tag, step = rec[0], rec[1]
        ev = self.ev
        if tag == "gnorm":
            norms = [float(v) for v in rec[2].tolist()]
            bad = [i for i, v in enumerate(norms) if not math.isfinite(v)]
            total = math.sqrt(math.fsum(v * v for v in norms)) if not bad else math.nan
            if bad and all(math.isinf(norms[i]) for i in bad):
                total = math.inf
            name = self.numerics.replicas.param_name(rec[3][bad[0]], bad[0]) if bad else ""
            self.pending[step] = (total, len(norms), len(bad), name)
            return []
        if tag == "fp":
            _, _, group, size, sums, num_tensors, num_sampled, num_total = rec
            fingerprint = ev.make(
                schema.ParamFingerprint,
                step=step,
                checksum=combine(sums.tolist()),
                dp_group=group,
                dp_size=size,
                num_tensors=num_tensors,
                num_params_sampled=num_sampled,
                num_params_total=num_total,
            )
            return [fingerprint]
        if tag == "batch":
            full = rec[3] != "sampled"
            stats = batch_stats(self.torch, rec[2], self.max_elements, full)
            return [ev.make(schema.BatchStats, step=step, reason=rec[3], **stats)]
        if tag == "nonfinite":
            _, _, where, module, tensor, num_bad, num, method, again, loss = rec
            return [ev.make(schema.NonFinite, step=step, where=where, module=module,
                            tensor=tensor, num_nonfinite=num_bad, num_elements=num,
                            method=method, reproduced=again, loss=loss)]  # fmt: skip
        if tag == "scale":
            value = rec[2] if isinstance(rec[2], float) else float(rec[2].item())
            if value == self.scale:
                return []
            self.scale = value
            return [ev.make(schema.NumericsSample, step=step, loss_scale=value)]
        return []

    def _sample(self, step: int, loss: float | None) -> list[schema.Event]:
        total, num, num_bad, name = self.pending.pop(step)
        out = [
            self.ev.make(
                schema.NumericsSample,
                step=step,
                loss=loss,
                grad_norm=total,
                num_grads=num,
                num_nonfinite_grads=num_bad,
                loss_scale=self.scale,
            )
        ]
        if not num_bad:
            self.grad_episode = False
        elif not self.grad_episode and nf.is_finite(loss):
            self.grad_episode = True
            out.append(self.ev.make(schema.NonFinite, step=step, where="grad", tensor=name,
                                    method="grad_sample", loss=loss))  # fmt: skip
        return out
