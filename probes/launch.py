"""Launch latency, in microseconds per op (lower is better).

On a GPU: ``calls`` back-to-back launches of a one-element add, synchronized once at the end
(the queue's launch cost). On the CPU there is no kernel launch; the probe measures torch's op
dispatch latency instead (the same one-element add, run eagerly), which is what a CPU job pays per
op and what a starved core slows down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from probes.base import ProbeContext, ProbeResult, best_time, params_dict, sync_for


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchParams:
    calls: int = 2000
    repeats: int = 15
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.calls <= 1_000_000 or not 1 <= self.repeats <= 100:
            raise ValueError("calls must be in [1, 1e6] and repeats in [1, 100]")


class LaunchProbe:
    name: ClassVar[str] = "launch"
    Params: ClassVar[type] = LaunchParams

    def run(self, params: LaunchParams, ctx: ProbeContext) -> list[ProbeResult]:
        import torch

        x = torch.zeros(1, device=ctx.device)

        def launches() -> None:
            for _ in range(params.calls):
                x.add_(1.0)

        secs = best_time(launches, params.repeats, sync_for(ctx.device))
        what = "kernel launch" if ctx.device.startswith("cuda") else "CPU op dispatch"
        return [
            ProbeResult(
                probe=self.name,
                device=ctx.device_id,
                status="ok",
                value=secs / params.calls * 1e6,
                unit="us",
                metric="op",
                detail=what,
                params=params_dict(params),
                lower_is_better=True,
            )
        ]
