"""Host-to-device and device-to-host bandwidth (pinned host memory), GB/s; ``unsupported``
without CUDA (there is no separate device memory to copy to)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from probes.base import (
    MAX_SIZE_MIB,
    ProbeContext,
    ProbeResult,
    best_time,
    params_dict,
    sync_for,
    unsupported,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostCopyParams:
    size_mib: int = 256
    repeats: int = 5
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.size_mib <= MAX_SIZE_MIB or not 1 <= self.repeats <= 100:
            raise ValueError(f"size_mib must be in [1, {MAX_SIZE_MIB}] and repeats in [1, 100]")


class HostCopyProbe:
    name: ClassVar[str] = "hostcopy"
    Params: ClassVar[type] = HostCopyParams

    def run(self, params: HostCopyParams, ctx: ProbeContext) -> list[ProbeResult]:
        if not ctx.device.startswith("cuda"):
            return unsupported(self.name, ctx, "no CUDA device: no host<->device copies", params)
        import torch

        nbytes = params.size_mib * 2**20
        host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        dev = torch.empty(nbytes, dtype=torch.uint8, device=ctx.device)
        sync = sync_for(ctx.device)
        out = []
        for metric, fn in (
            ("h2d", lambda: dev.copy_(host, non_blocking=True)),
            ("d2h", lambda: host.copy_(dev, non_blocking=True)),
        ):
            secs = best_time(fn, params.repeats, sync)
            out.append(
                ProbeResult(
                    probe=self.name,
                    device=ctx.device_id,
                    status="ok",
                    value=nbytes / secs / 1e9,
                    unit="GB/s",
                    metric=metric,
                    params=params_dict(params),
                )
            )
        return out
