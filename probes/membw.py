"""Device memory bandwidth: ``dst.copy_(src)`` of a ``size_mib`` buffer, in GB/s of traffic
(read plus write: 2 x size per copy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from probes.base import MAX_SIZE_MIB, ProbeContext, ProbeResult, best_time, params_dict, sync_for


@dataclass(frozen=True, slots=True, kw_only=True)
class MemBwParams:
    size_mib: int = 128
    repeats: int = 15
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.size_mib <= MAX_SIZE_MIB or not 1 <= self.repeats <= 100:
            raise ValueError(f"size_mib must be in [1, {MAX_SIZE_MIB}] and repeats in [1, 100]")


class MemBwProbe:
    name: ClassVar[str] = "membw"
    Params: ClassVar[type] = MemBwParams

    def run(self, params: MemBwParams, ctx: ProbeContext) -> list[ProbeResult]:
        import torch

        nbytes = params.size_mib * 2**20
        src = torch.ones(nbytes // 4, dtype=torch.float32, device=ctx.device)
        dst = torch.empty_like(src)
        secs = best_time(lambda: dst.copy_(src), params.repeats, sync_for(ctx.device))
        return [
            ProbeResult(
                probe=self.name,
                device=ctx.device_id,
                status="ok",
                value=2 * nbytes / secs / 1e9,
                unit="GB/s",
                metric=f"copy {params.size_mib} MiB",
                params=params_dict(params),
            )
        ]
