"""The real GPU backend, over NVML. The only module that imports pynvml, and only when opened.

No NVML library or no driver is :class:`~diag.errors.CollectorUnavailable` ("no GPU telemetry:
..."), which the daemon reports once and carries on without GPU data. Every per-device query is
guarded on its own: a query the device or driver does not support gives ``None`` for that field,
never an error for the sample.

The counters that change on the scale of hours (retired pages, remapped rows, NVLink error
counters: several NVML calls per link) are read on every ``health_every``-th sample and repeated
in between; the PCIe link's maximum generation and width are read once, its current ones on every
sample.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from diag.errors import CollectorUnavailable
from diag.gpu.backend import GpuReading, XidReading

log = logging.getLogger(__name__)
T = TypeVar("T")


class NvmlBackend:
    """Reads every visible GPU through NVML. Build it with :meth:`open`."""

    def __init__(self, nvml: Any, handles: list[Any], *, health_every: int = 10) -> None:
        self._nvml = nvml
        self._handles = handles
        self._static = [self._describe(h) for h in handles]
        self._links = [self._active_links(h) for h in handles]
        self._pcie_max = [self._pcie_max_of(h) for h in handles]
        self._events = self._xid_event_set()
        self._health_every = max(1, health_every)
        self._health: list[dict[str, Any]] = [{} for _ in handles]
        self._reads = 0

    @classmethod
    def open(cls, nvml: Any = None, *, health_every: int = 10) -> NvmlBackend:
        """Initialise NVML (``nvml``: pynvml, or a stand-in for tests) and find the devices."""
        if nvml is None:
            try:
                import pynvml

                nvml = pynvml
            except ImportError as exc:
                raise CollectorUnavailable(
                    f"no GPU telemetry: pynvml is not installed ({exc})"
                ) from None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise CollectorUnavailable(
                f"no GPU telemetry: NVML did not initialise ({exc})"
            ) from None
        try:
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except nvml.NVMLError as exc:
            nvml.nvmlShutdown()
            raise CollectorUnavailable(f"no GPU telemetry: cannot list devices ({exc})") from None
        if not handles:
            nvml.nvmlShutdown()
            raise CollectorUnavailable("no GPU telemetry: NVML sees no GPU")
        return cls(nvml, handles, health_every=health_every)

    def _try(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def _call(self, name: str, *args: Any) -> Any:
        """NVML function ``name`` on ``args``; None where it fails or this pynvml lacks it."""
        fn = getattr(self._nvml, name, None)
        return None if fn is None else self._try(fn, *args)

    def _describe(self, h: Any) -> tuple[str, str, int | None]:
        uuid = self._try(self._nvml.nvmlDeviceGetUUID, h) or ""
        name = self._try(self._nvml.nvmlDeviceGetName, h) or ""
        max_sm = self._try(self._nvml.nvmlDeviceGetMaxClockInfo, h, self._nvml.NVML_CLOCK_SM)
        return _text(uuid), _text(name), max_sm

    def _active_links(self, h: Any) -> list[int]:
        n = self._nvml
        links = []
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 0)):
            state = self._try(n.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                break  # no NVLink (or no more links) on this device
            if state:
                links.append(link)
        return links

    def _xid_event_set(self) -> Any:
        n = self._nvml
        events = self._try(n.nvmlEventSetCreate)
        if events is None:
            return None
        registered = 0
        for h in self._handles:
            if (
                self._try(n.nvmlDeviceRegisterEvents, h, n.nvmlEventTypeXidCriticalError, events)
                is None
            ):
                continue
            registered += 1
        if not registered:
            log.info("NVML XID events are not supported here; XIDs will not be reported")
        return events

    def _pcie_max_of(self, h: Any) -> tuple[int | None, int | None]:
        gen = self._call("nvmlDeviceGetMaxPcieLinkGeneration", h)
        return gen, self._call("nvmlDeviceGetMaxPcieLinkWidth", h)

    def read(self) -> list[GpuReading]:
        if self._reads % self._health_every == 0:
            self._health = [self._read_health(i, h) for i, h in enumerate(self._handles)]
        self._reads += 1
        return [
            dataclasses.replace(self._read_one(i, h), **self._health[i])
            for i, h in enumerate(self._handles)
        ]

    def _read_health(self, index: int, h: Any) -> dict[str, Any]:
        """The slowly changing counters: retired pages, remapped rows, NVLink errors."""
        n = self._nvml
        out: dict[str, Any] = {}
        for field, cause in (
            ("retired_pages_sbe", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
            ("retired_pages_dbe", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
        ):
            pages = None
            if hasattr(n, cause):
                pages = self._call("nvmlDeviceGetRetiredPages", h, getattr(n, cause))
            out[field] = None if pages is None else len(pages)
        out["retired_pages_pending"] = self._call("nvmlDeviceGetRetiredPagesPendingStatus", h)
        rows = self._call("nvmlDeviceGetRemappedRows", h)
        if rows is not None:
            corr, unc, pending, failure = (int(v) for v in rows)
            out.update(
                remapped_rows_correctable=corr,
                remapped_rows_uncorrectable=unc,
                row_remap_pending=pending,
                row_remap_failure=failure,
            )
        for field, counter in (
            ("nvlink_crc_flit_errors", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
            ("nvlink_crc_data_errors", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
            ("nvlink_replay_errors", "NVML_NVLINK_ERROR_DL_REPLAY"),
            ("nvlink_recovery_errors", "NVML_NVLINK_ERROR_DL_RECOVERY"),
        ):
            out[field] = self._nvlink_errors(index, h, counter)
        return out

    def _nvlink_errors(self, index: int, h: Any, counter: str) -> int | None:
        """NVLink error ``counter`` summed over the active links; None where none answers."""
        n, total, answered = self._nvml, 0, False
        if not hasattr(n, counter):
            return None
        for link in self._links[index]:
            value = self._call("nvmlDeviceGetNvLinkErrorCounter", h, link, getattr(n, counter))
            if value is not None:
                total, answered = total + int(value), True
        return total if answered else None

    def _read_one(self, index: int, h: Any) -> GpuReading:
        n, t = self._nvml, self._try
        uuid, name, max_sm = self._static[index]
        util = t(n.nvmlDeviceGetUtilizationRates, h)
        mem = t(n.nvmlDeviceGetMemoryInfo, h)
        power_mw = t(n.nvmlDeviceGetPowerUsage, h)
        limit_mw = t(n.nvmlDeviceGetEnforcedPowerLimit, h)
        reasons = t(_clock_event_reasons(n), h)
        temp = t(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        return GpuReading(
            gpu_index=index,
            uuid=uuid,
            name=name,
            util_pct=None if util is None else float(util.gpu),
            mem_util_pct=None if util is None else float(util.memory),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            sm_clock_mhz=t(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
            mem_clock_mhz=t(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
            sm_clock_max_mhz=max_sm,
            temp_c=None if temp is None else float(temp),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            throttle_reasons_mask=int(reasons or 0),
            ecc_sbe_volatile=t(
                n.nvmlDeviceGetTotalEccErrors,
                h,
                n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                n.NVML_VOLATILE_ECC,
            ),
            ecc_dbe_volatile=t(
                n.nvmlDeviceGetTotalEccErrors,
                h,
                n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                n.NVML_VOLATILE_ECC,
            ),
            pcie_tx_kbps=t(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES),
            pcie_rx_kbps=t(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES),
            pcie_replay_count=t(n.nvmlDeviceGetPcieReplayCounter, h),
            nvlink_tx_bytes=self._nvlink_bytes(index, h, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
            nvlink_rx_bytes=self._nvlink_bytes(index, h, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX),
            pcie_link_gen=self._call("nvmlDeviceGetCurrPcieLinkGeneration", h),
            pcie_link_gen_max=self._pcie_max[index][0],
            pcie_link_width=self._call("nvmlDeviceGetCurrPcieLinkWidth", h),
            pcie_link_width_max=self._pcie_max[index][1],
        )

    def _nvlink_bytes(self, index: int, h: Any, field_id: int) -> int | None:
        """Cumulative NVLink data bytes over the active links (NVML counts KiB), or None."""
        links = self._links[index]
        if not links:
            return None
        values = self._try(self._nvml.nvmlDeviceGetFieldValues, h, [(field_id, ln) for ln in links])
        if values is None:
            return None
        ok = [v.value.ullVal for v in values if v.nvmlReturn == 0]
        return sum(ok) * 1024 if ok else None

    def poll_xids(self) -> list[XidReading]:
        """XIDs the driver queued since the last poll (waits 0 ms)."""
        if self._events is None:
            return []
        n, out = self._nvml, []
        for _ in range(64):  # bounded: a storm of XIDs must not stall the daemon loop
            data = self._try(n.nvmlEventSetWait_v2, self._events, 0)
            if data is None:
                break  # NVML_ERROR_TIMEOUT: nothing (more) queued
            index = next((i for i, h in enumerate(self._handles) if _same(h, data.device)), -1)
            out.append(
                XidReading(gpu_index=index, xid=int(data.eventData), message="XID reported by NVML")
            )
        return out

    def close(self) -> None:
        if self._events is not None:
            self._try(self._nvml.nvmlEventSetFree, self._events)
        self._try(self._nvml.nvmlShutdown)


def _clock_event_reasons(n: Any) -> Callable[[Any], int]:
    fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
    return fn if fn is not None else n.nvmlDeviceGetCurrentClocksThrottleReasons


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _same(a: Any, b: Any) -> bool:
    """Whether two NVML device handles (ctypes pointers) name the same device."""
    if a is b or a == b:
        return True
    try:
        return bool(ctypes.cast(a, ctypes.c_void_p).value == ctypes.cast(b, ctypes.c_void_p).value)
    except (TypeError, ctypes.ArgumentError):
        return False
