"""NvmlBackend: "no GPU telemetry" without NVML, and per-field guards (with a stand-in module)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from diag.errors import CollectorUnavailable
from diag.gpu.nvml import NvmlBackend


def test_without_nvml_library_it_is_unavailable() -> None:
    try:
        backend = NvmlBackend.open()
    except CollectorUnavailable as exc:
        assert str(exc).startswith("no GPU telemetry: ")
        assert "\n" not in str(exc)
    else:  # a machine with a GPU: the real backend works
        backend.close()
        pytest.skip("NVML is present here")


class NVMLError(Exception):
    pass


class FakeNvml:
    """Just enough of pynvml: two devices; device 1 supports few queries (like an old GPU)."""

    NVMLError = NVMLError
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC = 0
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
    NVML_NVLINK_MAX_LINKS = 4
    NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, *, init_error: bool = False) -> None:
        self.init_error = init_error
        self.xids = [SimpleNamespace(device="h0", eventData=79)]
        self.shut = False
        self.health_calls = 0

    def _full(self, h: str) -> None:
        if h != "h0":
            raise NVMLError("Not Supported")

    def nvmlInit(self) -> None:
        if self.init_error:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetUUID(self, h: str) -> bytes:
        return f"GPU-{h}".encode()

    def nvmlDeviceGetName(self, h: str) -> str:
        return "Test GPU"

    def nvmlDeviceGetMaxClockInfo(self, h: str, clock: int) -> int:
        return 1980

    def nvmlDeviceGetNvLinkState(self, h: str, link: int) -> int:
        self._full(h)
        if link >= 2:
            raise NVMLError("Invalid Argument")
        return 1

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, h: str, kinds: int, events: str) -> None:
        self._full(h)

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> Any:
        assert timeout_ms == 0
        if not self.xids:
            raise NVMLError("Timeout")
        return self.xids.pop()

    def nvmlEventSetFree(self, events: str) -> None:
        pass

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        return SimpleNamespace(used=10, total=80)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return 612_500

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        self._full(h)
        return 700_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        self._full(h)
        return 0x8 | 0x1

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return 71

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return 1410 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTotalEccErrors(self, h: str, kind: int, counter: int) -> int:
        self._full(h)
        return 3 if kind == self.NVML_MEMORY_ERROR_TYPE_CORRECTED else 0

    def nvmlDeviceGetPcieThroughput(self, h: str, counter: int) -> int:
        self._full(h)
        return 1000 + counter

    def nvmlDeviceGetPcieReplayCounter(self, h: str) -> int:
        self._full(h)
        return 2

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: str) -> int:
        self._full(h)
        return 4

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: str) -> int:
        self._full(h)
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: str) -> int:
        self._full(h)
        return 8

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: str) -> int:
        self._full(h)
        return 16

    def nvmlDeviceGetRetiredPages(self, h: str, cause: int) -> list[int]:
        raise NVMLError("Not Supported")  # Ampere and later remap rows instead

    def nvmlDeviceGetRemappedRows(self, h: str) -> tuple[int, int, int, int]:
        self._full(h)
        self.health_calls += 1
        return (2, 1, 1, 0)

    def nvmlDeviceGetNvLinkErrorCounter(self, h: str, link: int, counter: int) -> int:
        return 100 * (counter + 1) + link  # per link: replay 100, recovery 200, flit 300, data 400

    def nvmlDeviceGetFieldValues(self, h: str, ids: list[tuple[int, int]]) -> list[Any]:
        return [
            SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(ullVal=10 * (link + 1)))
            for _, link in ids
        ]


def test_readings_map_units_and_unsupported_fields_are_none() -> None:
    nvml = FakeNvml()
    backend = NvmlBackend.open(nvml)
    r0, r1 = backend.read()
    assert (r0.uuid, r0.name, r0.gpu_index) == ("GPU-h0", "Test GPU", 0)
    assert r0.util_pct == 97.0 and r0.mem_util_pct == 40.0
    assert r0.power_w == 612.5 and r0.power_limit_w == 700.0
    assert r0.sm_clock_mhz == 1410 and r0.sm_clock_max_mhz == 1980 and r0.mem_clock_mhz == 2619
    assert r0.throttle_reasons_mask == 0x9
    assert (r0.ecc_sbe_volatile, r0.ecc_dbe_volatile) == (3, 0)
    assert (r0.pcie_tx_kbps, r0.pcie_rx_kbps, r0.pcie_replay_count) == (1000, 1001, 2)
    assert r0.nvlink_tx_bytes == (10 + 20) * 1024  # KiB summed over the two active links
    # Device 1 answers only the basic queries: the rest is None, not an error.
    assert r1.util_pct == 97.0 and r1.temp_c == 71.0
    assert r1.power_limit_w is None and r1.ecc_sbe_volatile is None and r1.pcie_tx_kbps is None
    assert r1.nvlink_tx_bytes is None and r1.throttle_reasons_mask == 0
    # Health: a Gen4 x8 link on a Gen5 x16 device; rows remapped, one pending; no page retirement.
    assert (r0.pcie_link_gen, r0.pcie_link_gen_max) == (4, 5)
    assert (r0.pcie_link_width, r0.pcie_link_width_max) == (8, 16)
    assert r0.retired_pages_sbe is None and r0.retired_pages_dbe is None
    assert (r0.remapped_rows_correctable, r0.remapped_rows_uncorrectable) == (2, 1)
    assert (r0.row_remap_pending, r0.row_remap_failure) == (1, 0)
    # NVLink errors summed over the two active links (0 and 1)
    assert r0.nvlink_replay_errors == 100 + 101 and r0.nvlink_recovery_errors == 200 + 201
    assert (r0.nvlink_crc_flit_errors, r0.nvlink_crc_data_errors) == (300 + 301, 400 + 401)
    assert r1.pcie_link_width is None and r1.remapped_rows_correctable is None
    assert r1.nvlink_crc_flit_errors is None  # no active NVLink
    (xid,) = backend.poll_xids()
    assert (xid.gpu_index, xid.xid) == (0, 79)
    assert backend.poll_xids() == []
    backend.close()
    assert nvml.shut


def test_driver_not_loaded_is_unavailable() -> None:
    with pytest.raises(CollectorUnavailable, match=r"^no GPU telemetry: NVML did not initialise"):
        NvmlBackend.open(FakeNvml(init_error=True))


def test_health_counters_are_read_every_nth_sample_and_repeated_between() -> None:
    nvml = FakeNvml()
    backend = NvmlBackend.open(nvml, health_every=3)
    readings = [backend.read()[0] for _ in range(7)]
    assert nvml.health_calls == 3  # samples 0, 3 and 6
    assert all(r.remapped_rows_correctable == 2 for r in readings)
    backend.close()


def test_an_older_pynvml_without_the_health_functions_gives_none() -> None:
    nvml = FakeNvml()
    for name in ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetCurrPcieLinkWidth"):
        setattr(nvml, name, None)
    old = SimpleNamespace(
        **{
            k: getattr(nvml, k)
            for k in dir(nvml)
            if not k.startswith("_") and getattr(nvml, k) is not None
        }
    )
    r0 = NvmlBackend.open(old).read()[0]
    assert r0.remapped_rows_correctable is None and r0.pcie_link_width is None
    assert r0.pcie_link_width_max == 16 and r0.util_pct == 97.0
