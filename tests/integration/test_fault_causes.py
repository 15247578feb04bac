"""Injected fail-slow faults in real 4-rank torchrun jobs: ``diag triage`` names the cause.

Each test runs one case of the fault suite (:mod:`diag.selftest.live`: the demo job under ``diag
run`` with warm-up, an eval pass, periodic saves and profiler windows, and one fault sized to cost
30% of the job's step from step 30), then triages the run: the top finding must name the injected
culprit and cause with its onset, and no other finding of severity warning or above may blame
anything else (info findings are allowed, and so is contention by a process outside the job that
ran on the rank's CPU: with a CPU-bound neighbour on the machine that is a true finding). One
torchrun launch per test (about 15 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.findings import Finding
from diag.selftest.cases import Case
from diag.selftest.realized import WARMUP_STEPS, achieved_cost
from diag.selftest.runner import run_case
from diag.selftest.score import judge, the_machines
from diag.store.run_store import RunStore
from tests.fakes.foreign import foreign_process_contention

pytestmark = pytest.mark.integration

ONSET = 30


def _show(findings: list[Finding]) -> str:
    return "\n".join(
        f"{f.cause} {f.severity} ranks={f.ranks} onset={f.onset_step} "
        f"conf={f.confidence}: {f.summary}"
        for f in findings
    )


def _median_growth(run_dir: Path, onset: int) -> float:
    """``1 - median job step before the onset / after it`` (warm-up left out)."""
    steps = RunStore.open(run_dir).frame("step").groupby("step")["duration_ns"].median()
    before = steps[(steps.index >= WARMUP_STEPS) & (steps.index < onset)].median()
    after = steps[steps.index >= onset].median()
    return float(1.0 - before / after)


def _check(
    tmp_path: Path, cause: str, ranks: tuple[int, ...], mechanism: str = ""
) -> list[Finding]:
    case = Case(
        cause=cause, severity=0.3, ranks=ranks, onset_step=ONSET, steps=80, mechanism=mechanism
    )
    case, findings = run_case(case, tmp_path)
    outcome = judge(case, findings)
    assert outcome.ok, f"top finding: {outcome.top}\n{_show(findings)}"
    shown = _show(findings)
    findings = [f for f in findings if not the_machines(case, f)]  # a busy neighbour's: true
    assert findings, shown
    top = findings[0]
    # The share of the step lost is measured, not the nominal 30%: on a host whose CPUs are all
    # busy the other ranks' idle waits free CPU for the culprit, so a job loses less than that,
    # and a job bound by its collectives can hide most of it (CI: rank 1's compute 2.7 -> 8 ms
    # in a 19 ms step whose all-reduces took 14 ms; the median step 18.9 -> 19.9 ms, its steps
    # 12-30 ms apart on a noisy VM: "1% of each step lost"). What diag reports is checked
    # against what the run did: at most its mean step's growth (the share of the run's time),
    # and something once the fault clearly took: in most steps (the median step grew 10%), or,
    # for a checkpoint, which costs only its own steps (one in ten), on the mean.
    cost = achieved_cost(tmp_path / "run", ONSET)
    growth = _median_growth(tmp_path / "run", ONSET)
    seen = (cost, growth, _show(findings))
    assert cost is not None and top.slowdown is not None and top.slowdown <= cost + 0.1, seen
    if growth >= 0.1 or (cause == "checkpoint" and cost >= 0.1):
        assert top.slowdown >= 0.03, seen
    assert top.onset_step is not None and abs(top.onset_step - ONSET) <= 3, _show(findings)
    others = [
        f
        for f in findings[1:]
        if f.severity != "info"
        and (f.cause != cause or f.ranks != top.ranks)
        and not foreign_process_contention(f)
    ]
    assert not others, f"other findings at warning or above:\n{_show(findings)}"
    return findings


def test_slow_node_is_named_with_its_onset(tmp_path: Path) -> None:
    _check(tmp_path, "node", (1,))


def test_slow_rank_of_a_fully_sharded_job_is_named(tmp_path: Path) -> None:
    """Another layout: the model fully sharded with FSDP2 (parameters all-gathered before each
    forward, gradients reduced after each backward, Python-level async collectives and waits
    instead of DDP's C++ all-reduce). The hook records those collectives and the slow rank is
    named as in a DDP job."""
    _check(tmp_path, "node", (1,), mechanism="node.fsdp_rank")
    ops = set(RunStore.open(tmp_path / "run").frame("collective")["op"])
    assert "all_gather" in ops, ops


def test_slow_data_loader_is_named(tmp_path: Path) -> None:
    _check(tmp_path, "data", (3,))


def test_slow_checkpoint_storage_is_named_with_its_paths(tmp_path: Path) -> None:
    findings = _check(tmp_path, "checkpoint", (0,))
    named = [findings[0].summary, *(e.subject for e in findings[0].evidence)]
    assert any(str(tmp_path / "ckpt" / "step") in text for text in named), _show(findings)
