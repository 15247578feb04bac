"""Kernel vs node needs kernel evidence: a rank slowed mid-run whose only profiler windows are
before the onset is undecided between node and kernel (lower confidence, what decides it); a
window after the onset on the culprit and a peer decides it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from diag.diagnose.coverage import KERNEL_EVIDENCE, check, covering_windows
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.findings import Evidence, Finding
from tests.fakes.scenarios import Scenario
from tests.fakes.windows import profile_windows, write

SLOW = Scenario(slow_ranks=(1,), onset_step=60, severity=0.3)


def _node(features: Features) -> Finding:
    (f,) = [f for f in run_all(features) if f.cause == "node"]
    assert f.ranks == (1,) and f.onset_step is not None and abs(f.onset_step - 60) <= 2
    return f


def _kernel_evidence(f: Finding) -> Evidence:
    (e,) = [e for e in f.evidence if e.metric == KERNEL_EVIDENCE]
    return e


def test_windows_only_before_the_onset_leave_it_undecided(tmp_path: Path) -> None:
    before = write(tmp_path / "a", [*SLOW.events(), *profile_windows([10, 30, 50], range(4))])
    after = write(tmp_path / "b", [*SLOW.events(), *profile_windows([10, 30, 50, 70], range(4))])
    undecided, decided = _node(Features.from_store(before)), _node(Features.from_store(after))
    assert undecided.cause == decided.cause == "node"  # the field stays valid
    assert undecided.confidence == pytest.approx(0.7 * decided.confidence)
    assert "undecided between node and kernel" in undecided.summary
    e = _kernel_evidence(undecided)
    assert (e.value, e.reference) == (0.0, 1.0)
    assert f"after step {undecided.onset_step}" in e.subject
    assert "diag profile" in e.note and "undecided" in e.note
    assert "undecided" not in decided.summary
    assert _kernel_evidence(decided).value == 1.0


def test_no_profiler_at_all_is_undecided_too(tmp_path: Path) -> None:
    f = _node(Features.from_store(SLOW.write(tmp_path)))
    assert _kernel_evidence(f).value == 0.0 and "undecided" in f.summary


def test_a_window_must_cover_the_culprit_and_peers_to_compare_with() -> None:
    rows = [
        ("p70", 1, 70, True),  # the culprit alone
        ("p80", 0, 80, True),  # peers alone
        ("p80", 2, 80, True),
        ("p90", 1, 90, False),  # failed on the culprit
        ("p90", 0, 90, True),
        ("p95", 1, 95, True),  # the culprit and two peers: covers
        ("p95", 3, 95, True),
        ("p95", 2, 95, True),
        ("p99", 1, 99, True),  # the culprit and one peer of three: the others not in yet
        ("p99", 0, 99, True),
        ("p40", 1, 40, True),  # before the onset
        ("p40", 0, 40, True),
    ]
    windows = pd.DataFrame(rows, columns=["window_id", "rank", "step", "ok"])
    assert covering_windows(windows, (1,), 60) == ["p95"]
    assert covering_windows(windows, (1,), 96) == []
    assert covering_windows(pd.DataFrame(), (1,), 0) == []
    # a two-rank job: its one peer is all there is to compare with
    assert covering_windows(windows, (1,), 96, num_ranks=2) == ["p99"]
    # a pipeline whose stage has two replicas: the other replica is all there is
    assert covering_windows(windows, (1,), 96, classes={0: 0, 1: 0, 2: 1, 3: 1}) == ["p99"]


def test_a_window_the_peers_have_not_shipped_yet_decides_nothing() -> None:
    # CI: the closed loop's window on rank 2 and three peers; a live triage pass saw it from rank
    # 2 and one peer, decided "node" (the kernel detector cannot compare two ranks), and a pass
    # later the whole window named the operator.
    rows = [("a1", 2, 233, True), ("a1", 3, 233, True)]
    partial = pd.DataFrame(rows, columns=["window_id", "rank", "step", "ok"])
    node = Finding(
        id="node-rank2", symptom="slowdown", cause="node", severity="warning", ranks=(2,),
        onset_step=40, slowdown=0.3, confidence=0.9, summary="slow",
    )  # fmt: skip
    (out,) = check([node], partial, num_ranks=4)
    assert _kernel_evidence(out).value == 0.0 and "undecided" in out.summary
    whole = pd.concat([partial, pd.DataFrame([("a1", 0, 233, True)], columns=partial.columns)])
    (out,) = check([node], whole, num_ranks=4)
    assert _kernel_evidence(out).value == 1.0


def test_direct_node_evidence_and_other_findings_are_left_alone() -> None:
    node = Finding(
        id="node-rank1",
        symptom="slowdown",
        cause="node",
        severity="warning",
        ranks=(1,),
        onset_step=30,
        slowdown=0.2,
        confidence=0.9,
        summary="slow",
    )
    throttled = replace(
        node,
        evidence=(Evidence(metric="gpu_sm_clock_mhz", subject="gpu", value=900, reference=1980),),
    )
    structural = replace(node, cause="structural", onset_step=None)
    crash = replace(node, symptom="crash")
    empty = pd.DataFrame()
    assert check([throttled, structural, crash], empty) == [throttled, structural, crash]
    (out,) = check([node], empty)
    assert out.confidence == pytest.approx(0.63) and out.cause == "node"


def _contention(foreign: float) -> Finding:
    """Contention on ranks 1 and 2; ``foreign`` processes outside the job compete (0: the
    job's own load)."""
    return Finding(
        id="contention-vm", symptom="slowdown", cause="node", severity="warning", ranks=(1, 2),
        onset_step=35, slowdown=0.25, confidence=0.9, summary="contended",
        evidence=(Evidence(metric="foreign_processes", subject="host vm", value=foreign),),
    )  # fmt: skip


def test_a_rank_contended_by_a_process_outside_the_job_needs_no_window() -> None:
    # CI: a hog pinned on rank 2's CPU; the node finding on rank 2 was undecided, the closed
    # loop profiled it, and a preempted aten::mm (33x) in that window read as a second fault.
    from diag.analyzer.autocapture import AutoCapture, AutoCaptureConfig

    node = Finding(
        id="node-rank2", symptom="slowdown", cause="node", severity="warning", ranks=(2,),
        onset_step=31, slowdown=0.2, confidence=0.9, summary="slow",
    )  # fmt: skip
    out, hog = check([node, _contention(1.0)], pd.DataFrame())
    assert not any(e.metric == KERNEL_EVIDENCE for e in out.evidence)
    (e,) = [e for e in out.evidence if e.metric == "contended_by"]
    assert (e.subject, e.value) == ("contention-vm", 1.0)
    assert out.confidence == node.confidence and "undecided" not in out.summary
    sent: list[tuple[int, ...]] = []

    def board(num_steps: int, ranks: object) -> object:
        sent.append(tuple(ranks))  # type: ignore[call-overload]
        raise AssertionError("no window should be requested")

    loop = AutoCapture(request=board, run_dir=None, cfg=AutoCaptureConfig(mode="on"))  # type: ignore[arg-type]
    assert loop.step([out, hog], None, range(4)) == [] and sent == []
    # the job's own load is not a competitor: that rank's slowdown stays undecided
    own, _ = check([node, _contention(0.0)], pd.DataFrame())
    assert _kernel_evidence(own).value == 0.0


def test_a_competitor_that_arrived_long_after_the_slowdown_decides_nothing() -> None:
    # CI on a busy machine: a kernel slowed on rank 2 from step 40; a neighbour's type checker
    # took rank 2's CPU from step 448, and its contention finding marked the step-40 slowdown
    # as the node's, so the test run without the closed loop had no kernel_evidence at all.
    node = Finding(
        id="node-rank2", symptom="slowdown", cause="node", severity="warning", ranks=(2,),
        onset_step=40, slowdown=0.2, confidence=0.9, summary="slow",
    )  # fmt: skip
    late = replace(_contention(1.0), ranks=(2, 3), onset_step=448)
    out, _ = check([node, late], pd.DataFrame())
    assert not any(e.metric == "contended_by" for e in out.evidence)
    assert _kernel_evidence(out).value == 0.0 and "undecided" in out.summary
    # one from about the same time still decides it
    near = replace(late, onset_step=52)
    out, _ = check([node, near], pd.DataFrame())
    assert any(e.metric == "contended_by" for e in out.evidence)


def test_a_competitor_of_the_peers_too_does_not_explain_one_ranks_excess() -> None:
    # Busy CI: a hog on a 2-core host slowed all four ranks (contention-vm, ranks 0-3, 3 ms/step
    # more run-queue delay each); rank 2 computed 4x longer from step 40 (a slowed operator the
    # closed loop's window named) and the run came out node, "contended by contention-vm".
    node = Finding(
        id="node-rank2", symptom="slowdown", cause="node", severity="warning", ranks=(2,),
        onset_step=40, slowdown=0.3, confidence=0.9, summary="slow",
        evidence=(Evidence(metric="peers", subject="rank 2 on vm", value=3.0, unit="ranks"),),
    )  # fmt: skip
    host = replace(_contention(1.0), ranks=(0, 1, 2, 3), onset_step=23)
    out, _ = check([node, host], pd.DataFrame())
    assert not any(e.metric == "contended_by" for e in out.evidence)
    assert _kernel_evidence(out).value == 0.0 and "undecided" in out.summary
    # a competitor on the rank and one other (of its three peers) still explains it
    pinned = replace(host, ranks=(0, 2))
    out, _ = check([node, pinned], pd.DataFrame())
    assert any(e.metric == "contended_by" for e in out.evidence)
