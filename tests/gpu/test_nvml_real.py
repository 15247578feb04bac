"""The real NVML backend on a real GPU. Skipped where NVML or a GPU is absent (CI, this machine).

Run on a GPU machine: ``python -m pytest tests/gpu -q``.
"""

from __future__ import annotations

import pytest

from diag.daemon.collectors.gpu import GpuCollector
from diag.errors import CollectorUnavailable
from diag.gpu.nvml import NvmlBackend
from diag.schema import GpuSample

pytestmark = pytest.mark.gpu


@pytest.fixture
def backend() -> NvmlBackend:
    try:
        b = NvmlBackend.open()
    except CollectorUnavailable as exc:
        pytest.skip(str(exc))
    if not b.read():
        pytest.skip("NVML found no GPU")
    return b


def test_readings_are_physical(backend: NvmlBackend) -> None:
    for r in backend.read():
        assert r.name and r.uuid.startswith("GPU-")
        assert r.sm_clock_mhz is not None and 0 < r.sm_clock_mhz <= (r.sm_clock_max_mhz or 10_000)
        assert r.temp_c is not None and 0 < r.temp_c < 120
        assert r.power_w is not None and 0 < r.power_w <= (r.power_limit_w or 2_000) * 1.2
        assert r.mem_total_bytes and 0 <= (r.mem_used_bytes or 0) <= r.mem_total_bytes
    assert backend.poll_xids() == [] or all(x.xid > 0 for x in backend.poll_xids())
    backend.close()


def test_health_readings_are_in_range(backend: NvmlBackend) -> None:
    for r in backend.read():
        if r.pcie_link_width is not None and r.pcie_link_width_max is not None:
            assert 1 <= r.pcie_link_width <= r.pcie_link_width_max <= 32
        if r.pcie_link_gen is not None and r.pcie_link_gen_max is not None:
            assert 1 <= r.pcie_link_gen <= r.pcie_link_gen_max <= 7
        for flag in (r.row_remap_pending, r.row_remap_failure, r.retired_pages_pending):
            assert flag in (None, 0, 1)
        counts = (r.remapped_rows_correctable, r.retired_pages_sbe, r.nvlink_replay_errors)
        assert all(c is None or c >= 0 for c in counts)
    backend.close()


def test_collector_emits_one_sample_per_device(backend: NvmlBackend) -> None:
    n = len(backend.read())
    events = list(GpuCollector(backend, interval_s=1.0).collect(0))
    samples = [e for e in events if isinstance(e, GpuSample)]
    assert sorted(s.gpu_index for s in samples) == list(range(n))
