"""Every registered probe on the CPU: a result with a status, never a raise; typed parameters."""

from __future__ import annotations

import threading

import pytest

from diag.gpu.fake import FakeGpuBackend
from probes import DEFAULT_PROBES, PROBES
from probes.__main__ import parse_params
from probes.base import STATUSES, ProbeContext, ProbeResult, run_guarded
from probes.gemm import GemmParams
from probes.launch import LaunchParams
from probes.membw import MemBwParams
from probes.numerics import NumericsParams, chain_digest
from probes.nvml_health import NvmlParams

CTX = ProbeContext(device="cpu", device_id="cpu test")

SMALL = {
    "gemm": GemmParams(shapes=((64, 64, 64),), repeats=2, min_run_s=0.005),
    "membw": MemBwParams(size_mib=4, repeats=2),
    "launch": LaunchParams(calls=50, repeats=2),
    "numerics": NumericsParams(size=16, depth=2),
}


@pytest.mark.parametrize("name", DEFAULT_PROBES)
def test_every_probe_returns_results_with_a_status(name: str) -> None:
    probe = PROBES[name]()
    params = SMALL.get(name) or probe.Params()
    results = run_guarded(probe, params, CTX, 30.0)
    assert results
    for r in results:
        assert r.probe == name and r.status in STATUSES
        assert r.status != "failed", r.detail
        if r.status == "ok":
            assert r.value is not None and r.unit


def test_cpu_has_no_host_copies_collectives_p2p_or_nvml() -> None:
    for name in ("hostcopy", "collective", "p2p", "nvml"):
        probe = PROBES[name]()
        [r] = run_guarded(probe, probe.Params(), CTX, 10.0)
        assert r.status == "unsupported" and r.detail


def test_gemm_reports_gflops_per_dtype() -> None:
    results = run_guarded(PROBES["gemm"](), SMALL["gemm"], CTX, 30.0)
    assert [r.metric for r in results] == ["float32 64x64x64", "bfloat16 64x64x64"]
    assert all(r.unit == "GFLOP/s" and (r.value or 0) > 0 for r in results)


def test_numerics_digest_is_deterministic() -> None:
    params = NumericsParams(size=32, depth=4, seed=7)
    assert chain_digest(params, "cpu") == chain_digest(params, "cpu")
    assert (
        chain_digest(params, "cpu")[0] != chain_digest(NumericsParams(size=32, depth=4), "cpu")[0]
    )


def test_nvml_health_through_the_fake_backend() -> None:
    backend = FakeGpuBackend.healthy(2, clock=lambda: 0)
    ctx = ProbeContext(device="cpu", device_id="cpu test", gpu_backend=backend)
    results = run_guarded(PROBES["nvml"](), NvmlParams(), ctx, 10.0)
    assert [(r.device, r.value, r.detail) for r in results] == [
        ("GPU-fake-0000", 0.0, "healthy"),
        ("GPU-fake-0001", 0.0, "healthy"),
    ]
    backend = FakeGpuBackend.healthy(2, clock=lambda: 0).throttle(1, at_s=0).xid(1, at_s=0, xid=79)
    ctx = ProbeContext(device="cpu", device_id="cpu test", gpu_backend=backend)
    bad = run_guarded(PROBES["nvml"](), NvmlParams(), ctx, 10.0)[1]
    assert bad.value is not None and bad.value >= 2 and "xid=79" in bad.detail


def test_nvml_health_names_link_and_memory_problems() -> None:
    backend = (
        FakeGpuBackend.healthy(4, clock=lambda: 0)
        .downtrain_pcie(0, at_s=0, width=8)
        .set(1, at_s=0, row_remap_pending=1)
        .set(2, at_s=0, row_remap_failure=1, remapped_rows_uncorrectable=9)
        .set(3, at_s=0, pcie_link_gen=1, util_pct=0.0)  # an idle link steps down: healthy
    )
    ctx = ProbeContext(device="cpu", device_id="cpu test", gpu_backend=backend)
    results = run_guarded(PROBES["nvml"](), NvmlParams(), ctx, 10.0)
    assert [r.detail for r in results] == [
        "pcie_width=x8/x16",
        "row_remap_pending (needs a GPU reset)",
        "row_remap_failure",
        "healthy",
    ]
    busy_gen3 = FakeGpuBackend.healthy(1, clock=lambda: 0).set(0, at_s=0, pcie_link_gen=3)
    retired = FakeGpuBackend.healthy(1, clock=lambda: 0).set(
        0, at_s=0, retired_pages_sbe=50, retired_pages_dbe=12, retired_pages_pending=1
    )
    details = [
        run_guarded(
            PROBES["nvml"](),
            NvmlParams(),
            ProbeContext(device="cpu", device_id="cpu test", gpu_backend=b),
            10.0,
        )[0].detail
        for b in (busy_gen3, retired)
    ]
    assert details == [
        "pcie_gen=3/5",
        "retired_pages_pending (needs a GPU reset); retired_pages=62",
    ]


class _Raises:
    name = "raises"
    Params = NvmlParams

    def run(self, params: object, ctx: ProbeContext) -> list[ProbeResult]:
        raise RuntimeError("boom\nsecond line")


class _Hangs:
    name = "hangs"
    Params = NvmlParams

    def __init__(self) -> None:
        self.release = threading.Event()

    def run(self, params: object, ctx: ProbeContext) -> list[ProbeResult]:
        self.release.wait(10)
        return []


def test_a_raising_probe_is_failed_with_one_line() -> None:
    [r] = run_guarded(_Raises(), NvmlParams(), CTX, 5.0)
    assert (r.status, r.detail) == ("failed", "RuntimeError: boom")


def test_a_hanging_probe_is_a_timeout() -> None:
    probe = _Hangs()
    [r] = run_guarded(probe, NvmlParams(), CTX, 0.05)
    probe.release.set()
    assert r.status == "timeout" and "0.05" in r.detail


def test_parameters_are_typed_and_validated() -> None:
    with pytest.raises(ValueError, match="dtypes"):
        GemmParams(dtypes=("int8",))
    with pytest.raises(ValueError, match="shapes"):
        GemmParams(shapes=((0, 1, 1),))
    assert parse_params("gemm", '{"shapes": [[8, 8, 8]]}') == GemmParams(shapes=((8, 8, 8),))
    with pytest.raises(ValueError, match="unexpected keyword"):
        parse_params("gemm", '{"cmd": "rm -rf /"}')
