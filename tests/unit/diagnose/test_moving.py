"""A moving imbalance explains a node finding that is slow in only some of its steps; a rank slow
in every step stays a node finding beside it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from diag.diagnose import moving
from diag.diagnose.features import Features
from diag.findings import Finding
from tests.fakes.scenarios import Scenario


def _finding(id_: str, cause: str, ranks: tuple[int, ...], onset: int | None) -> Finding:
    return Finding(id=id_, symptom="slowdown", cause=cause, severity="warning", ranks=ranks,
                   onset_step=onset, slowdown=0.15, confidence=0.8, summary=id_)  # fmt: skip


def test_a_node_finding_on_a_rank_slow_in_some_steps_folds_into_the_moving_imbalance(
    tmp_path: Path,
) -> None:
    run = Scenario(ranks=4, steps=100, moving_imbalance=0.5, seed=3)
    features = Features.from_store(run.write(tmp_path))
    data = _finding("data-moving", "data", (0, 1, 3), None)
    node = _finding("node-rank2", "node", (2,), 40)
    share = moving.step_share(features, node, moving.MovingConfig())
    assert share is not None and 0.1 < share < 0.5  # drawn in about a quarter of the steps
    (out,) = moving.fold([node, data], features)
    assert out.id == "data-moving" and out.severity == "warning"
    assert [e.subject for e in out.evidence if e.metric == "explains"] == ["node-rank2"]


def test_a_rank_slow_in_every_step_stays_node(tmp_path: Path) -> None:
    run = Scenario(ranks=4, steps=100, moving_imbalance=0.5, slow_ranks=(2,), onset_step=40,
                   severity=0.3, seed=3)  # fmt: skip
    features = Features.from_store(run.write(tmp_path))
    findings = [_finding("node-rank2", "node", (2,), 40), _finding("data-moving", "data", (), None)]
    assert moving.fold(findings, features) == findings
    # without a moving imbalance found, nothing is folded
    assert moving.fold(findings[:1], features) == findings[:1]


def test_on_saturated_hosts_the_moving_imbalance_takes_in_echoes_at_its_own_info(
    tmp_path: Path,
) -> None:
    # A CI run beside a busy neighbour: the node detector flagged a healthy rank the neighbour
    # slowed in some steps, the moving imbalance (info: "the host CPUs are 99% busy, check for
    # contention first") took it in and came out a data *warning* beside the real slow loader.
    import numpy as np
    import pandas as pd

    from diag.diagnose.detectors.data import DataConfig, _moving

    rng = np.random.default_rng(1)
    base = 10.0 * (1 + 0.02 * rng.standard_normal((60, 4)))
    drawn = np.eye(4)[rng.integers(0, 4, 60)] * 6.0  # one rank a step, drawn anew: +60%
    compute = pd.DataFrame(base + drawn, columns=[0, 1, 2, 3])
    job_step = pd.Series(40.0, index=compute.index)
    (busy,) = _moving(compute, job_step, DataConfig(), cpu_busy=99.0)
    (quiet,) = _moving(compute, job_step, DataConfig(), cpu_busy=40.0)
    assert busy.severity == "info" and quiet.severity != "info"
    assert [e.value for e in busy.evidence if e.metric == moving.SATURATED_CPU] == [99.0]
    assert not [e for e in quiet.evidence if e.metric == moving.SATURATED_CPU]

    run = Scenario(ranks=4, steps=100, moving_imbalance=0.5, seed=3)
    features = Features.from_store(run.write(tmp_path))
    node = _finding("node-rank2", "node", (2,), 40)  # an echo: slow in a quarter of its steps
    (out,) = moving.fold([node, replace(busy, ranks=(0, 1, 3))], features)
    assert out.id == "data-moving" and out.severity == "info"
    assert [e.subject for e in out.evidence if e.metric == "explains"] == ["node-rank2"]
    (loud,) = moving.fold([node, replace(quiet, ranks=(0, 1, 3))], features)
    assert loud.severity == "warning"  # off saturated hosts an echo's warning is data's


def test_a_node_finding_on_a_rank_found_stopped_is_not_an_echo(tmp_path: Path) -> None:
    # held out, node.stop_cont seed 2: rank 3 SIGSTOPped in bursts, found "5.15x as long from
    # step 44" and, slow in under 3/4 of the steps from there, taken for an echo of the moving
    # imbalance its stops made ("uneven batches", critical); the daemon had found it stopped
    # in 6 reads of its state, its peers in none
    from diag.diagnose.coverage import STOPPED_EVIDENCE
    from diag.findings import Evidence

    run = Scenario(ranks=4, steps=100, moving_imbalance=0.5, seed=3)
    features = Features.from_store(run.write(tmp_path))
    stopped = Evidence(metric=STOPPED_EVIDENCE, subject="rank 2", value=6.0, reference=0.0)
    node = replace(_finding("node-rank2", "node", (2,), 40), evidence=(stopped,))
    data = _finding("data-moving", "data", (0, 1, 3), None)
    (out,) = moving.fold([node, data], features)
    assert out.id == "node-rank2" and out.cause == "node"
    assert [e.subject for e in out.evidence if e.metric == "explains"] == ["data-moving"]
