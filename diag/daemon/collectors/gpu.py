"""GPU telemetry: the :class:`GpuBackend` seam, the collector, and a scripted fake backend.

A backend returns our own frozen dataclasses (:class:`GpuReading`, :class:`XidReading`), never
NVML structures, so the collector, the tests and the CPU demo do not need a GPU. The real backend
is :class:`diag.gpu.nvml.NvmlBackend` (the only module that imports pynvml);
:class:`FakeGpuBackend` is scripted: ``FakeGpuBackend.healthy(8).throttle(3, at_s=10)``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.collectors.base import UNSTAMPED
from diag.errors import ConfigError

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


_READING_FIELDS = tuple(f.name for f in dataclasses.fields(GpuReading))


class GpuCollector:
    """Turns backend readings into ``GpuSample`` and ``XidEvent`` events (rank -1: node-level)."""

    name: ClassVar[str] = "gpu"

    def __init__(self, backend: GpuBackend, *, interval_s: float = 1.0) -> None:
        self.backend = backend
        self.interval_s = interval_s

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> GpuCollector:
        return cls(backend_from_config(cfg), interval_s=cfg.gpu_interval_s)

    def collect(self, now_ns: int) -> Iterable[schema.Event]:
        out: list[schema.Event] = []
        for r in self.backend.read():
            fields = {name: getattr(r, name) for name in _READING_FIELDS}
            out.append(
                schema.GpuSample(
                    ts_ns=now_ns,
                    throttle_reasons=throttle_reason_names(r.throttle_reasons_mask),
                    **fields,
                    **UNSTAMPED,  # type: ignore[arg-type]
                )
            )
        for x in self.backend.poll_xids():
            out.append(
                schema.XidEvent(
                    ts_ns=now_ns,
                    gpu_index=x.gpu_index,
                    xid=x.xid,
                    message=x.message,
                    **UNSTAMPED,  # type: ignore[arg-type]
                )
            )
        return out

    def close(self) -> None:
        self.backend.close()


def backend_from_config(cfg: DaemonConfig) -> GpuBackend:
    """The backend ``cfg.gpu_backend`` names ("nvml" or "fake"); "none" is not a backend."""
    if cfg.gpu_backend == "fake":
        return FakeGpuBackend.healthy(cfg.fake_gpus)
    if cfg.gpu_backend == "nvml":
        from diag.gpu.nvml import NvmlBackend  # pynvml only when NVML is asked for

        return NvmlBackend.open()
    raise ConfigError(f"unknown gpu_backend {cfg.gpu_backend!r} (use nvml, fake or none)")


@dataclass(frozen=True, slots=True)
class _Change:
    gpu_index: int
    start_ns: int  # since the fake's start
    end_ns: int | None
    fields: dict[str, Any]


class FakeGpuBackend:
    """A scripted backend: healthy devices plus timed changes, on an injected monotonic clock.

    Times (``at_s``, ``until_s``) are seconds since the backend was created. Script methods return
    the backend so they chain:
    ``FakeGpuBackend.healthy(4).throttle(2, at_s=5).xid(1, at_s=8, xid=79)``.
    NVLink counters grow at ``nvlink_bytes_per_s`` per direction so rates can be derived.
    """

    def __init__(
        self,
        devices: list[GpuReading],
        *,
        clock: Callable[[], int] = time.monotonic_ns,
        nvlink_bytes_per_s: int = 50_000_000_000,
    ) -> None:
        self._devices = devices
        self._clock = clock
        self._t0 = clock()
        self._nvlink_rate = nvlink_bytes_per_s
        self._changes: list[_Change] = []
        self._xids: list[tuple[int, XidReading]] = []  # (at_ns, xid), pending delivery
        self.closed = False

    @classmethod
    def healthy(cls, n: int, *, clock: Callable[[], int] = time.monotonic_ns) -> FakeGpuBackend:
        """``n`` busy, cool, unthrottled 80 GB devices."""
        devices = [
            GpuReading(
                gpu_index=i,
                uuid=f"GPU-fake-{i:04d}",
                name="Fake H100 80GB",
                util_pct=97.0,
                mem_util_pct=45.0,
                mem_used_bytes=60 * 1024**3,
                mem_total_bytes=80 * 1024**3,
                sm_clock_mhz=1980,
                mem_clock_mhz=2619,
                sm_clock_max_mhz=1980,
                temp_c=62.0,
                power_w=610.0,
                power_limit_w=700.0,
                throttle_reasons_mask=0,
                ecc_sbe_volatile=0,
                ecc_dbe_volatile=0,
                pcie_tx_kbps=2_000_000,
                pcie_rx_kbps=2_000_000,
                pcie_replay_count=0,
                nvlink_tx_bytes=0,
                nvlink_rx_bytes=0,
            )
            for i in range(n)
        ]
        return cls(devices, clock=clock)

    def set(
        self, gpu: int, *, at_s: float, until_s: float | None = None, **fields: Any
    ) -> FakeGpuBackend:
        """From ``at_s`` (until ``until_s``) device ``gpu`` reports ``fields`` instead."""
        unknown = set(fields) - set(_READING_FIELDS)
        if unknown or not 0 <= gpu < len(self._devices):
            raise ValueError(f"fake GPU {gpu}: bad device or fields {sorted(unknown)}")
        end = None if until_s is None else int(until_s * 1e9)
        self._changes.append(_Change(gpu, int(at_s * 1e9), end, fields))
        return self

    def throttle(
        self,
        gpu: int,
        *,
        at_s: float,
        until_s: float | None = None,
        sm_clock_mhz: int = 990,
        reasons_mask: int = HW_SLOWDOWN,
        util_pct: float | None = None,
    ) -> FakeGpuBackend:
        """Device ``gpu`` slows down: SM clock ``sm_clock_mhz``, throttle bits ``reasons_mask``."""
        fields: dict[str, Any] = {
            "sm_clock_mhz": sm_clock_mhz,
            "throttle_reasons_mask": reasons_mask,
        }
        if util_pct is not None:
            fields["util_pct"] = util_pct
        return self.set(gpu, at_s=at_s, until_s=until_s, **fields)

    def xid(self, gpu: int, *, at_s: float, xid: int, message: str = "") -> FakeGpuBackend:
        """Device ``gpu`` reports XID ``xid`` at ``at_s`` (delivered once, by the next poll)."""
        self._xids.append((int(at_s * 1e9), XidReading(gpu_index=gpu, xid=xid, message=message)))
        return self

    def read(self) -> list[GpuReading]:
        elapsed = self._clock() - self._t0
        nvlink = self._nvlink_rate * max(elapsed, 0) // 1_000_000_000
        out = []
        for dev in self._devices:
            fields: dict[str, Any] = {}
            if dev.nvlink_tx_bytes is not None:
                fields.update(nvlink_tx_bytes=nvlink, nvlink_rx_bytes=nvlink)
            for ch in self._changes:
                active = ch.start_ns <= elapsed and (ch.end_ns is None or elapsed < ch.end_ns)
                if ch.gpu_index == dev.gpu_index and active:
                    fields.update(ch.fields)
            out.append(dataclasses.replace(dev, **fields))
        return out

    def poll_xids(self) -> list[XidReading]:
        elapsed = self._clock() - self._t0
        due = [x for at, x in self._xids if at <= elapsed]
        self._xids = [(at, x) for at, x in self._xids if at > elapsed]
        return due

    def close(self) -> None:
        self.closed = True
