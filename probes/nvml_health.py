"""NVML health through the :class:`~diag.gpu.backend.GpuBackend` seam: per GPU, ``value`` is the
number of problems found (lower is better, 0 healthy) and ``detail`` names them: volatile
double-bit ECC errors, pending XIDs, active throttle reasons (idle excluded), SM clock below
``min_clock_fraction`` of its maximum while busy, power limit below ``min_power_limit_w``.
Retired pages and the PCIe link width/generation are not in the backend's readings yet and are not
checked. No backend (no NVML) is ``unsupported``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from diag.gpu.backend import throttle_reason_names
from probes.base import ProbeContext, ProbeResult, params_dict, unsupported


@dataclass(frozen=True, slots=True, kw_only=True)
class NvmlParams:
    min_clock_fraction: float = 0.9
    min_power_limit_w: float = 0.0
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_clock_fraction <= 1.0 or self.min_power_limit_w < 0:
            raise ValueError("min_clock_fraction must be in [0, 1], min_power_limit_w >= 0")


class NvmlProbe:
    name: ClassVar[str] = "nvml"
    Params: ClassVar[type] = NvmlParams

    def run(self, params: NvmlParams, ctx: ProbeContext) -> list[ProbeResult]:
        backend = ctx.gpu_backend
        if backend is None:
            return unsupported(self.name, ctx, "no NVML on this machine", params)
        xids: dict[int, list[int]] = {}
        for x in backend.poll_xids():
            xids.setdefault(x.gpu_index, []).append(x.xid)
        out = []
        for r in backend.read():
            problems = []
            if r.ecc_dbe_volatile:
                problems.append(f"ecc_dbe={r.ecc_dbe_volatile}")
            if r.gpu_index in xids:
                problems.append("xid=" + ",".join(map(str, xids[r.gpu_index])))
            if names := throttle_reason_names(r.throttle_reasons_mask):
                problems.append(f"throttle={names}")
            busy = (r.util_pct or 0) > 50 and r.sm_clock_mhz and r.sm_clock_max_mhz
            if busy and r.sm_clock_mhz < params.min_clock_fraction * r.sm_clock_max_mhz:
                problems.append(f"sm_clock={r.sm_clock_mhz}/{r.sm_clock_max_mhz}MHz")
            if r.power_limit_w is not None and r.power_limit_w < params.min_power_limit_w:
                problems.append(f"power_limit={r.power_limit_w:g}W")
            out.append(
                ProbeResult(
                    probe=self.name,
                    device=r.uuid or f"gpu{r.gpu_index}",
                    status="ok",
                    metric="problems",
                    value=float(len(problems)),
                    unit="count",
                    detail="; ".join(problems) or "healthy",
                    params=params_dict(params),
                    lower_is_better=True,
                )
            )
        return out
