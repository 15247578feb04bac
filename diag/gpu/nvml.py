"""The real GPU backend, over NVML. The only module that imports pynvml, and only when opened.

No NVML library or no driver is :class:`~diag.errors.CollectorUnavailable` ("no GPU telemetry:
..."), which the daemon reports once and carries on without GPU data. Every per-device query is
guarded on its own: a query the device or driver does not support gives ``None`` for that field,
never an error for the sample.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from diag.errors import CollectorUnavailable
from diag.gpu.backend import GpuReading, XidReading

log = logging.getLogger(__name__)
T = TypeVar("T")


class NvmlBackend:
    """Reads every visible GPU through NVML. Build it with :meth:`open`."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles
        self._static = [self._describe(h) for h in handles]
        self._links = [self._active_links(h) for h in handles]
        self._events = self._xid_event_set()

    @classmethod
    def open(cls, nvml: Any = None) -> NvmlBackend:
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
        return cls(nvml, handles)

    def _try(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

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

    def read(self) -> list[GpuReading]:
        return [self._read_one(i, h) for i, h in enumerate(self._handles)]

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
