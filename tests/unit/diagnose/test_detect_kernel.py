"""The kernel detector: a kernel slow on one rank, a regression on all ranks, nothing on noise."""

from __future__ import annotations

import pandas as pd

from diag.diagnose.detectors import kernel
from diag.store.run_store import RunStore
from tests.fakes.link_kernel_scenarios import BASE, kernel_run, noisy

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


def _job_wide(factors: dict[int, float], name: str = "aten::add"):
    base = noisy(BASE)

    def f(n: str, r: int, w: int) -> float:
        return base(n, r, w) * (factors[r] if n == name and w >= 2 else 1.0)

    return f


def test_a_regression_every_rank_shares_is_judged_on_them_all(tmp_path):
    # Every rank's aten::add (5 ms) got ~2x slower from window 2 (a change of the job's: Adam's
    # addcdiv_ 20x on four ranks as its state went denormal), and one rank's loss passed the 5%
    # floor: that rank was named alone ("regressed 48x on ranks [1]"). The ranks are one change:
    # on the median loss, under the floor, nothing; above it, every rank.
    under = kernel_run(tmp_path / "under", _job_wide({0: 1.9, 1: 1.9, 2: 2.25, 3: 1.85}))
    assert kernel.detect_from_store(under, CFG) == []
    over = kernel_run(tmp_path / "over", _job_wide({0: 2.2, 1: 1.9, 2: 2.3, 3: 2.2}))
    (found,) = kernel.detect_from_store(over, CFG)
    assert (found.kernel, found.ranks, found.onset_step) == ("aten::add", (0, 1, 2, 3), 110)
    # one rank's own regression stays its own
    (alone,) = kernel.detect_from_store(kernel_run(tmp_path / "one", _job_wide(
        {0: 1.0, 1: 1.0, 2: 2.3, 3: 1.0})), CFG)  # fmt: skip
    assert alone.ranks == (2,)


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


def _frames(tmp_path):
    store = RunStore.open(tmp_path)
    return store.frame("kernel"), store.frame("profile_window")


def test_more_calls_on_one_rank_is_more_work_not_a_slower_kernel(tmp_path):
    kernel_run(tmp_path, _with(2.0, "aten::mm", {2}, set(range(5))))
    k, w = _frames(tmp_path)
    more = (k["rank"] == 2) & k["name"].isin(["aten::mm", "aten::matmul"])
    k.loc[more, "num_calls"] = 20  # twice the calls: the 2x time is twice the work
    assert kernel.detect(k, w, CFG) == []
    k.loc[more, "num_calls"] = 11  # about the same calls: each call is slower
    assert [(f.kernel, f.ranks) for f in kernel.detect(k, w, CFG)] == [("aten::mm", (2,))]


def test_ranks_that_did_not_profile_a_window_are_unknown_not_zero(tmp_path):
    kernel_run(tmp_path, noisy(BASE))
    k, w = _frames(tmp_path)
    missing = k["rank"].isin([0, 1]) & k["window_id"].isin(["p110", "p160", "p210"])
    # With their windows read as 0, the median over ranks halves and ranks 2 and 3 look 2x slow.
    assert kernel.detect(k[~missing], w[~(w["rank"].isin([0, 1]) & w["window_id"].isin(
        ["p110", "p160", "p210"]))], CFG) == []  # fmt: skip


def test_autograd_node_wrappers_are_not_kernels(tmp_path):
    kernel_run(tmp_path, noisy(BASE))
    k, w = _frames(tmp_path)
    wrapper = k[k["name"] == "aten::add"].copy()
    wrapper["name"] = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    wrapper.loc[wrapper["rank"] == 1, "total_ns"] *= 4  # DDP's reducer hooks ran inside it
    assert kernel.detect(pd.concat([k, wrapper], ignore_index=True), w, CFG) == []


def test_more_calls_each_far_heavier_instead_of_the_peers_calls_is_a_slower_kernel(tmp_path):
    # another algorithm: 1.5x the calls of aten::mm, each 4x heavier, in place of half of its
    # aten::add calls (the rank does part of its peers' work another way)
    kernel_run(tmp_path, _with(6.0, "aten::mm", {2}, set(range(5))))
    k, w = _frames(tmp_path)
    more = (k["rank"] == 2) & k["name"].isin(["aten::mm", "aten::matmul"])
    k.loc[more, "num_calls"] = 15
    # on top of its peers' work (every operator of theirs called as often): more work
    assert kernel.detect(k, w, CFG) == []
    k.loc[(k["rank"] == 2) & (k["name"] == "aten::add"), "num_calls"] = 5
    assert [(f.kernel, f.ranks) for f in kernel.detect(k, w, CFG)] == [("aten::mm", (2,))]


def test_a_window_of_many_more_calls_is_other_work_not_a_regression(tmp_path):
    # held-out data.pipeline_microbatches: a long microbatch is 600 extra aten::tanh calls on
    # larger tensors, 2x per call against the run's first windows: other work, not a kernel
    # regression (it moves between replicas).
    kernel_run(tmp_path, _with(60.0, "aten::add", {1}, {2, 3, 4}))
    k, w = _frames(tmp_path)
    later = (
        (k["rank"] == 1)
        & (k["name"] == "aten::add")
        & k["window_id"].isin(["p110", "p160", "p210"])
    )
    k.loc[later, "num_calls"] = 300  # 30x the calls, each 2x the baseline's
    assert kernel.detect(k, w, CFG) == []


def test_a_window_cut_short_is_unknown_not_a_slow_window(tmp_path):
    # CI: one 4.6 ms preemption inside aten::item on rank 2 in the run's last whole window, and
    # a last window cut short at the job's end (one call per rank, no duration): the cut window's
    # 2 us excess made a second "slow window" and a kernel warning on an innocent rank.
    kernel_run(tmp_path, _with(40.0, "aten::add", {2}, {4}))  # the one-off, in the last window
    k, w = _frames(tmp_path)
    last = w["window_id"].max()
    cut_id = "p999"
    cut_k = k[k["window_id"] == last].assign(window_id=cut_id, step=999, total_ns=2000, num_calls=1)
    cut_k.loc[cut_k["rank"] == 2, "total_ns"] = 2600
    why = "window cut short: the hook was uninstalled"
    cut_w = w[w["window_id"] == last].assign(window_id=cut_id, step=999, ok=False, error=why)
    k2, w2 = pd.concat([k, cut_k], ignore_index=True), pd.concat([w, cut_w], ignore_index=True)
    assert [f.ranks for f in kernel.detect(k2, w2, CFG) if f.kernel == "aten::add"] == []
    # the same window complete (ok) is evidence again: two slow windows name rank 2
    w2.loc[w2["window_id"] == cut_id, "ok"] = True
    w2.loc[w2["window_id"] == cut_id, "duration_ns"] = 10_000  # 600 ns excess: 6% of it
    assert [f.ranks for f in kernel.detect(k2, w2, CFG) if f.kernel == "aten::add"] == [(2,)]


def test_a_kernel_that_explains_a_slowdown_since_its_onset_is_slow_in_most_windows_since(tmp_path):
    # Busy CI: a node slowdown on rank 1 from step 30, and a preemption inside aten::div in the
    # last of the windows after it read as "aten::div 81x on rank 1 in 1 profiler window": the
    # focused search (one window enough) counted consistency from the first slow window.
    kernel_run(tmp_path / "last", _with(30.0, "aten::add", {2}, {4}))  # windows at 10..210
    k, w = _frames(tmp_path / "last")
    assert [f.ranks for f in kernel.detect_for(k, w, (2,), 10, CFG)] == []
    # slow in four of the five windows since the onset: the operator explains it
    kernel_run(tmp_path / "most", _with(3.0, "aten::add", {2}, {0, 2, 3, 4}))
    k, w = _frames(tmp_path / "most")
    found = kernel.detect_for(k, w, (2,), 10, CFG)
    assert [(f.kernel, f.ranks) for f in found] == [("aten::add", (2,))]
    # one window after a late onset is all there is: it decides (the closed loop's window)
    k, w = _frames(tmp_path / "last")
    assert [f.ranks for f in kernel.detect_for(k, w, (2,), 210, CFG)] == [(2,)]


def test_preempted_is_the_wait_beyond_the_work_class_median_over_the_window_steps() -> None:
    import pandas as pd

    from diag.diagnose.detectors.kernel import preempted

    # cpu_wait_ms per step (rows) and rank; a two-step window at 10 and a one-step one at 20
    wait = pd.DataFrame(
        {0: [1.0, 1.0, 1.0, 1.0], 1: [1.0, 2.0, 1.0, 9.0], 2: [3.0, 3.0, 3.0, 3.0],
         3: [3.0, 3.0, 7.0, 3.0]},
        index=[10, 11, 20, 21],
    )  # fmt: skip
    windows = pd.DataFrame(
        {"window_id": ["a"] * 4 + ["b"] * 4, "rank": [0, 1, 2, 3] * 2,
         "step": [10] * 4 + [20] * 4, "num_steps": [2] * 4 + [1] * 4}
    )  # fmt: skip
    one = preempted(wait, windows)
    # window a sums (2, 3, 6, 6), median 4.5; window b (1, 1, 3, 7), median 2 (step 21 is out)
    assert one.loc["a"].tolist() == [0.0, 0.0, 1.5e6, 1.5e6]
    assert one.loc["b"].tolist() == [0.0, 0.0, 1e6, 5e6]
    # ranks 2 and 3 do other work (another stage): each compared with its own class
    two = preempted(wait, windows, {0: 0, 1: 0, 2: 1, 3: 1})
    assert two.loc["a"].tolist() == [0.0, 0.5e6, 0.0, 0.0]
    assert two.loc["b"].tolist() == [0.0, 0.0, 0.0, 2e6]
    assert preempted(wait.iloc[:0], windows).empty and preempted(wait, windows.iloc[:0]).empty


def test_preempted_leaves_the_wait_its_own_demand_explains() -> None:
    """A rank computing longer on a host the job oversubscribes waits longer in proportion:
    that wait is the slow operator's (a float64 layer), not a competitor's."""
    import pandas as pd

    from diag.diagnose.detectors.kernel import preempted

    windows = pd.DataFrame(
        {"window_id": ["a"] * 4, "rank": [0, 1, 2, 3], "step": [10] * 4, "num_steps": [2] * 4}
    )
    # per step: ranks 0, 2, 3 compute 10 ms and wait 2.5; rank 1 computes 30 ms and waits 7.5
    compute = pd.DataFrame({0: [10.0] * 2, 1: [30.0] * 2, 2: [10.0] * 2, 3: [10.0] * 2},
                           index=[10, 11])  # fmt: skip
    wait = pd.DataFrame({0: [2.5] * 2, 1: [7.5] * 2, 2: [2.5] * 2, 3: [2.5] * 2}, index=[10, 11])
    assert preempted(wait, windows, compute=compute).loc["a"].tolist() == [0.0] * 4
    # without compute times it is all beyond the class median (the wait rule alone)
    assert preempted(wait, windows).loc["a"].tolist() == [0.0, 10e6, 0.0, 0.0]
    # a competitor on rank 1 (the same compute as its peers, four times their wait): all of
    # its wait beyond theirs is preemption, whichever rule expects more
    wait[1] = [10.0, 10.0]
    compute[1] = [10.0, 10.0]
    assert preempted(wait, windows, compute=compute).loc["a"].tolist() == [0.0, 15e6, 0.0, 0.0]
    # a rank's compute unknown (0): its class falls back on the median wait
    compute[3] = [0.0, 0.0]
    assert preempted(wait, windows, compute=compute).loc["a"].tolist() == [0.0, 15e6, 0.0, 0.0]


def test_preemption_cannot_explain_away_an_operator_slow_in_its_median_call() -> None:
    # Busy CI (a neighbour on rank 2's CPU): rank 2's injected operator took 15 ms a call
    # against 0.1 ms on its peers, seven calls in the window, beside 60 ms of preemption
    # beyond its demand there. A burst inflates a few calls, not the median one: at most the
    # time above median x calls can be preemption, and the slow operator stands.
    from diag.diagnose.detectors.kernel import _net_of_preemption

    ms = 1e6
    t = pd.DataFrame([[0.8 * ms, 0.6 * ms, 119.4 * ms, 0.6 * ms]], index=["w"], columns=range(4))
    off = pd.DataFrame([[0.0, 0.0, 60 * ms, 0.0]], index=["w"], columns=range(4))
    typical = pd.DataFrame(
        [[0.7 * ms, 0.7 * ms, 104.7 * ms, 0.7 * ms]], index=["w"], columns=range(4)
    )
    assert _net_of_preemption(t, off, typical).loc["w", 2] == 104.7 * ms
    assert pd.isna(_net_of_preemption(t, off.mul(2.5)).loc["w", 2])  # without the floor: unknown
    # one preempted call of seven (its median call like its peers'): still the burst's, unknown
    burst = t.copy()
    burst.loc["w", 2] = 60 * ms
    normal = typical.copy()
    normal.loc["w", 2] = 0.7 * ms
    assert pd.isna(_net_of_preemption(burst, off, normal).loc["w", 2])


def test_cpu_operators_are_unknown_in_a_window_that_recorded_the_device_only(tmp_path):
    # A GPU run: periodic windows record the device's kernels only (schema 1.20, device_only),
    # the closed loop's on-demand windows (here windows 1 and 2) record CPU operators too. Rank 2's
    # aten::mm is slow in both of those: read as 0 in the device-only windows after them, it
    # was slow in 2 of 4 windows from its onset (under consistent_frac); it is unknown there.
    kernel_run(tmp_path, _with(2.0, "aten::mm", {2}, {1, 2}))
    k, w = _frames(tmp_path)
    device_only = ["p10", "p160", "p210"]
    k = k[~(k["window_id"].isin(device_only) & (k["category"] == "cpu_op"))]
    w = w.assign(device_only=w["window_id"].isin(device_only))
    found = [(f.kernel, f.ranks) for f in kernel.detect(k, w, CFG) if f.kernel == "aten::mm"]
    assert found == [("aten::mm", (2,))]
    # the same rows from hooks before 1.20 (no such column): the windows read as recorded
    assert [f for f in kernel.detect(k, w.drop(columns="device_only"), CFG)
            if f.kernel == "aten::mm"] == []  # fmt: skip
    # the device's own kernels are compared in every window, as before
    slow_gemm = k["window_id"].isin(device_only) & (k["name"] == "sm90_gemm") & (k["rank"] == 1)
    k.loc[slow_gemm, "total_ns"] *= 2
    assert ("sm90_gemm", (1,)) in [(f.kernel, f.ranks) for f in kernel.detect(k, w, CFG)]


def test_an_operator_whose_time_exceeds_anothers_in_a_window_is_not_its_child(tmp_path):
    # held-out kernel.float64: a layer in float64 made rank 2's matrix products 3x its peers'
    # and its casts slower too; the casts' excess was 85% of the products', so the products
    # were dropped as the casts' wrapper, though in one window the casts took longer than they
    # did. A child's time lies inside its wrapper's: in no window can it be more.
    base = _with(2.0, "aten::mm", {2}, set(range(5)))  # 20 -> 40 ms, 20 ms of excess

    def layer(n: str, r: int, w: int) -> float:
        if n == "aten::add" and r == 2:
            return 45.0 if w == 2 else 22.0  # 17 ms of excess (85%), above mm in window 2
        return base(n, r, w)

    kernel_run(tmp_path, layer)
    found = kernel.detect_from_store(RunStore.open(tmp_path), CFG)
    assert sorted((f.kernel, f.ranks) for f in found) == [("aten::add", (2,)), ("aten::mm", (2,))]
    (mm,) = [f for f in found if f.kernel == "aten::mm"]
    assert any(e.metric == "wrapper" and e.subject == "aten::matmul" for e in mm.evidence)
    # the same excess held inside the products in every window: a child, the products dropped
    (tmp_path / "inside").mkdir()
    kernel_run(
        tmp_path / "inside", lambda n, r, w: 22.0 if (n, r) == ("aten::add", 2) else base(n, r, w)
    )
    found = kernel.detect_from_store(RunStore.open(tmp_path / "inside"), CFG)
    assert [(f.kernel, f.ranks) for f in found] == [("aten::add", (2,))]
