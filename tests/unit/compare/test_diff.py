"""``diag diff`` analysis on synthetic runs in real run stores: bands, divergence, alignment,
slowness by phase, 1 vs N ranks, kernels and bad inputs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from diag.compare.curves import Band, first_divergence
from diag.compare.diff import DiffConfig, diff_runs
from diag.errors import InputError
from tests.fakes.diff_runs import RunBuilder, base_loss

STEPS = range(60)


def _pair(tmp_path: Path, a: RunBuilder, b: RunBuilder) -> tuple[Path, Path]:
    return a.write(tmp_path / "a"), b.write(tmp_path / "b")


def test_same_run_is_equivalent_with_zero_deviation(tmp_path: Path) -> None:
    a = RunBuilder().steps(STEPS).write(tmp_path / "a")
    d = diff_runs(a, a)
    assert d.verdict.kind == "equivalent"
    assert d.loss is not None and d.loss.mode == "rank"
    assert d.loss.num_compared == 120 and d.loss.num_outside == 0
    assert d.loss.max_abs_dev == 0.0 and d.loss.divergent_step is None
    assert d.alignment.offset == 0


def test_small_noise_within_band_is_equivalent(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    noise = {(s, r): rng.uniform(-3e-4, 3e-4) for s in STEPS for r in (0, 1)}
    a, b = _pair(
        tmp_path,
        RunBuilder().steps(STEPS),
        RunBuilder(pid=200).steps(STEPS, lambda s, r: base_loss(s, r) * (1 + noise[(s, r)])),
    )
    d = diff_runs(a, b)
    assert d.verdict.kind == "equivalent", d.verdict.summary
    assert d.loss is not None and d.loss.num_outside == 0
    assert 1e-4 < d.loss.max_rel_dev <= 3e-4


def test_divergence_at_the_step_it_starts(tmp_path: Path) -> None:
    def loss(s: int, r: int) -> float:
        return base_loss(s, r) * (1.02 if s >= 37 and r == 1 else 1.0)

    a, b = _pair(tmp_path, RunBuilder().steps(STEPS), RunBuilder(pid=200).steps(STEPS, loss))
    d = diff_runs(a, b)
    assert d.verdict.kind == "diverged"
    assert (d.verdict.step, d.verdict.metric, d.verdict.rank) == (37, "loss", 1)
    assert d.loss is not None and d.loss.first_outside_step == 37
    assert d.loss.max_rel_dev == pytest.approx(0.02)


def test_one_noisy_step_or_two_apart_is_not_divergence(tmp_path: Path) -> None:
    def loss(s: int, r: int) -> float:
        return base_loss(s, r) * (1.5 if s in (20, 24, 40) and r == 0 else 1.0)

    a, b = _pair(tmp_path, RunBuilder().steps(STEPS), RunBuilder(pid=200).steps(STEPS, loss))
    d = diff_runs(a, b)
    assert d.verdict.kind == "equivalent"
    assert d.loss is not None
    assert (d.loss.num_outside, d.loss.first_outside_step, d.loss.divergent_step) == (3, 20, None)


def test_persistence_rule() -> None:
    band = Band(rtol=0.0, atol=0.0)
    assert first_divergence(np.array([0, 1, 0, 1, 1, 0, 0], bool), band) == 1
    assert first_divergence(np.array([1, 0, 0, 0, 1, 1, 0, 1], bool), band) == 4
    assert (
        first_divergence(np.array([0, 0, 0, 0, 1, 1], bool), band) is None
    )  # too close to the end
    assert first_divergence(np.array([0, 1, 1, 1], bool), band) == 1


def test_non_finite_values(tmp_path: Path) -> None:
    nan = float("nan")

    def a_loss(s: int, r: int) -> float:
        return nan if s >= 50 else base_loss(s, r)

    def b_loss(s: int, r: int) -> float:
        return nan if s >= 30 else base_loss(s, r)

    same = diff_runs(
        *_pair(
            tmp_path / "same", RunBuilder().steps(STEPS, a_loss), RunBuilder().steps(STEPS, a_loss)
        )
    )
    assert same.verdict.kind == "equivalent"  # NaN at the same steps in both runs
    early = diff_runs(
        *_pair(
            tmp_path / "early", RunBuilder().steps(STEPS, a_loss), RunBuilder().steps(STEPS, b_loss)
        )
    )
    assert (early.verdict.kind, early.verdict.step) == ("diverged", 30)
    assert math.isfinite(early.loss.max_abs_dev) if early.loss else False


def test_slower_in_a_phase(tmp_path: Path) -> None:
    a, b = _pair(
        tmp_path,
        RunBuilder().steps(STEPS),
        RunBuilder(pid=200).steps(STEPS, phases=lambda s, r: {"data": 17.0}, seed=1),
    )
    d = diff_runs(a, b)
    assert d.verdict.kind == "slower", d.verdict.summary
    assert d.verdict.phase == "data"
    assert d.verdict.by == pytest.approx(12.0, abs=1.5)
    row = {p.phase: p for p in d.phases}["data"]
    assert row.delta_ms == pytest.approx(12.0, abs=0.5)


def test_slower_phase_is_the_most_specific_of_those_that_grew(tmp_path: Path) -> None:
    a = RunBuilder().steps(STEPS, phases=lambda s, r: {"wait": 11.0}).write(tmp_path / "a")

    def longer_wait(s: int, r: int) -> dict[str, float]:
        return {"backward": 75.0, "wait": 31.0}  # backward +20 ms, all of it waiting

    b = RunBuilder(pid=200).steps(STEPS, phases=longer_wait, seed=1).write(tmp_path / "b")
    d = diff_runs(a, b)
    assert (d.verdict.kind, d.verdict.phase) == ("slower", "collective wait")

    def longer_backward(s: int, r: int) -> dict[str, float]:
        return {"backward": 75.0, "wait": 11.0}  # backward +20 ms of compute

    c = RunBuilder(pid=300).steps(STEPS, phases=longer_backward, seed=2).write(tmp_path / "c")
    d = diff_runs(a, c)
    assert (d.verdict.kind, d.verdict.phase) == ("slower", "backward")


def test_small_or_noisy_slowdowns_are_not_slower(tmp_path: Path) -> None:
    small = diff_runs(
        *_pair(
            tmp_path / "small",
            RunBuilder().steps(STEPS),
            RunBuilder(pid=200).steps(STEPS, phases=lambda s, r: {"data": 8.0}, seed=1),
        )
    )
    assert small.verdict.kind == "equivalent"  # +3% of the step: under the 5% threshold

    def drifting(s: int, r: int) -> dict[str, float]:
        return {"forward": 30.0 if s < 30 else 50.0}  # A's own halves differ by 20 ms

    noisy = diff_runs(
        *_pair(
            tmp_path / "noisy",
            RunBuilder().steps(STEPS, phases=drifting),
            RunBuilder(pid=200).steps(STEPS, phases=lambda s, r: {"forward": 58.0}, seed=1),
        )
    )
    assert noisy.slowdown.pct > 5 and noisy.verdict.kind == "equivalent"


def test_divergence_wins_over_slower(tmp_path: Path) -> None:
    a, b = _pair(
        tmp_path,
        RunBuilder().steps(STEPS),
        RunBuilder(pid=200).steps(
            STEPS,
            lambda s, r: base_loss(s, r) + (0.1 if s >= 10 else 0),
            phases=lambda s, r: {"data": 30.0},
        ),
    )
    d = diff_runs(a, b)
    assert d.slowdown.slower and (d.verdict.kind, d.verdict.step) == ("diverged", 10)


def test_one_vs_n_ranks_compares_the_job_mean(tmp_path: Path) -> None:
    def one(s: int, r: int) -> float:
        return base_loss(s, 0)

    def two(s: int, r: int) -> float:  # the two halves of the batch: mean = the 1-rank loss
        return base_loss(s, 0) + (0.05 if r == 0 else -0.05)

    a, b = _pair(tmp_path, RunBuilder(ranks=(0,)).steps(STEPS, one), RunBuilder().steps(STEPS, two))
    d = diff_runs(a, b)
    assert d.loss is not None and d.loss.mode == "job" and d.loss.num_compared == 60
    assert d.verdict.kind == "equivalent" and d.loss.max_rel_dev < 1e-9

    def two_broken(s: int, r: int) -> float:
        return two(s, r) + (0.1 if s >= 45 else 0.0)

    c = RunBuilder().steps(STEPS, two_broken).write(tmp_path / "c")
    d = diff_runs(a, c)
    assert (d.verdict.kind, d.verdict.step, d.verdict.rank) == ("diverged", 45, None)


def _resume_pair(tmp_path: Path, resumed_loss) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    ckpt = str(tmp_path / "ckpt" / "step20.pt")
    full = RunBuilder().steps(range(40)).checkpoint("save", ckpt, 20)
    # the resumed process numbers its steps from 0 and loaded the checkpoint before its first
    resumed = RunBuilder(pid=200).checkpoint("load", ckpt, -1, ranks=(0, 1))
    resumed.steps(range(20), lambda s, r: resumed_loss(s + 20, r))
    return _pair(tmp_path, full, resumed)


def test_resumed_run_is_aligned_by_its_checkpoint(tmp_path: Path) -> None:
    a, b = _resume_pair(tmp_path, base_loss)
    d = diff_runs(a, b)
    assert d.alignment.offset == 20 and "step20.pt" in d.alignment.how
    assert d.num_common_steps == 20 and d.verdict.kind == "equivalent"
    # swapped: A is the resumed run, B's steps move back by 20
    back = diff_runs(b, a)
    assert back.alignment.offset == -20 and back.verdict.kind == "equivalent"
    assert diff_runs(a, b, DiffConfig(offset=0)).verdict.kind == "diverged"


def test_forgotten_optimizer_diverges_after_the_resume_step(tmp_path: Path) -> None:
    a, b = _resume_pair(tmp_path, lambda s, r: base_loss(s, r) * (1.01 if s >= 21 else 1.0))
    d = diff_runs(a, b)
    assert (d.verdict.kind, d.verdict.step) == ("diverged", 21)
    j = d.to_json()
    assert j["alignment"]["b_offset"] == 20 and j["verdict"]["step"] == 21
    assert j["b"]["first_step"] == 0 and j["b"]["last_step"] == 19


def test_kernel_deltas(tmp_path: Path) -> None:
    a, b = _pair(
        tmp_path,
        RunBuilder().steps(STEPS).kernels("w10", 10, {"aten::mm": 20.0, "aten::add": 1.0}),
        RunBuilder(pid=200).steps(STEPS).kernels("w10", 10, {"aten::mm": 26.0, "aten::add": 1.1}),
    )
    d = diff_runs(a, b)
    assert [k.name for k in d.kernels] == ["aten::mm", "aten::add"]
    assert d.kernels[0].delta_ms == pytest.approx(6.0) and d.kernels[0].ratio == pytest.approx(1.3)
    assert diff_runs(a, RunBuilder().steps(STEPS).write(tmp_path / "c")).kernels == ()


def test_bad_inputs(tmp_path: Path) -> None:
    good = RunBuilder().steps(STEPS).write(tmp_path / "good")
    with pytest.raises(InputError, match="does not exist"):
        diff_runs(tmp_path / "missing", good)
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="not a diag run directory"):
        diff_runs(good, tmp_path / "plain")
    empty = RunBuilder().write(tmp_path / "empty")
    with pytest.raises(InputError, match="no step events"):
        diff_runs(good, empty)
    later = RunBuilder().steps(range(100, 120)).write(tmp_path / "later")
    with pytest.raises(InputError, match="no step in common"):
        diff_runs(good, later)


def _norm(s: int) -> float:
    return 1.0 + 0.5 / (s + 1)


def test_gradient_norm_divergence_with_the_same_loss(tmp_path: Path) -> None:
    a, b = _pair(
        tmp_path,
        RunBuilder().steps(STEPS).grad_norms(STEPS),
        RunBuilder(pid=200)
        .steps(STEPS)
        .grad_norms(STEPS, lambda s: _norm(s) * (1.05 if s >= 33 else 1)),
    )
    d = diff_runs(a, b)
    assert d.grad_norm is not None and d.grad_norm.band.rtol == 1e-2
    assert (d.verdict.kind, d.verdict.step, d.verdict.metric) == ("diverged", 33, "grad_norm")
    assert d.to_json()["grad_norm"]["divergent_step"] == 33


def test_gradient_norm_noise_and_sparse_samples(tmp_path: Path) -> None:
    sampled = range(0, 60, 10)
    a, b = _pair(
        tmp_path,
        RunBuilder().steps(STEPS).grad_norms(sampled),
        RunBuilder(pid=200)
        .steps(STEPS)
        .grad_norms(sampled, lambda s: _norm(s) * (1 + 0.005 * (-1) ** s)),
    )
    d = diff_runs(a, b)
    assert d.verdict.kind == "equivalent" and d.grad_norm is not None
    assert d.grad_norm.num_compared == 12 and d.grad_norm.max_rel_dev == pytest.approx(0.005)
    # persistence counts sampled steps: breaks at 30, 40, 50 are 3 of the next 5 samples
    c = (
        RunBuilder(pid=300)
        .steps(STEPS)
        .grad_norms(sampled, lambda s: _norm(s) * (1.1 if s >= 30 else 1))
    )
    d = diff_runs(a, c.write(tmp_path / "c"))
    assert (d.verdict.step, d.verdict.metric) == (30, "grad_norm")


def test_loss_named_on_a_tie_and_missing_grad_norms_noted(tmp_path: Path) -> None:
    def loss(s: int, r: int) -> float:
        return base_loss(s, r) * (1.1 if s >= 25 else 1)

    a, b = _pair(
        tmp_path,
        RunBuilder().steps(STEPS).grad_norms(STEPS),
        RunBuilder(pid=200)
        .steps(STEPS, loss)
        .grad_norms(STEPS, lambda s: _norm(s) * (1.1 if s >= 25 else 1)),
    )
    assert (diff_runs(a, b).verdict.step, diff_runs(a, b).verdict.metric) == (25, "loss")
    c = RunBuilder(pid=300).steps(STEPS).write(tmp_path / "c")
    d = diff_runs(a, c)
    assert d.grad_norm is None and any("gradient norms" in n and "run B" in n for n in d.notes)


def test_fingerprints_and_nonfinite_are_reported(tmp_path: Path) -> None:
    a, b = _pair(
        tmp_path,
        RunBuilder().steps(STEPS).fingerprints(STEPS, lambda s: 1000 + s),
        RunBuilder(pid=200)
        .steps(STEPS)
        .fingerprints(STEPS, lambda s: 1000 + s + (7 if s >= 20 else 0))
        .nonfinite(44, 1, "module_output", "body.0"),
    )
    j = diff_runs(a, b).to_json()
    assert j["params"] == {"num_compared": 120, "first_different_step": 20, "identical": False}
    assert j["b"]["first_nonfinite"] == {
        "step": 44,
        "rank": 1,
        "where": "module_output",
        "module": "body.0",
    }
    assert j["a"]["first_nonfinite"] is None and j["a"]["has_fingerprints"]
    assert diff_runs(a, a).to_json()["params"]["identical"] is True


def test_warm_up_steps_are_left_out_of_step_times(tmp_path: Path) -> None:
    ckpt = str(tmp_path / "step32.pt")
    a = RunBuilder().steps(range(40)).checkpoint("save", ckpt, 32).write(tmp_path / "a")
    resumed = RunBuilder(pid=200).checkpoint("load", ckpt, -1, ranks=(0, 1))
    # the resumed process's first 5 of its 8 steps are slow (start-up), the rest as fast as A
    b = resumed.steps(
        range(8),
        lambda s, r: base_loss(s + 32, r),
        phases=lambda s, r: {"forward": 300.0 if s < 5 else 30.0},
    ).write(tmp_path / "b")
    d = diff_runs(a, b)
    assert d.alignment.offset == 32 and d.verdict.kind == "equivalent"
    assert abs(d.slowdown.pct) < 2
    assert diff_runs(a, b, DiffConfig(warmup_steps=0)).slowdown.pct > 100
