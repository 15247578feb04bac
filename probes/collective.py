"""Collective bus bandwidth: ``all_reduce`` and ``all_gather`` over a range of sizes across every
rank of the initialized process group (gloo on CPU, NCCL on GPUs), in GB/s of bus bandwidth as
nccl-tests defines it: all-reduce ``size / t x 2(n-1)/n``, all-gather ``size / t x (n-1)/n``
(``size`` the full output). One process (no torchrun) is ``unsupported``.

Every rank must call it with the same parameters; the time is the slowest rank's (a max
all-reduce of each rank's best time), reported once, by rank 0.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from probes.base import ProbeContext, ProbeResult, best_time, params_dict, sync_for, unsupported

OPS = ("all_reduce", "all_gather")


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveParams:
    ops: tuple[str, ...] = OPS
    sizes_bytes: tuple[int, ...] = (1 << 16, 1 << 20, 1 << 23)
    repeats: int = 5
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for op in self.ops:
            if op not in OPS:
                raise ValueError(f"ops: {op!r} is not one of {OPS}")
        if len(self.ops) > len(OPS) or len(self.sizes_bytes) > 16:
            raise ValueError(f"at most {len(OPS)} ops and 16 sizes")
        for size in self.sizes_bytes:
            if not 4 <= size <= 1 << 32:
                raise ValueError(f"sizes_bytes: {size} is not in [4, 4 GiB]")
        if not 1 <= self.repeats <= 100:
            raise ValueError("repeats must be in [1, 100]")


def size_label(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


class CollectiveProbe:
    name: ClassVar[str] = "collective"
    Params: ClassVar[type] = CollectiveParams

    def run(self, params: CollectiveParams, ctx: ProbeContext) -> list[ProbeResult]:
        if not ctx.distributed or ctx.world_size < 2:
            return unsupported(self.name, ctx, "one process: launch under torchrun", params)
        import torch
        import torch.distributed as dist

        n = ctx.world_size
        sync = sync_for(ctx.device)
        out = []
        for op in params.ops:
            for size in params.sizes_bytes:
                numel = max(1, size // 4)
                fn: Callable[[], object]
                if op == "all_reduce":
                    fn = functools.partial(dist.all_reduce, torch.ones(numel, device=ctx.device))
                    factor = 2 * (n - 1) / n
                else:
                    part = torch.ones(max(1, numel // n), device=ctx.device)
                    fn = functools.partial(dist.all_gather, [torch.empty_like(part)] * n, part)
                    factor = (n - 1) / n
                secs = torch.tensor([best_time(fn, params.repeats, sync)], device=ctx.device)
                dist.all_reduce(secs, op=dist.ReduceOp.MAX)
                if ctx.rank != 0:  # every rank has the same number: rank 0 reports it
                    continue
                out.append(
                    ProbeResult(
                        probe=self.name,
                        device=f"world{n}",
                        status="ok",
                        metric=f"{op} {size_label(size)}",
                        value=size / float(secs.item()) * factor / 1e9,
                        unit="GB/s",
                        params=params_dict(params),
                    )
                )
        return out
