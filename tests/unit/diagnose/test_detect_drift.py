"""The drift detector on synthetic numerics written into a real RunStore (numerics_scenarios)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.diagnose.detectors import drift
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.findings import Finding
from tests.fakes.numerics_scenarios import NumericsRun


def findings(run: NumericsRun, tmp_path: Path) -> dict[str, Finding]:
    out = drift.detect(Features.from_store(run.write(tmp_path / "run")))
    assert len({f.id for f in out}) == len(out)
    return {f.id: f for f in out}


@pytest.mark.parametrize("seed", range(6))
def test_clean_runs_have_no_drift(tmp_path: Path, seed: int) -> None:
    run = NumericsRun(seed=seed, ranks=4, steps=300)
    assert run_all(Features.from_store(run.write(tmp_path / "run"))) == []


def test_nan_in_a_module_names_rank_step_and_module(tmp_path: Path) -> None:
    got = findings(NumericsRun(nan_rank=2, nan_step=57), tmp_path)
    assert list(got) == ["drift:nonfinite"]
    f = got["drift:nonfinite"]
    assert (f.symptom, f.cause, f.severity, f.ranks) == ("drift", "kernel", "critical", (2,))
    assert (f.onset_step, f.detected_step, f.hosts) == (57, 57, ("node1",))
    assert "body.2's output" in f.summary and "ranks 0, 1, 3 followed from step 58" in f.summary
    assert f.confidence == 0.9
    first = f.evidence[0]
    assert first.subject == "rank 2 step 57: body.2 output" and first.value == 1.0
    assert first.note == "found by re-running the step (reproduced)"


def test_a_nan_not_reproduced_on_replay_is_a_node_fault(tmp_path: Path) -> None:
    run = NumericsRun(nan_rank=1, nan_step=40, nan_where="loss", nan_reproduced=False)
    f = findings(run, tmp_path)["drift:nonfinite"]
    assert (f.cause, f.ranks, f.onset_step) == ("node", (1,), 40)
    assert "transient fault" in f.summary


def test_a_nan_input_is_data(tmp_path: Path) -> None:
    f = findings(NumericsRun(nan_rank=3, nan_step=33, nan_where="input"), tmp_path)[
        "drift:nonfinite"
    ]
    assert (f.cause, f.ranks, f.onset_step) == ("data", (3,), 33)
    assert "rank 3's batch at step 33 held 1 NaN/Inf values" in f.summary


def test_a_nan_right_after_a_resume_is_the_checkpoint(tmp_path: Path) -> None:
    f = findings(NumericsRun(nan_rank=0, nan_step=4, load_step=-1), tmp_path)["drift:nonfinite"]
    assert (f.cause, f.ranks, f.onset_step) == ("checkpoint", (0,), 4)
    assert "4 steps after a checkpoint load (/ckpt/step100.pt, step 0)" in f.summary


def test_one_odd_replica_is_named_within_one_fingerprint_interval(tmp_path: Path) -> None:
    got = findings(NumericsRun(bitflip_ranks=(1,), bitflip_step=73, fingerprint_every=10), tmp_path)
    assert list(got) == ["drift:replica"]
    f = got["drift:replica"]
    assert (f.cause, f.severity, f.ranks, f.hosts) == ("node", "critical", (1,), ("node0",))
    assert (f.onset_step, f.detected_step) == (71, 80)
    assert f.confidence == 0.95  # the same odd rank at every later fingerprint
    assert "silent data corruption suspected" in f.summary
    assert "rank 1's parameters differ from the other 3 replicas" in f.summary


def test_two_replicas_diverge_without_a_culprit(tmp_path: Path) -> None:
    f = findings(NumericsRun(ranks=2, bitflip_ranks=(1,), bitflip_step=30), tmp_path)[
        "drift:replica"
    ]
    assert (f.ranks, f.confidence, f.detected_step) == ((), 0.5, 30)
    assert "the odd one cannot be told" in f.summary


def test_replica_finding_makes_a_later_nan_on_that_rank_a_node_fault(tmp_path: Path) -> None:
    run = NumericsRun(bitflip_ranks=(2,), bitflip_step=20, nan_rank=2, nan_step=95)
    got = findings(run, tmp_path)
    assert got["drift:nonfinite"].cause == "node" and got["drift:nonfinite"].ranks == (2,)
    assert got["drift:replica"].ranks == (2,)


def test_a_loss_spike_on_one_rank_with_an_outlier_batch_is_data(tmp_path: Path) -> None:
    run = NumericsRun(spike_ranks=(3,), spike_step=120, batch_outlier=True)
    f = findings(run, tmp_path)["drift:loss_spike"]
    assert (f.cause, f.ranks, f.onset_step, f.severity) == ("data", (3,), 120, "warning")
    assert "values up to 4e+03" in f.summary and f.confidence == 0.8


def test_a_loss_spike_on_every_rank_is_the_jobs(tmp_path: Path) -> None:
    f = findings(NumericsRun(spike_ranks=(0, 1, 2, 3), spike_step=90), tmp_path)["drift:loss_spike"]
    assert (f.cause, f.ranks, f.onset_step) == ("unknown", (), 90)
    assert f.summary.startswith("loss spike at step 90 on every rank")


def test_a_loss_spike_after_a_resume_is_the_checkpoint(tmp_path: Path) -> None:
    run = NumericsRun(spike_ranks=(0, 1, 2, 3), spike_step=105, load_step=100)
    f = findings(run, tmp_path)["drift:loss_spike"]
    assert (f.cause, f.onset_step) == ("checkpoint", 105)


def test_a_gradient_norm_spike(tmp_path: Path) -> None:
    f = findings(NumericsRun(grad_spike_step=150), tmp_path)["drift:grad_norm_spike"]
    assert (f.cause, f.ranks, f.onset_step) == ("unknown", (), 150)
    assert "gradient-norm spike at step 150: 9.3x the rolling median" in f.summary


def test_loss_scale_collapse(tmp_path: Path) -> None:
    f = findings(NumericsRun(scale_drops_from=60), tmp_path)["drift:loss_scale"]
    assert (f.onset_step, f.detected_step, f.ranks) == (61, 70, ())  # ten halvings
    assert "from 32768 to 32" in f.summary and f.severity == "warning"
