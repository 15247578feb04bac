"""Exact checksums of the DDP replicas' parameters (:class:`~diag.schema.ParamFingerprint`).

DDP broadcasts rank 0's parameters at construction and every rank then applies the same
all-reduced gradients, so the replicas stay bitwise equal; a replica that differs was corrupted
(silent data corruption, a bad device, a rank that loaded something else). The hook learns the
DDP modules from ``DistributedDataParallel.__init__`` (wrapped) and checksums their parameters
after the closing optimizer's ``step()`` every ``fingerprint_every`` steps:

- each parameter's bits are read as integers of the same size (``Tensor.view(int32)`` for
  float32: no copy, no rounding) and summed in int64 (integer addition wraps and is exact and
  order-free, so every rank gets the same sum from the same bits, and one flipped bit changes it
  by ``+-2**b``);
- the per-tensor sums ``s_i`` are combined on the hook thread as ``sum((2i + 1) x s_i) mod 2**63``.

Coverage: every element while the model has at most ``fingerprint_max_elements`` (16M by default:
one read of 64 MB of float32, less than a hundredth of what a training step reads); beyond that,
tensor ``i`` contributes ``k_i = max(1, budget x n_i / total)`` elements, a strided slice
``flat[start_i::n_i // k_i][:k_i]`` with ``start_i`` derived from the shape alone, so every rank
reads the same elements. A flipped bit outside the sample is then not seen.

The sums are computed on the training thread (a few elementwise reductions, enqueued
asynchronously on a GPU); the hook thread reads the small result.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_INT_BY_SIZE = {8: "int64", 4: "int32", 2: "int16", 1: "int8"}


@dataclass(frozen=True, slots=True)
class Slice:
    """Which elements of one flattened parameter are read: ``flat[start::stride][:count]``."""

    start: int
    stride: int
    count: int


def plan(numels: list[int], budget: int) -> list[Slice]:
    """The elements read per tensor (see the module docstring): all of them within ``budget``."""
    total = sum(numels)
    if total <= budget:
        return [Slice(0, 1, n) for n in numels]
    out = []
    for n in numels:
        k = max(1, min(n, budget * n // max(total, 1)))
        stride = max(1, n // k)
        start = (n * 2654435761) % stride  # from the shape alone: the same on every rank
        out.append(Slice(start, stride, k))
    return out


def combine(sums: list[int]) -> int:
    """The checksum of per-tensor sums: ``sum((2i + 1) x s_i) mod 2**63``."""
    return sum((2 * i + 1) * s for i, s in enumerate(sums)) % (1 << 63)


@dataclass(frozen=True, slots=True)
class Group:
    """One data-parallel group's parameters and what is read of each."""

    name: str
    size: int
    params: tuple[Any, ...]
    slices: tuple[Slice, ...]
    num_total: int

    @property
    def num_sampled(self) -> int:
        return sum(s.count for s in self.slices)


class Replicas:
    """The DDP modules of this process (weakly held), their names, and their checksums."""

    def __init__(self, torch: Any, pg_info: Callable[[Any], tuple[str, int]], budget: int) -> None:
        self.torch = torch
        self.pg_info = pg_info
        self.budget = budget
        self._ddps: list[weakref.ref[Any]] = []
        self._groups: list[Group] | None = None
        self._module_names: dict[int, str] = {}
        self._param_names: dict[int, str] = {}

    def add(self, ddp: Any) -> None:
        """A DDP module was built: its parameters join the fingerprint from the next one."""
        self._ddps.append(weakref.ref(ddp))
        self._groups = None
        inner = getattr(ddp, "module", ddp)
        self._module_names.update({id(m): name for name, m in inner.named_modules()})
        self._param_names.update({id(p): name for name, p in inner.named_parameters()})

    def module_name(self, module: Any) -> str:
        name = self._module_names.get(id(module))
        if name is None:
            return type(module).__name__
        return name or "(model)"

    def param_name(self, param: Any, index: int) -> str:
        return self._param_names.get(id(param), f"param[{index}]")

    def groups(self) -> list[Group]:
        if self._groups is None:
            self._groups = self._build()
        return self._groups

    def _build(self) -> list[Group]:
        by_group: dict[str, tuple[int, list[Any]]] = {}
        alive = [d for d in (r() for r in self._ddps) if d is not None]
        for ddp in alive:
            name, size = self.pg_info(getattr(ddp, "process_group", None))
            params = [
                p
                for p in ddp.module.parameters()
                if p.layout == self.torch.strided and p.device.type != "meta"
                and p.element_size() in _INT_BY_SIZE
            ]  # fmt: skip
            by_group.setdefault(name, (size, []))[1].extend(params)
        out = []
        for name, (size, params) in by_group.items():
            numels = [p.numel() for p in params]
            out.append(
                Group(name, size, tuple(params), tuple(plan(numels, self.budget)), sum(numels))
            )
        return out

    def sums(self, group: Group) -> Any:
        """One int64 tensor of per-parameter sums (on the parameters' device; not read here)."""
        torch = self.torch
        parts = []
        with torch.no_grad():
            for p, s in zip(group.params, group.slices, strict=True):
                flat = p.detach().reshape(-1)
                if s.stride != 1 or s.count != flat.numel():
                    flat = flat[s.start :: s.stride][: s.count]
                ints = flat.view(getattr(torch, _INT_BY_SIZE[p.element_size()]))
                parts.append(ints.sum(dtype=torch.int64))
            if not parts:
                return None
            device = parts[0].device
            return torch.stack([t if t.device == device else t.to(device) for t in parts])
