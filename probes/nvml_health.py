"""NVML health through the :class:`~diag.gpu.backend.GpuBackend` seam: per GPU, ``value`` is the
number of problems found (lower is better, 0 healthy) and ``detail`` names them: volatile
double-bit ECC errors, pending XIDs, active throttle reasons (idle excluded), SM clock below
``min_clock_fraction`` of its maximum while busy, power limit below ``min_power_limit_w``; the
PCIe link trained below its maximum width (``pcie_width=x8/x16``: a downtrained link halves
host-device bandwidth), or below its maximum generation while busy (an idle link steps down its
generation to save power, so only a busy device's counts); a row remap that failed (NVIDIA's RMA
criterion on Ampere and later) or waits for a GPU reset; a page retirement waiting for a reset,
or ``max_retired_pages`` or more retired pages (legacy GPUs retire at most 64). NVLink error
counters are cumulative since the driver loaded and are not judged from one reading (the daemon
and the analyzer judge their growth). No backend (no NVML) is ``unsupported``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from diag.gpu.backend import GpuReading, throttle_reason_names
from probes.base import ProbeContext, ProbeResult, params_dict, unsupported


@dataclass(frozen=True, slots=True, kw_only=True)
class NvmlParams:
    min_clock_fraction: float = 0.9
    min_power_limit_w: float = 0.0
    max_retired_pages: int = 60
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_clock_fraction <= 1.0 or self.min_power_limit_w < 0:
            raise ValueError("min_clock_fraction must be in [0, 1], min_power_limit_w >= 0")
        if self.max_retired_pages < 1:
            raise ValueError("max_retired_pages must be >= 1")


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
            problems.extend(_health_problems(r, busy=(r.util_pct or 0) > 50, params=params))
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


def _health_problems(r: GpuReading, *, busy: bool, params: NvmlParams) -> list[str]:
    """The PCIe link, row-remapping and page-retirement problems of one reading."""
    out = []
    width, width_max = r.pcie_link_width, r.pcie_link_width_max
    if width and width_max and width < width_max:
        out.append(f"pcie_width=x{width}/x{width_max}")
    gen, gen_max = r.pcie_link_gen, r.pcie_link_gen_max
    if busy and gen and gen_max and gen < gen_max:
        out.append(f"pcie_gen={gen}/{gen_max}")
    if r.row_remap_failure:
        out.append("row_remap_failure")
    if r.row_remap_pending:
        out.append("row_remap_pending (needs a GPU reset)")
    if r.retired_pages_pending:
        out.append("retired_pages_pending (needs a GPU reset)")
    retired = (r.retired_pages_sbe or 0) + (r.retired_pages_dbe or 0)
    if retired >= params.max_retired_pages:
        out.append(f"retired_pages={retired}")
    return out
