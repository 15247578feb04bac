"""GpuCollector over the scripted FakeGpuBackend, on an injected clock (no sleeps)."""

from __future__ import annotations

import pytest

from diag import schema
from diag.daemon.collectors.base import stamp
from diag.daemon.collectors.gpu import GpuCollector
from diag.errors import ConfigError
from diag.gpu import open_backend
from diag.gpu.backend import HW_SLOWDOWN, throttle_reason_names
from diag.gpu.fake import FakeGpuBackend


class FakeClock:
    def __init__(self) -> None:
        self.ns = 5_000_000_000

    def __call__(self) -> int:
        return self.ns

    def at(self, s: float) -> None:
        self.ns = 5_000_000_000 + int(s * 1e9)


def samples(events: list[schema.Event]) -> dict[int, schema.GpuSample]:
    return {e.gpu_index: e for e in events if isinstance(e, schema.GpuSample)}


def test_healthy_devices_sample_every_field() -> None:
    clock = FakeClock()
    c = GpuCollector(FakeGpuBackend.healthy(4, clock=clock), interval_s=0.5)
    assert c.interval_s == 0.5 and c.name == "gpu"
    events = list(c.collect(123))
    by_gpu = samples(events)
    assert sorted(by_gpu) == [0, 1, 2, 3]
    s = by_gpu[2]
    assert s.ts_ns == 123 and s.rank == -1
    assert s.uuid == "GPU-fake-0002"
    assert s.sm_clock_mhz == s.sm_clock_max_mhz == 1980
    assert s.throttle_reasons_mask == 0 and s.throttle_reasons == ""
    assert s.power_w == 610.0 and s.power_limit_w == 700.0
    assert s.ecc_dbe_volatile == 0 and s.pcie_replay_count == 0


def test_scripted_throttle_starts_and_ends_on_time() -> None:
    clock = FakeClock()
    backend = FakeGpuBackend.healthy(2, clock=clock).throttle(
        1, at_s=10, until_s=20, sm_clock_mhz=900, util_pct=40.0
    )
    c = GpuCollector(backend)
    clock.at(9.9)
    assert samples(list(c.collect(1)))[1].sm_clock_mhz == 1980
    clock.at(10)
    by_gpu = samples(list(c.collect(2)))
    assert by_gpu[1].sm_clock_mhz == 900
    assert by_gpu[1].util_pct == 40.0
    assert by_gpu[1].throttle_reasons_mask == HW_SLOWDOWN
    assert by_gpu[1].throttle_reasons == "hw_slowdown"
    assert by_gpu[0].sm_clock_mhz == 1980  # the other device is untouched
    clock.at(20)
    assert samples(list(c.collect(3)))[1].throttle_reasons_mask == 0


def test_xid_delivered_once_and_nvlink_counters_grow() -> None:
    clock = FakeClock()
    c = GpuCollector(FakeGpuBackend.healthy(1, clock=clock).xid(0, at_s=5, xid=79, message="off"))
    clock.at(1)
    first = list(c.collect(1))
    assert not [e for e in first if isinstance(e, schema.XidEvent)]
    clock.at(6)
    second = list(c.collect(2))
    (xid,) = [e for e in second if isinstance(e, schema.XidEvent)]
    assert (xid.gpu_index, xid.xid, xid.message) == (0, 79, "off")
    clock.at(7)
    third = list(c.collect(3))
    assert not [e for e in third if isinstance(e, schema.XidEvent)]
    tx = [samples(ev)[0].nvlink_tx_bytes for ev in (first, second, third)]
    assert None not in tx
    assert tx == sorted(tx) and len(set(tx)) == 3  # type: ignore[type-var]


def test_throttle_names_skip_idle_and_unknown_bits() -> None:
    assert throttle_reason_names(0x1) == ""
    assert throttle_reason_names(0x1 | 0x4 | 0x40 | 0x10000) == "sw_power_cap,hw_thermal_slowdown"


def test_fake_rejects_unknown_fields_and_devices() -> None:
    with pytest.raises(ValueError):
        FakeGpuBackend.healthy(1).set(0, at_s=0, no_such_field=1)
    with pytest.raises(ValueError):
        FakeGpuBackend.healthy(1).throttle(3, at_s=0)


def test_stamp_fills_the_daemon_envelope() -> None:
    (s,) = samples(list(GpuCollector(FakeGpuBackend.healthy(1)).collect(9))).values()
    out = stamp(s, host="n1", job_id="j", source="n1/daemon/7", seq=4)
    assert (out.host, out.job_id, out.source, out.seq, out.ts_ns) == (
        "n1",
        "j",
        "n1/daemon/7",
        4,
        9,
    )


def test_open_backend_by_name() -> None:
    fake = open_backend("fake", fake_gpus=3)
    assert len(fake.read()) == 3
    with pytest.raises(ConfigError):
        open_backend("cuda")
