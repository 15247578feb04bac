"""A scripted GPU backend for tests, the CPU demo and preflight on machines without a GPU:
``FakeGpuBackend.healthy(8).throttle(3, at_s=10)``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diag.gpu.backend import HW_SLOWDOWN, READING_FIELDS, GpuReading, XidReading


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
        """``n`` busy, cool, unthrottled 80 GB devices on full PCIe Gen5 x16 links, with row
        remapping (no page retirement, as on Ampere and later) and no NVLink errors."""
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
                pcie_link_gen=5,
                pcie_link_gen_max=5,
                pcie_link_width=16,
                pcie_link_width_max=16,
                remapped_rows_correctable=0,
                remapped_rows_uncorrectable=0,
                row_remap_pending=0,
                row_remap_failure=0,
                nvlink_crc_flit_errors=0,
                nvlink_crc_data_errors=0,
                nvlink_replay_errors=0,
                nvlink_recovery_errors=0,
            )
            for i in range(n)
        ]
        return cls(devices, clock=clock)

    def set(
        self, gpu: int, *, at_s: float, until_s: float | None = None, **fields: Any
    ) -> FakeGpuBackend:
        """From ``at_s`` (until ``until_s``) device ``gpu`` reports ``fields`` instead."""
        unknown = set(fields) - set(READING_FIELDS)
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

    def downtrain_pcie(
        self, gpu: int, *, at_s: float, width: int = 8, gen: int | None = None
    ) -> FakeGpuBackend:
        """Device ``gpu``'s PCIe link retrains at ``width`` lanes (and generation ``gen``)."""
        fields: dict[str, Any] = {"pcie_link_width": width}
        if gen is not None:
            fields["pcie_link_gen"] = gen
        return self.set(gpu, at_s=at_s, **fields)

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
