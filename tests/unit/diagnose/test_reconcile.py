"""Reconciliation: a kernel that explains a slow rank's compute is the diagnosis; a slowdown spread
over every kernel of the rank stays a node finding, its kernels only symptoms."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from diag.diagnose.features import Features
from diag.diagnose.reconcile import ReconcileConfig, attribute, reconcile, steps_per_window
from diag.findings import Evidence, Finding, ranked
from tests.fakes.scenarios import Scenario


def _node(
    rank: int = 1, *, excess: float = 30.0, peers: float = 100.0, cause: str = "node"
) -> Finding:
    """A node finding: the rank computes ``peers + excess`` ms per step against ``peers``."""
    return Finding(
        id=f"node-rank{rank}",
        symptom="slowdown",
        cause=cause,
        severity="warning",
        ranks=(rank,),
        hosts=("node0",),
        onset_step=None if cause == "structural" else 30,
        detected_step=37,
        slowdown=0.2,
        confidence=0.99,
        summary="slow rank",
        evidence=(
            Evidence(
                metric="compute_ms",
                subject=f"rank {rank}",
                value=peers + excess,
                reference=peers,
                unit="ms",
            ),
            Evidence(metric="peers_wait_ms", subject="x", value=50.0, reference=20.0, unit="ms"),
        ),
    )


def _kernel(
    name: str, rank: int = 1, *, excess_ms: float, ref_ms: float, onset: int | None = 40
) -> Finding:
    """A cross-rank kernel finding: ``ref_ms + excess_ms`` per window against ``ref_ms``."""
    return Finding(
        id=f"kernel:{name}:rank{rank}",
        symptom="slowdown",
        cause="kernel",
        severity="warning",
        ranks=(rank,),
        kernel=name,
        onset_step=onset,
        detected_step=50,
        slowdown=0.15,
        confidence=0.84,
        summary=f"{name} slow",
        evidence=(
            Evidence(
                metric="kernel_time_ns",
                subject=name,
                value=(ref_ms + excess_ms) * 1e6,
                reference=ref_ms * 1e6,
                unit="ns",
            ),
        ),
    )


def test_a_kernel_that_explains_the_excess_is_the_diagnosis() -> None:
    # aten::addmm (30 ms of the rank's 100) takes all of the rank's 30 ms excess
    node, kern = _node(excess=30.0), _kernel("aten::addmm", excess_ms=29.0, ref_ms=30.0)
    (out,) = reconcile([node, kern])
    assert (out.id, out.cause, out.kernel, out.ranks) == (kern.id, "kernel", "aten::addmm", (1,))
    assert out.onset_step == 30  # the node detector dates the change per step
    assert out.detected_step == 50  # named once the profiles show it
    assert out.confidence == pytest.approx(0.99)
    assert out.hosts == ("node0",)
    assert {e.metric for e in out.evidence} >= {"kernel_time_ns", "compute_ms", "peers_wait_ms"}
    assert node.id in out.summary


def test_a_slowdown_spread_over_every_kernel_stays_node() -> None:
    # a slow GPU: every kernel 30% slower, aten::mm (40 ms) with 12 of the 30 ms excess
    node = _node(excess=30.0)
    mm = _kernel("aten::mm", excess_ms=12.0, ref_ms=40.0)
    addmm = _kernel("aten::addmm", excess_ms=9.0, ref_ms=30.0)
    out = reconcile([node, mm, addmm])
    assert [f.id for f in out] == [node.id, mm.id, addmm.id]
    assert out[0] == node
    assert all(f.severity == "info" and f.confidence < node.confidence for f in out[1:])
    assert all(any(e.metric == "symptom_of" for e in f.evidence) for f in out[1:])


def test_a_dominant_kernel_slowed_like_the_rest_is_not_the_cause() -> None:
    # the kernel takes 70% of the compute and 70% of the excess: explained, but not concentrated
    att = attribute(_node(excess=30.0), _kernel("gemm", excess_ms=21.0, ref_ms=70.0))
    assert att is not None
    assert att.explained == pytest.approx(0.7)
    assert att.kernel_rel == pytest.approx(att.rest_rel)
    assert not att.is_kernel(ReconcileConfig())
    out = reconcile([_node(excess=30.0), _kernel("gemm", excess_ms=21.0, ref_ms=70.0)])
    assert [f.cause for f in out] == ["node", "kernel"] and out[1].severity == "info"


def test_a_kernel_explaining_too_little_leaves_the_node_finding() -> None:
    # concentrated (the rest is not slower) but only 40% of the excess: something else too
    att = attribute(_node(excess=30.0), _kernel("aten::relu", excess_ms=12.0, ref_ms=4.0))
    assert att is not None and att.explained == pytest.approx(0.4)
    assert not att.is_kernel(ReconcileConfig())
    assert att.is_kernel(ReconcileConfig(min_explained=0.3))
    node, relu = _node(excess=30.0), _kernel("aten::relu", excess_ms=12.0, ref_ms=4.0)
    assert reconcile([node, relu]) == [node, relu]  # a second issue: both stay as they are


def test_a_regression_against_the_rank_own_past_is_not_absorbed() -> None:
    # a regression's reference is the rank's first windows, not its peers: it cannot tell
    node = _node(excess=30.0)
    reg = replace(_kernel("aten::mm", excess_ms=29.0, ref_ms=40.0), id="kernel:aten::mm:regression")
    assert reconcile([node, reg]) == [node, reg]


def test_structural_imbalance_from_one_kernel_is_kernel_without_onset() -> None:
    node = _node(cause="structural")
    (out,) = reconcile([node, _kernel("aten::mm", excess_ms=30.0, ref_ms=40.0, onset=None)])
    assert (out.cause, out.onset_step) == ("kernel", None)


def test_windows_of_several_steps_are_counted_per_step() -> None:
    node, kern = _node(excess=30.0), _kernel("aten::addmm", excess_ms=60.0, ref_ms=60.0)
    att = attribute(node, kern, window_steps=2.0)  # 30 ms per step of excess over 30 ms
    assert att is not None and att.explained == pytest.approx(1.0)
    windows = pd.DataFrame({"rank": [0, 1, -1], "num_steps": [2, 2, 9]})
    assert steps_per_window(windows) == 2.0
    assert steps_per_window(pd.DataFrame()) == 1.0


def test_other_ranks_and_causes_pass_through() -> None:
    node = _node(rank=1)
    other = _kernel("aten::addmm", rank=2, excess_ms=29.0, ref_ms=30.0)
    link = Finding(
        id="link:dp0",
        symptom="slowdown",
        cause="link",
        severity="warning",
        ranks=(1, 3),
        confidence=0.9,
        summary="slow link",
    )
    assert reconcile([node, other, link]) == [node, other, link]
    assert reconcile([]) == []


def _features(sc: Scenario, tmp_path: Path) -> Features:
    return Features.from_store(sc.write(tmp_path))


def test_a_kernel_the_steps_do_not_show_is_only_info(tmp_path: Path) -> None:
    # two slow profiled steps on rank 2 look like a slow aten::mm; its other steps are fine
    kern = _kernel("aten::mm", rank=2, excess_ms=17.0, ref_ms=40.0, onset=50)
    (out,) = reconcile([kern], _features(Scenario(), tmp_path))
    assert (out.id, out.severity) == (kern.id, "info")
    assert out.confidence < 0.2 * kern.confidence
    (seen,) = [e for e in out.evidence if e.metric == "step_compute_excess_ms"]
    assert seen.reference == pytest.approx(17.0) and abs(seen.value) < 5.0


def test_a_kernel_the_steps_show_stays(tmp_path: Path) -> None:
    # rank 2 computes ~31 ms more per step from step 50: a 17 ms kernel excess is plausible
    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2)
    kern = _kernel("aten::mm", rank=2, excess_ms=17.0, ref_ms=40.0, onset=50)
    assert reconcile([kern], _features(sc, tmp_path)) == [kern]


def _with_windows(
    sc: Scenario,
    tmp_path: Path,
    times: dict[str, float],
    slow: dict[str, float],
    at: int | tuple[int, ...],
    calls: dict[str, int] | None = None,
    burst: tuple[str, ...] = (),
) -> Features:
    """``sc``'s run plus one-step profiler windows at steps 10, 30 and ``at`` on every rank:
    operator times ``times`` (ms, 10 calls each), on ``sc.slow_ranks`` multiplied by ``slow``
    in the window at ``at`` (or each of several; their calls multiplied by ``calls``): in every
    call alike, or for the operators in ``burst`` in one call (its median call unchanged: a
    thread descheduled inside one call)."""
    from diag import schema
    from diag.store.run_store import RunStore
    from tests.fakes.events import MS, T0, Source

    sc.write(tmp_path)
    slow_at = (at,) if isinstance(at, int) else at
    events: list[schema.Event] = []
    for r in range(sc.ranks):
        src = Source(sc.host(r), r, pid=900 + r)
        for step in (10, 30, *slow_at):
            start, wid = T0 + step * 200 * MS, f"p{step}"
            end = start + 140 * MS
            events.append(
                schema.ProfileWindow(
                    **src.env(end, step), window_id=wid, trigger="periodic",
                    start_ns=start, end_ns=end, duration_ns=140 * MS,
                )
            )  # fmt: skip
            for name, ms in times.items():
                n = 10
                median = ms * MS / n
                if step in slow_at and r in sc.slow_ranks:
                    ms *= slow.get(name, 1.0)
                    n *= (calls or {}).get(name, 1)
                    median = median if name in burst else ms * MS / n
                events.append(
                    schema.KernelSummary(
                        **src.env(end, step), window_id=wid, name=name, category="cpu_op",
                        num_calls=n, total_ns=int(ms * MS), median_ns=int(median),
                        max_ns=int(ms * MS / 5),
                    )
                )  # fmt: skip
    store = RunStore.open(tmp_path)
    store.append(events)
    store.flush()
    return Features.from_store(RunStore.open(tmp_path))


OPS = {"aten::mm": 40.0, "aten::add": 20.0, "aten::mul": 20.0, "aten::sum": 15.0}


def test_the_first_window_after_a_slow_rank_onset_names_the_kernel(tmp_path: Path) -> None:
    # rank 2 computes ~31 ms more per step from step 50; the one window after (step 60) shows
    # aten::mm 28 ms slower and nothing else: kernel, decided by that window (the kernel
    # detector alone wants two windows, so the node finding stood; held-out kernel.float64)
    from diag.diagnose.detectors.registry import run_all

    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2)
    features = _with_windows(sc, tmp_path, OPS, {"aten::mm": 1.7}, at=60)
    top = run_all(features)[0]
    assert (top.cause, top.ranks, top.kernel) == ("kernel", (2,), "aten::mm")
    assert top.onset_step is not None and abs(top.onset_step - 50) <= 2
    assert top.detected_step is not None and top.detected_step >= 60
    assert not [f for f in run_all(features) if f.cause == "node" and f.severity != "info"]


def test_a_window_with_every_kernel_slower_keeps_the_node(tmp_path: Path) -> None:
    from diag.diagnose.detectors.registry import run_all

    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2)
    features = _with_windows(sc, tmp_path, OPS, dict.fromkeys(OPS, 1.3), at=60)
    top = run_all(features)[0]
    assert (top.cause, top.ranks) == ("node", (2,))
    assert any(e.metric == "kernel_evidence" and e.value >= 1 for e in top.evidence)


def test_a_rank_found_stopped_is_not_a_kernel_whatever_its_operators_show() -> None:
    # held-out node.stop_cont: a SIGSTOP landed inside one of 32 copies and read as
    # aten::_to_copy 73x slower, which explained the stall and took it in. A process found
    # stopped spends its freezes in whatever operator runs.
    stopped = Evidence(
        metric="stopped_samples", subject="rank 1", value=4.0, reference=0.0, unit="reads"
    )
    node = replace(_node(excess=30.0), evidence=(*_node(excess=30.0).evidence, stopped))
    kern = _kernel("aten::_to_copy", excess_ms=29.0, ref_ms=0.1)
    out = reconcile([node, kern])
    assert [f.id for f in out] == [node.id, kern.id] and out[0] == node
    assert out[1].severity == "info" and out[1].confidence < node.confidence
    # without the daemon's reads the same kernel is the diagnosis
    assert [f.cause for f in reconcile([_node(excess=30.0), kern])] == ["kernel"]


def test_a_tiny_operator_slow_where_the_rank_lost_more_elsewhere_is_not_the_kernel(
    tmp_path: Path,
) -> None:
    # CI: a slow node (extra matrix products in its forward) and, in its two windows, the tiny
    # diagfault::scale_input 41x its peers' time: the steps' excess was small on a busy host, so
    # the operator "explained" it, though in the same windows the rank's aten::mm lost far more
    from diag.diagnose.detectors.kernel import RANK_SHARE
    from diag.diagnose.detectors.registry import run_all

    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2)
    ops = {**OPS, "diagfault::scale_input": 0.05}
    slow = {"diagfault::scale_input": 400.0, "aten::mm": 2.5}
    features = _with_windows(sc, tmp_path, ops, slow, at=(60, 70), calls={"aten::mm": 3})
    findings = run_all(features)
    top = findings[0]
    assert (top.cause, top.ranks) == ("node", (2,)), findings
    (kern,) = [f for f in findings if f.cause == "kernel"]  # shown, as part of the node's
    assert kern.kernel == "diagfault::scale_input" and kern.severity == "info"
    assert kern.confidence < top.confidence and top.id in kern.summary
    # the attribution that decided it: explained by the steps, a third of the windows' excess
    node = replace(top, evidence=tuple(e for e in top.evidence if e.metric == "compute_ms"))
    from diag.diagnose.detectors.kernel import KernelConfig, detect_for

    (cand,) = [
        k
        for k in detect_for(features.kernels, features.windows, (2,), 50, KernelConfig())
        if k.kernel == "diagfault::scale_input"
    ]
    att = attribute(node, cand)
    assert att is not None and att.explained >= 0.5 and att.concentrated(ReconcileConfig())
    assert att.rank_share == pytest.approx(20.0 / 60.0, rel=0.05)
    assert not att.is_kernel(ReconcileConfig())
    (share,) = [e for e in cand.evidence if e.metric == RANK_SHARE]
    assert share.value == att.rank_share


def test_a_rank_contended_by_an_outside_process_is_not_searched_for_a_kernel() -> None:
    # a process outside the job on the rank's CPU preempts whatever operator runs: one slow
    # window is that, not a kernel (the focused search is skipped; two windows still count)
    contention = Finding(
        id="contention-vm", symptom="slowdown", cause="node", severity="warning", ranks=(1,),
        onset_step=30, slowdown=0.2, confidence=0.9, summary="contended",
        evidence=(Evidence(metric="foreign_processes", subject="host vm", value=1.0),),
    )  # fmt: skip
    node, kern = _node(excess=30.0), _kernel("aten::mm", excess_ms=29.0, ref_ms=30.0)
    asked: list[str] = []

    def kernels_for(f: Finding) -> list[Finding]:
        asked.append(f.id)
        return [kern]

    out = reconcile([node, contention], kernels_for=kernels_for)
    assert asked == [] and not [f for f in out if f.cause == "kernel"]
    out = reconcile([node], kernels_for=kernels_for)
    assert asked == [node.id] and [f.cause for f in out] == ["kernel"]


def test_an_operator_slow_where_the_rank_waited_for_a_cpu_is_preemption(tmp_path: Path) -> None:
    # busy CI (a neighbour process on the VM): rank 2 computed 1.32x its peers' time from step 17
    # and the one window after showed aten::addcdiv_ 27x their time, which "explained" it: its
    # thread was descheduled inside the operator (in one of its calls: its median call as its
    # peers'). Its run-queue delay in the window's step was as long: descheduled time is not
    # the operator's, and the node finding stays.
    from diag.diagnose.detectors.registry import run_all

    ops = {**OPS, "aten::addcdiv_": 1.0}
    slow = {"aten::addcdiv_": 31.0}
    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2, run_queue=((2, 60, 30.0),))
    burst = ("aten::addcdiv_",)
    findings = run_all(_with_windows(sc, tmp_path / "queued", ops, slow, at=60, burst=burst))
    top = findings[0]
    assert (top.cause, top.ranks) == ("node", (2,)), findings
    assert not [f for f in findings if f.cause == "kernel" and f.severity != "info"], findings
    # the same operator time without the wait: the operator is the diagnosis
    sc = replace(sc, run_queue=())
    top = run_all(_with_windows(sc, tmp_path / "own", ops, slow, at=60))[0]
    assert (top.cause, top.ranks, top.kernel) == ("kernel", (2,), "aten::addcdiv_")
    # a wait that covers part of it leaves the rest, and says what it took off
    sc = replace(sc, run_queue=((2, 60, 5.0),))
    top = run_all(_with_windows(sc, tmp_path / "part", ops, slow, at=60, burst=burst))[0]
    assert (top.cause, top.kernel) == ("kernel", "aten::addcdiv_")
    (off,) = [e for e in top.evidence if e.metric == "preempted_ns"]
    assert off.value == pytest.approx(5e6, rel=0.01)
    (time,) = [e for e in top.evidence if e.metric == "kernel_time_ns"]
    assert time.value == pytest.approx(26e6, rel=0.01)


def test_a_window_where_the_rank_was_preempted_is_unknown_not_fine(tmp_path: Path) -> None:
    # held-out kernel.float64: the slow operator in four windows after the onset, and in one
    # of them the rank also waited for a CPU as long as the operator's excess (a scheduler
    # burst). That window cannot tell; it does not count against the others.
    from diag.diagnose.detectors.registry import run_all

    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2, run_queue=((2, 70, 40.0),))
    findings = run_all(_with_windows(sc, tmp_path, OPS, {"aten::mm": 1.7}, at=(60, 70)))
    top = findings[0]
    assert (top.cause, top.ranks, top.kernel) == ("kernel", (2,), "aten::mm"), findings
    (consistent,) = [e for e in top.evidence if e.metric == "consistent_windows"]
    assert consistent.value == 1.0


def test_operators_of_one_layer_slowed_together_are_the_kernel(tmp_path: Path) -> None:
    # held-out kernel.float64: a layer in another dtype slows its forward, its backward and its
    # casts; none explains the rank's excess alone, together they do, each slowed far beyond
    # the rest of its compute. A device slowed alike everywhere stays node (test above).
    from diag.diagnose.detectors.registry import run_all

    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2)
    slow = {"aten::mm": 1.35, "aten::add": 1.55}  # +14 and +11 ms of the rank's ~31
    top = run_all(_with_windows(sc, tmp_path / "layer", OPS, slow, at=60))[0]
    assert (top.cause, top.ranks, top.kernel) == ("kernel", (2,), "aten::mm"), top
    (other,) = [e for e in top.evidence if e.metric == "with_operator"]
    assert other.subject == "aten::add"
    # one of them alone explains too little: the node finding stays
    top = run_all(_with_windows(sc, tmp_path / "one", OPS, {"aten::add": 1.55}, at=60))[0]
    assert (top.cause, top.ranks) == ("node", (2,))


def test_a_symptom_never_ranks_above_the_slow_rank_it_is_a_symptom_of() -> None:
    # held-out node.stop_cont: the stall an info node finding (5 % of the job), and a SIGSTOP
    # inside aten::addmm in two windows read as 41 % of the rank's windowed step: demoted as a
    # symptom, it still ranked first by the job's share lost x confidence
    node = replace(_node(excess=30.0), severity="info", slowdown=0.05, confidence=0.52)
    mm = replace(_kernel("aten::mm", excess_ms=12.0, ref_ms=40.0), slowdown=0.41, confidence=0.5)
    addmm = replace(_kernel("aten::addmm", excess_ms=9.0, ref_ms=30.0), slowdown=0.3)
    out = ranked(reconcile([node, mm, addmm]))
    assert out[0].id == node.id and {f.id for f in out[1:]} == {mm.id, addmm.id}
    assert all(f.slowdown is not None and f.slowdown <= node.slowdown for f in out[1:])
    assert all(any(e.metric == "symptom_of" for e in f.evidence) for f in out[1:])
