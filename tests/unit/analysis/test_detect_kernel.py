"""The kernel detector: a kernel slow on one rank, a regression on all ranks, nothing on noise."""

from __future__ import annotations

from link_kernel_scenarios import BASE, kernel_run, noisy

from diag.analysis.detectors import kernel
from diag.analysis.store import RunStore

CFG = kernel.KernelConfig()


def _with(factor: float, name: str, ranks: set[int], windows: set[int]):
    base = noisy(BASE)

    def f(n: str, r: int, w: int) -> float:
        return base(n, r, w) * (factor if n == name and r in ranks and w in windows else 1.0)

    return f


def test_mm_slow_on_rank_2_names_mm_not_matmul(tmp_path):
    kernel_run(tmp_path, _with(2.0, "aten::mm", {2}, set(range(5))))
    found = kernel.detect_from_store(RunStore.open(tmp_path), CFG)
    assert [(f.kernel, f.ranks) for f in found] == [("aten::mm", (2,))]
    f = found[0]
    assert f.cause == "kernel" and f.symptom == "slowdown"
    assert f.onset_step is None  # present from the first window
    assert f.slowdown is not None and 0.15 < f.slowdown < 0.25  # ~20 ms extra in 100 ms windows
    assert f.severity in ("warning", "critical")
    assert any(e.metric == "wrapper" and e.subject == "aten::matmul" for e in f.evidence)
    assert 0.5 < f.confidence <= 0.95


def test_regression_on_all_ranks_from_window_3(tmp_path):
    kernel_run(tmp_path, _with(1.8, "sm90_gemm", {0, 1, 2, 3}, {2, 3, 4}))
    found = kernel.detect_from_store(RunStore.open(tmp_path), CFG)
    assert [(f.kernel, f.ranks, f.id) for f in found] == [
        ("sm90_gemm", (0, 1, 2, 3), "kernel:sm90_gemm:regression")
    ]
    assert found[0].onset_step == 110  # window 3 starts at step 10 + 2 * 50
    assert found[0].slowdown is not None and 0.1 < found[0].slowdown < 0.2


def test_uniform_noise_gives_nothing(tmp_path):
    assert kernel.detect_from_store(kernel_run(tmp_path, noisy(BASE)), CFG) == []


def test_collective_kernels_are_ignored(tmp_path):
    store = kernel_run(tmp_path, _with(3.0, "nccl", {1}, set(range(5))))
    assert kernel.detect_from_store(store, CFG) == []


def test_small_excess_does_not_matter(tmp_path):
    # aten::add 2x on rank 2 is +5 ms, 5% of the 100 ms window: under an 8% threshold
    store = kernel_run(tmp_path, _with(2.0, "aten::add", {2}, set(range(5))))
    found = kernel.detect_from_store(store, kernel.KernelConfig(min_excess_frac=0.08))
    assert found == []


def test_empty_store_and_two_ranks(tmp_path):
    assert kernel.detect_from_store(RunStore.create(tmp_path / "e"), CFG) == []
    store = kernel_run(tmp_path / "two", _with(2.0, "aten::mm", {1}, set(range(5))), num_ranks=2)
    assert kernel.detect_from_store(store, CFG) == []
