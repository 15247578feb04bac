"""The simulated mode of the fault suite: each cause at 20% is diagnosed right, a clean run raises
nothing, and the simulator injects nothing before the onset."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from diag import schema
from diag.selftest.cases import CLEAN, FAULT_CAUSES, Case, suite
from diag.selftest.score import judge
from diag.selftest.simulate import dp_groups, prepare, run_simulated, simulate


def _case(cause: str, severity: float = 0.2, seed: int = 0) -> Case:
    (case,) = [c for c in suite((severity,), (seed,), (cause,)) if c.cause == cause]
    return case


@pytest.mark.parametrize("cause", [c for c in FAULT_CAUSES if c != "structural"])
def test_each_cause_at_20_percent_is_diagnosed(tmp_path: Path, cause: str) -> None:
    case = _case(cause)
    findings = run_simulated(case, tmp_path / "run")
    outcome = judge(prepare(case), findings)
    assert outcome.ok, outcome.top
    assert outcome.warnings == 1  # the diagnosis, nothing else as loud
    if case.onset_step is not None:
        assert outcome.latency is not None and 0 <= outcome.latency <= 10
        # dated at the fault, not at an earlier ordinary save or noise
        assert abs(findings[0].onset_step - case.onset_step) <= 3, findings[0]


def test_a_heavier_pipeline_stage_is_one_structural_finding(tmp_path: Path) -> None:
    # Structural follows the layout: every replica of one stage (issue 13, class 2); a lone rank
    # slow from the start among its data-parallel peers is a node (next test).
    case = prepare(_case("structural"))
    assert case.ranks == (0, 1)  # stage 0 of 2 stages x 2 replicas
    findings = run_simulated(case, tmp_path / "run")
    loud = [f for f in findings if f.severity != "info"]
    assert [(f.cause, f.ranks, f.onset_step) for f in loud] == [("structural", (0, 1), None)]


def test_one_rank_slow_from_the_start_among_its_dp_peers_is_a_node(tmp_path: Path) -> None:
    case = Case(cause="node", severity=0.2, ranks=(1,), onset_step=0, seed=1)
    findings = run_simulated(case, tmp_path / "run")
    loud = [f for f in findings if f.severity != "info"]
    assert [(f.cause, f.ranks, f.onset_step) for f in loud] == [("node", (1,), None)]


def test_clean_run_has_no_warning(tmp_path: Path) -> None:
    findings = run_simulated(Case(cause=CLEAN, seed=3), tmp_path / "run")
    assert [f.id for f in findings if f.severity != "info"] == []


def test_link_fault_leaves_compute_and_data_alone(tmp_path: Path) -> None:
    findings = run_simulated(_case("link", 0.5), tmp_path / "run")
    assert [f.cause for f in findings] == ["link"]


def _anonymous(events: list[schema.Event]) -> list[schema.Event]:
    return [replace(e, job_id="") for e in events]


@pytest.mark.parametrize("cause", [c for c in FAULT_CAUSES if c != "structural"])
def test_nothing_is_injected_before_the_onset(cause: str) -> None:
    case = _case(cause)
    assert case.onset_step == 30
    faulty, healthy = simulate(case), simulate(replace(case, severity=0.0))
    before = [e for e in _anonymous(faulty) if e.step < case.onset_step]
    assert before == [e for e in _anonymous(healthy) if e.step < case.onset_step]
    assert any(e.step >= 0 for e in before)
    assert _anonymous(faulty) != _anonymous(healthy)


def test_structural_imbalance_is_there_from_the_first_step() -> None:
    case = _case("structural")
    steps = [e for e in simulate(case) if isinstance(e, schema.StepEvent) and e.step == 0]
    healthy = [
        e
        for e in simulate(replace(case, severity=0.0))
        if isinstance(e, schema.StepEvent) and e.step == 0
    ]
    for culprit in prepare(case).ranks:
        assert steps[culprit].compute_ns > healthy[culprit].compute_ns


def test_prepare_names_the_kernel_and_the_link_hosts() -> None:
    kernel = prepare(_case("kernel"))
    assert kernel.kernel == "aten::addmm" and prepare(kernel) == kernel
    link = prepare(_case("link"))
    assert link.hosts == ("node0", "node1")
    assert dp_groups(4, 2) == {"dp0": (0, 2), "dp1": (1, 3)}
    assert prepare(_case("node")) == _case("node")
    with pytest.raises(ValueError):
        prepare(replace(_case("link"), hosts=("node0", "node7")))


def test_steps_are_synchronous_and_partitioned() -> None:
    events = simulate(_case("node"))
    steps = [e for e in events if isinstance(e, schema.StepEvent)]
    assert len(steps) == 4 * 80
    for e in steps:
        parts = (
            e.data_wait_ns
            + e.forward_ns
            + e.backward_ns
            + e.optimizer_ns
            + e.checkpoint_ns
            + e.other_ns
        )
        assert parts == e.duration_ns
        assert (
            e.compute_ns == e.duration_ns - e.collective_wait_ns - e.data_wait_ns - e.checkpoint_ns
        )
    by_step: dict[int, set[int]] = {}
    for e in steps:
        by_step.setdefault(e.step, set()).add(e.duration_ns)
    assert all(len(d) == 1 for d in by_step.values())  # every rank waits for the slowest
    kinds = {type(e).__name__ for e in events}
    assert kinds >= {"StepEvent", "CollectiveEvent", "CheckpointEvent", "ProfileWindow"}
    assert "KernelSummary" in kinds and "RankInfo" in kinds
