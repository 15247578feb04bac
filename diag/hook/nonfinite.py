"""Naming the module behind a NaN or Inf: finite checks on every module's output, one step.

Only used once a loss was non-finite (the first of an episode), never on clean steps. Two ways:

- **Replay** (:func:`replay`, the default where possible): the loss is a Python float on the
  training thread (a CPU loss) and the model's inputs of the step were captured (a forward
  pre-hook on each DDP-wrapped module keeps the last training forward's arguments until the step
  ends). Right at that ``backward()`` call, before the gradient all-reduce and the optimizer step
  spread the NaN into every replica's parameters, the hook runs the model's forward again on the
  same inputs and parameters under ``torch.no_grad()``, with a global forward hook that checks each
  module's output. The RNG state is forked and restored and the module's buffers (BatchNorm
  statistics...) are copied back, so the job's training is unchanged; the replay costs one
  forward pass, once per episode. A deterministic fault (bad data, an overflowing layer) shows
  again (``reproduced``); a transient one (a flipped bit in a computation) does not, which points
  at the device.
- **Window** (:class:`ModuleCheck` armed for one step): where the loss lives on a device, the hook
  thread reads it later (reading it on the training thread would stall it every step), so the
  checks are armed for the next forward instead. That names the module when the fault persists
  and the parameters are still finite; after a NaN gradient was applied, the first module with
  non-finite parameters is named instead (the evidence says so).

Why not check every module on every step: a finite check costs a reduction over every
activation (plus ~2 us of Python per module call for the hook itself), about what a few
elementwise ops per layer cost, several percent of a step on a GPU, for an event that happens
once. Checking only sampled steps would miss the step that matters.

The rule: modules finish their forward after their children, so the first hook call that sees a
non-finite output belongs to the innermost module that produced it. If that module's inputs were
non-finite too, the value was made outside any module (a functional op) or came with the inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

MAX_TENSORS = 64  # tensors looked at in one nested structure
MAX_DEPTH = 4


@dataclass(frozen=True, slots=True)
class Bad:
    """A non-finite tensor inside a structure: its label (``"output[1]"``) and counts."""

    label: str
    num_nonfinite: int
    num_elements: int


@dataclass(frozen=True, slots=True)
class Found:
    """The first module whose output was non-finite in a checked forward."""

    module: str
    where: str  # "module_output" or "module_input"
    tensor: str
    num_nonfinite: int
    num_elements: int
    params_finite: bool = True


def tensors(obj: Any, torch: Any, label: str = "") -> Iterator[tuple[str, Any]]:
    """(label, tensor) for the floating-point tensors in ``obj`` (tuples, lists, dicts walked,
    at most ``MAX_TENSORS`` tensors and ``MAX_DEPTH`` levels)."""
    count = 0
    stack: list[tuple[str, Any, int]] = [(label, obj, 0)]
    while stack and count < MAX_TENSORS:
        name, item, depth = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.is_floating_point() or item.is_complex():
                count += 1
                yield name, item
        elif depth < MAX_DEPTH and isinstance(item, (tuple, list)):
            stack.extend((f"{name}[{i}]", v, depth + 1) for i, v in reversed(list(enumerate(item))))
        elif depth < MAX_DEPTH and isinstance(item, dict):
            items = reversed(list(item.items()))
            stack.extend((f"{name}[{k!r}]", v, depth + 1) for k, v in items)


def first_bad(obj: Any, torch: Any, label: str) -> Bad | None:
    """The first tensor in ``obj`` holding a NaN or Inf (full check: used off the clean path)."""
    for name, t in tensors(obj, torch, label):
        with torch.no_grad():
            finite = torch.isfinite(t.detach())
            num_finite = int(finite.sum())
        if num_finite < t.numel():
            return Bad(name, t.numel() - num_finite, t.numel())
    return None


class ModuleCheck:
    """A global forward hook (``register_module_forward_hook``) that records the first module
    whose output is non-finite; ``names`` gives a module's qualified name."""

    def __init__(self, torch: Any, names: Callable[[Any], str]) -> None:
        self.torch = torch
        self.names = names
        self.found: Found | None = None
        self.num_checked = 0

    def __call__(self, module: Any, args: Any, output: Any) -> None:
        if self.found is not None:
            return
        self.num_checked += 1
        bad = first_bad(output, self.torch, "output")
        if bad is None:
            return
        bad_in = first_bad(args, self.torch, "input")
        params_ok = all(
            bool(self.torch.isfinite(p.detach()).all())
            for p in module.parameters(recurse=False)
            if p.is_floating_point()
        )
        self.found = Found(
            module=self.names(module),
            where="module_input" if bad_in is not None else "module_output",
            tensor=bad_in.label if bad_in is not None else bad.label,
            num_nonfinite=(bad_in or bad).num_nonfinite,
            num_elements=(bad_in or bad).num_elements,
            params_finite=params_ok,
        )

    def install(self) -> Any:
        """Register the check on every module; returns the removable handle."""
        return self.torch.nn.modules.module.register_module_forward_hook(self)


def replay(
    torch: Any,
    module: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    names: Callable[[Any], str],
) -> tuple[Found | None, bool]:
    """Run ``module(*args, **kwargs)`` again under ``no_grad`` with every module checked.

    Returns (the first non-finite module output or ``None``, whether the replay's own output was
    non-finite). The RNG state and the module's buffers are restored afterwards; exceptions of
    the model propagate to the caller (which counts them as hook errors)."""
    saved = [(b, b.detach().clone()) for b in module.buffers()]
    devices: list[int] = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        devices = [torch.cuda.current_device()]
    check = ModuleCheck(torch, names)
    handle = check.install()
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            out = module(*args, **kwargs)
        out_bad = first_bad(out, torch, "output") is not None
    finally:
        handle.remove()
        with torch.no_grad():
            for buf, copy in saved:
                buf.copy_(copy)
    return check.found, out_bad or check.found is not None


def is_finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)
