"""GEMM throughput: ``torch.matmul`` GFLOP/s per dtype and shape (2*m*k*n flops per call).

On the CPU ``threads`` pins torch's intra-op threads (default 1: one core, stable on a shared
machine; 0 leaves torch's default); a dtype the device cannot multiply is ``unsupported``. Each
timed run repeats the multiply for at least ``min_run_s`` so a CPU quota or a clock throttle that
acts per scheduling period is seen in every run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from probes.base import (
    MAX_BYTES,
    MAX_DIM,
    MAX_FLOP,
    MAX_SHAPES,
    MAX_THREADS,
    ProbeContext,
    ProbeResult,
    best_time,
    params_dict,
    sync_for,
)

DTYPES = ("float32", "bfloat16", "float16")


#: single calls timed to size a timed run (the fastest of them: see :meth:`GemmProbe.run`)
CALIBRATION_CALLS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmParams:
    shapes: tuple[tuple[int, int, int], ...] = ((1024, 1024, 1024),)
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    repeats: int = 15
    min_run_s: float = 0.05
    threads: int = 1
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for dt in self.dtypes:
            if dt not in DTYPES:
                raise ValueError(f"dtypes: {dt!r} is not one of {DTYPES}")
        if not 1 <= len(self.shapes) <= MAX_SHAPES:
            raise ValueError(f"shapes: 1 to {MAX_SHAPES} of them")
        for shape in self.shapes:
            if len(shape) != 3 or min(shape) <= 0 or max(shape) > MAX_DIM:
                raise ValueError(f"shapes: {shape} is not (m, k, n) with 0 < each <= {MAX_DIM}")
            m, k, n = shape
            if 2 * m * k * n > MAX_FLOP or 4 * (m * k + k * n + m * n) > MAX_BYTES:
                raise ValueError(
                    f"shapes: {shape} costs more than {MAX_FLOP:.0e} flops or "
                    f"{MAX_BYTES >> 30} GiB per call"
                )
        if not 1 <= self.repeats <= 100 or not 0 < self.min_run_s <= 10:
            raise ValueError("repeats must be in [1, 100], min_run_s in (0, 10]")
        if not 0 <= self.threads <= MAX_THREADS:
            raise ValueError(f"threads must be in [0, {MAX_THREADS}] (0: torch's default)")


class GemmProbe:
    name: ClassVar[str] = "gemm"
    Params: ClassVar[type] = GemmParams

    def run(self, params: GemmParams, ctx: ProbeContext) -> list[ProbeResult]:
        import torch

        if ctx.device == "cpu" and params.threads:
            torch.set_num_threads(params.threads)
        sync = sync_for(ctx.device)
        out = []
        for dtype in params.dtypes:
            for m, k, n in params.shapes:
                metric = f"{dtype} {m}x{k}x{n}"
                base: dict[str, Any] = {
                    "probe": self.name,
                    "device": ctx.device_id,
                    "params": params_dict(params),
                }
                try:
                    a = torch.randn(m, k, device=ctx.device).to(getattr(torch, dtype))
                    b = torch.randn(k, n, device=ctx.device).to(getattr(torch, dtype))
                    # the fastest of a few calls: one call timed alone may land in a
                    # quota's throttled gap (5 ms, ~8 calls long at 512^3), and runs sized on
                    # it came out a few ms long, short enough for the best of them to fit
                    # between two throttles (CI: a 50 % quota measured 0.94x the healthy rate)
                    once = best_time(functools.partial(torch.matmul, a, b), CALIBRATION_CALLS, sync)
                except (RuntimeError, TypeError) as exc:
                    out.append(ProbeResult(**base, status="unsupported", detail=f"{metric}: {exc}"))
                    continue
                iters = max(1, int(params.min_run_s / max(once, 1e-6)))

                def many(a: torch.Tensor = a, b: torch.Tensor = b, iters: int = iters) -> None:
                    for _ in range(iters):
                        torch.matmul(a, b)

                secs = best_time(many, params.repeats, sync) / iters
                value = 2.0 * m * k * n / secs / 1e9
                out.append(
                    ProbeResult(**base, status="ok", value=value, unit="GFLOP/s", metric=metric)
                )
        return out
