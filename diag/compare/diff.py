"""``diag diff RUN_A RUN_B``: are two runs the same training, and is B slower?

Run A is the reference (before an upgrade, the uninterrupted run, 1 rank), run B the candidate.
Steps are aligned first (:mod:`diag.compare.series`: a resumed run's steps are put on the
run it resumed from by the checkpoint they share), then:

- the loss, and the gradient norm when both runs sampled it, are compared step by step within a
  tolerance band, per rank or as the job mean (:mod:`diag.compare.curves`);
- parameter fingerprints, when both runs have them, say up to which step the two runs' parameters
  were bitwise identical (information only: non-deterministic kernels change the last bits);
- step time by phase (each run's steady state: after its warm-up, all its steps) and kernel
  time per step are compared (:mod:`diag.compare.perf`).

**Verdict.** ``diverged`` at the earliest divergent step of the loss or the gradient norm (the
loss on a tie); else ``slower`` when B's median step is at least ``min_slower_pct`` longer and
outside the runs' own spread; else ``incomplete`` when the comparison did not cover every step
both jobs made (:mod:`diag.compare.coverage`: one run's recorded steps stop short of the other's,
or of its own job); else ``equivalent``. Divergence wins over slowness, both over an incomplete
comparison (they are found in the steps compared); equivalence is never claimed on part of the
runs. The coverage is in ``--json`` (``coverage``) and, when incomplete, in the notes.

**Default tolerances** (:class:`DiffConfig`): loss ``rtol`` 1e-3, ``atol`` 1e-6; gradient norm
``rtol`` 1e-2, ``atol`` 1e-6; 3 of 5 steps outside the band to diverge. On CPU (gloo, a fixed
world size, one thread per rank) a correct resume repeats the uninterrupted run bit for bit, so
these bands are wide there; they are set for GPUs, where non-deterministic kernels (atomics in
reductions and scatter/index backward, cuBLAS split-K, NCCL's reduction order) make two correct
fp32 runs drift apart slowly (relative differences far below 1e-3 in the loss over tens to
hundreds of steps; the gradient norm, a sum of squares of every gradient, moves more, hence its
wider band). Mixed precision or long comparisons need wider bands (``--rtol``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from diag.compare import perf as diff_perf
from diag.compare.coverage import Coverage, JobProgress, coverage
from diag.compare.curves import Band, CurveDiff, compare
from diag.compare.perf import KernelDelta, PhaseDelta, Slowdown
from diag.compare.series import Alignment, RunSide, align, load_run, shifted
from diag.errors import InputError

LOSS_BAND = Band(rtol=1e-3, atol=1e-6)
GRAD_NORM_BAND = Band(rtol=1e-2, atol=1e-6)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffConfig:
    """The bands, the slowness threshold (% of A's median step), the warm-up steps left out of
    the step-time comparison, the step offset of B on A (``None``: found from a shared
    checkpoint) and how many kernel changes to list."""

    loss: Band = LOSS_BAND
    grad_norm: Band = GRAD_NORM_BAND
    min_slower_pct: float = diff_perf.MIN_SLOWER_PCT
    warmup_steps: int = diff_perf.WARMUP_STEPS
    offset: int | None = None
    top_kernels: int = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamsDiff:
    """Parameter fingerprints at the (rank, step) points both runs have: ``num_compared``, and the
    first step where a rank's fingerprints differ (``None``: identical at every compared step)."""

    num_compared: int
    first_different_step: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "num_compared": self.num_compared,
            "first_different_step": self.first_different_step,
            "identical": self.first_different_step is None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """``kind``: "equivalent", "diverged" (at ``step``, in ``metric``, first on ``rank`` when
    compared per rank), "slower" (``by`` % of A's median step, most in ``phase``) or
    "incomplete" (the comparison left steps out: ``summary`` says which and why)."""

    kind: str
    step: int | None = None
    metric: str | None = None
    rank: int | None = None
    phase: str | None = None
    by: float | None = None
    summary: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step,
            "metric": self.metric,
            "rank": self.rank,
            "phase": self.phase,
            "by": None if self.by is None else round(self.by, 2),
            "summary": self.summary,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDiff:
    """Everything ``diag diff`` found; ``to_json()`` is the ``--json`` object."""

    a: RunSide
    b: RunSide
    alignment: Alignment
    num_common_steps: int
    verdict: Verdict
    loss: CurveDiff | None
    grad_norm: CurveDiff | None
    params: ParamsDiff | None
    phases: tuple[PhaseDelta, ...]
    slowdown: Slowdown
    kernels: tuple[KernelDelta, ...]
    notes: tuple[str, ...] = field(default=())
    coverage: Coverage | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "alignment": {**self.alignment.to_json(), "common_steps": self.num_common_steps},
            "verdict": self.verdict.to_json(),
            "loss": self.loss.to_json() if self.loss else None,
            "grad_norm": self.grad_norm.to_json() if self.grad_norm else None,
            "params": self.params.to_json() if self.params else None,
            "phases": [p.to_json() for p in self.phases],
            "kernels": [k.to_json() for k in self.kernels],
            "notes": list(self.notes),
            "coverage": self.coverage.to_json() if self.coverage else None,
        }


def diff_runs(a_path: str | Path, b_path: str | Path, cfg: DiffConfig | None = None) -> RunDiff:
    """Compare two run directories (module doc); :class:`InputError` for a path that is not a
    run directory, a run without steps, or two runs without a step in common."""
    cfg = cfg or DiffConfig()
    a, b = load_run(a_path), load_run(b_path)
    alignment = align(a, b, cfg.offset)
    b_steps = shifted(b.steps, alignment.offset)
    common = set(a.steps["step"]) & set(b_steps["step"])
    if not common:
        raise InputError(
            f"{a.path} (steps {_span(a.steps)}) and {b.path} (steps {_span(b_steps)} as "
            f"aligned: {alignment.how}) have no step in common"
        )
    loss = compare("loss", _loss(a.steps), _loss(b_steps), cfg.loss)
    grad = None
    if len(a.grad_norm) and len(b.grad_norm):
        grad = compare(
            "grad_norm", a.grad_norm, shifted(b.grad_norm, alignment.offset), cfg.grad_norm
        )
    params = _params(a.fingerprints, shifted(b.fingerprints, alignment.offset))
    phases = diff_perf.phase_deltas(
        _warm(a.steps, cfg.warmup_steps), _warm(b.steps, cfg.warmup_steps)
    )
    slow = diff_perf.slowdown(phases, cfg.min_slower_pct)
    notes = []
    if loss is None:
        notes.append("no loss at a common step: the loss was not compared")
    if grad is None:
        missing = [name for name, side in (("A", a), ("B", b)) if side.grad_norm.empty]
        notes.append(
            "gradient norms sampled at no common step"
            if not missing
            else f"no gradient norms in run {' or '.join(missing)} (hook numerics off or older)"
        )
    cover = coverage(_progress(a), _progress(b), alignment.offset)
    notes.extend(f"incomplete: {r}" for r in cover.reasons)
    if (a.kernels is None) != (b.kernels is None):
        notes.append(
            f"no complete profiler window in run {'A' if a.kernels is None else 'B'}: "
            "kernel times not compared"
        )
    return RunDiff(
        a=a,
        b=b,
        alignment=alignment,
        num_common_steps=len(common),
        verdict=decide(loss, grad, slow, cover, len(common)),
        loss=loss,
        grad_norm=grad,
        params=params,
        phases=phases,
        slowdown=slow,
        kernels=diff_perf.kernel_deltas(
            a.kernels, a.window_steps, b.kernels, b.window_steps, top=cfg.top_kernels
        ),
        notes=tuple(notes),
        coverage=cover,
    )


def _progress(side: RunSide) -> JobProgress:
    if side.progress is not None:
        return side.progress
    last = int(side.steps["step"].max())
    return JobProgress(last_step=last, job_last_step=last)


def decide(
    loss: CurveDiff | None,
    grad: CurveDiff | None,
    slow: Slowdown,
    cover: Coverage | None = None,
    num_common: int = 0,
) -> Verdict:
    """The verdict from the curve comparisons, the slowdown and the coverage (module doc)."""
    diverged = [c for c in (loss, grad) if c is not None and c.divergent_step is not None]
    if diverged:
        first = min(diverged, key=lambda c: c.divergent_step or 0)  # stable: loss wins a tie
        on = f" (rank {first.divergent_rank})" if first.divergent_rank is not None else ""
        return Verdict(
            kind="diverged",
            step=first.divergent_step,
            metric=first.metric,
            rank=first.divergent_rank,
            summary=(
                f"diverged at step {first.divergent_step}{on}: {first.metric} outside "
                f"|b - a| <= {first.band.atol:g} + {first.band.rtol:g} x |a| "
                f"from there on ({first.band.persist_k} of {first.band.persist_n} steps)"
            ),
        )
    if slow.slower:
        return Verdict(
            kind="slower",
            phase=slow.phase,
            by=slow.pct,
            summary=(
                f"slower by {slow.pct:.1f}% (median step +{slow.delta_ms:.2f} ms, noise "
                f"{slow.noise_ms:.2f} ms), most in {slow.phase} (+{slow.phase_delta_ms:.2f} ms)"
            ),
        )
    compared = [c for c in (loss, grad) if c is not None]
    what = "; ".join(
        f"{c.metric} within the band at {c.num_compared - c.num_outside} of {c.num_compared} "
        f"points, max relative deviation {c.max_rel_dev:.3g}"
        for c in compared
    )
    if cover is not None and not cover.complete:
        seen = f"no divergence in the {num_common} steps compared" + (f" ({what})" if what else "")
        return Verdict(kind="incomplete", summary=f"incomplete: {cover.reasons[0]}; {seen}")
    if not compared:
        return Verdict(kind="equivalent", summary="no divergence seen: no loss or gradient norm")
    return Verdict(kind="equivalent", summary=f"equivalent: {what}")


def _loss(steps: pd.DataFrame) -> pd.DataFrame:
    rows = steps[steps["has_loss"]]
    return pd.DataFrame({"rank": rows["rank"], "step": rows["step"], "value": rows["loss"]})


def _params(a: pd.DataFrame, b: pd.DataFrame) -> ParamsDiff | None:
    if a.empty or b.empty:
        return None
    pairs = a.merge(b, on=["rank", "step"], suffixes=("_a", "_b"))
    if pairs.empty:
        return None
    differ = pairs[pairs["value_a"] != pairs["value_b"]]
    return ParamsDiff(
        num_compared=len(pairs),
        first_different_step=int(differ["step"].min()) if len(differ) else None,
    )


def _warm(steps: pd.DataFrame, warmup: int) -> pd.DataFrame:
    """``steps`` without the run's first ``warmup`` steps (all of them if none would be left)."""
    warm = steps[steps["step"] >= int(steps["step"].min()) + warmup]
    return warm if len(warm) else steps


def _span(steps: pd.DataFrame) -> str:
    return f"{int(steps['step'].min())}..{int(steps['step'].max())}"
