"""The :class:`GpuBackend` seam: where GPU readings come from, as diag's own frozen dataclasses.

A backend returns :class:`GpuReading` and :class:`XidReading`, never NVML structures, so the
daemon's collector, the probes, the tests and the CPU demo do not need a GPU. Backends:
:class:`diag.gpu.nvml.NvmlBackend` (the only module that imports pynvml) and the scripted
:class:`diag.gpu.fake.FakeGpuBackend`; :func:`diag.gpu.open_backend` picks one by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

#: NVML's clocks-event (throttle) reason bits and their names. Idle (0x1) is not a slowdown.
THROTTLE_REASONS: dict[int, str] = {
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
HW_SLOWDOWN = 0x8


def throttle_reason_names(mask: int) -> str:
    """Comma-separated names of the slowdown bits set in ``mask`` (idle, unknown bits omitted)."""
    return ",".join(name for bit, name in THROTTLE_REASONS.items() if mask & bit)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuReading:
    """One device's readings; the fields and units of :class:`diag.schema.GpuSample`.

    ``None`` where the device does not report a field. PCIe throughput is KB/s; NVLink counters are
    cumulative bytes summed over the active links; ECC counts are volatile (since driver load).
    """

    gpu_index: int
    uuid: str = ""
    name: str = ""
    util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons_mask: int = 0
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    pcie_tx_kbps: int | None = None
    pcie_rx_kbps: int | None = None
    pcie_replay_count: int | None = None
    nvlink_tx_bytes: int | None = None
    nvlink_rx_bytes: int | None = None
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_pending: int | None = None
    row_remap_failure: int | None = None
    nvlink_crc_flit_errors: int | None = None
    nvlink_crc_data_errors: int | None = None
    nvlink_replay_errors: int | None = None
    nvlink_recovery_errors: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class XidReading:
    """An XID error the driver reported for device ``gpu_index``."""

    gpu_index: int
    xid: int
    message: str = ""


class GpuBackend(Protocol):
    """Where GPU readings come from. Raises ``CollectorUnavailable`` if the source went away."""

    def read(self) -> list[GpuReading]:
        """One reading per device, by index."""
        ...

    def poll_xids(self) -> list[XidReading]:
        """XID errors reported since the last poll, without waiting."""
        ...

    def close(self) -> None: ...


#: The fields of a reading, in declaration order (the payload of a ``GpuSample`` beyond the mask).
READING_FIELDS = tuple(f.name for f in dataclasses.fields(GpuReading))
