"""Checkpoint detector: slow steps that are slow because they save or load a checkpoint.

Per step (after warm-up): the job step is the median over ranks of ``duration_ms``; its excess is
the job step minus the median job step of the run. The step's checkpoint time is the largest over
ranks of ``max(ckpt_ms, the rank's CheckpointEvent durations at that step)``. A step is a *slow
checkpoint step* when its excess is ``>= min_excess_frac`` of the median step and its checkpoint
time is ``>= min_explained`` of the excess.

- ``slowdown``: time lost in those steps (sum of excesses) / the run's total job-step time: the
  fraction of the run spent waiting on checkpoints beyond a normal step.
- No finding when that is under ``min_slowdown`` (2%): ordinary checkpoints cost a little.
- ``onset_step`` (= ``detected_step``): the first of those steps whose checkpoint time is at least
  half their median (the first save at the slow level; earlier ordinary saves do not date it).
- ``confidence``: ``0.5 + 0.45 x mean(min(1, ckpt time / excess))`` over those steps.
- Evidence: each path's throughput in MB/s (bytes / seconds, summed over its events), and the
  fraction of time lost. severity: ``critical`` if slowdown >= 0.3, ``warning`` if >= 0.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.diagnose.detectors.node import severity
from diag.diagnose.features import Features
from diag.findings import Evidence, Finding


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointConfig:
    """Thresholds of the checkpoint detector (see the module docstring)."""

    warmup_steps: int = 5
    min_excess_frac: float = 0.25  # step excess over the median step that makes it "slow"
    min_explained: float = 0.5  # checkpoint time / step excess needed to blame the checkpoint
    num_paths: int = 3  # paths named, slowest first
    min_slowdown: float = 0.02  # checkpoints costing less of the run are normal: no finding
    warning: float = 0.1
    critical: float = 0.3


def detect(features: Features, cfg: CheckpointConfig | None = None) -> list[Finding]:
    """One finding when slow steps are explained by checkpoint time, else none."""
    cfg = cfg or CheckpointConfig()
    duration = features.wide("duration_ms", cfg.warmup_steps)
    if duration.empty:
        return []
    job_step = duration.median(axis=1)
    typical = float(job_step.median())
    excess = job_step - typical
    ckpt = _ckpt_per_step(features, duration.index)
    slow = (excess >= cfg.min_excess_frac * typical) & (ckpt >= cfg.min_explained * excess)
    if not slow.any() or typical <= 0:
        return []
    steps = [int(s) for s in job_step.index[slow]]
    # The onset is the first save at the slow level (at least half the median checkpoint time of
    # the slow steps): ordinary saves before storage slowed down cost a little too.
    level = float(ckpt[slow].median())
    onset = next((s for s in steps if float(ckpt.loc[s]) >= 0.5 * level), steps[0])
    lost = float(excess[slow].sum())
    slowdown = lost / float(job_step.sum())
    if slowdown < cfg.min_slowdown:
        return []
    explained = float(np.minimum(1.0, ckpt[slow] / excess[slow]).mean())
    events = features.ckpt[features.ckpt["step"].isin(steps)]
    evidence = [
        Evidence(
            metric="time_lost",
            subject="checkpoints",
            value=slowdown,
            unit="fraction",
            note=f"{lost / 1e3:.1f} s over {len(steps)} slow checkpoint steps",
        ),
        Evidence(
            metric="checkpoint_ms",
            subject="slow steps",
            value=float(ckpt[slow].median()),
            reference=float(excess[slow].median()),
            unit="ms",
            note="median checkpoint time vs the median step excess",
        ),
    ]
    paths = _paths(events, cfg.num_paths)
    ranks: tuple[int, ...] = ()
    for path, mb_s, ms in paths:
        evidence.append(
            Evidence(
                metric="throughput_mb_s",
                subject=path,
                value=mb_s,
                unit="MB/s",
                note=f"{ms:.0f} ms",
            )
        )
    if len(events):
        worst = events.groupby("rank")["duration_ms"].sum()
        ranks = tuple(int(r) for r in worst.index[worst >= 0.5 * worst.max()])
    where = f" ({', '.join(p for p, _, _ in paths)})" if paths else ""
    rates = [r for _, r, _ in paths if np.isfinite(r)]
    rate = f" at {min(rates):.0f} MB/s" if rates else ""
    return [
        Finding(
            id="checkpoint",
            symptom="slowdown",
            cause="checkpoint",
            severity=severity(slowdown, cfg.warning, cfg.critical),
            ranks=ranks,
            onset_step=onset,
            detected_step=onset,
            slowdown=slowdown,
            confidence=0.5 + 0.45 * explained,
            summary=(
                f"{len(steps)} steps slowed by checkpoints{where}{rate}: "
                f"{slowdown:.1%} of the run's step time lost"
            ),
            evidence=tuple(evidence),
        )
    ]


def _ckpt_per_step(features: Features, steps: pd.Index) -> pd.Series:
    """Checkpoint ms per step: the largest over ranks of the step's own or its events' time
    (never below 0). ``steps`` is unique on (step, rank): its own times are grouped by step
    alone (a group-by on both keys built a (step, rank) index of every row: at 131,072 ranks
    x 50 steps the detector's peak, ~200 MB)."""
    st = features.steps
    step = st["step"].to_numpy()
    if len(step):  # sorted by step: one reduction per run of equal steps, no group-by's keys
        starts = np.flatnonzero(np.concatenate(([True], step[1:] != step[:-1])))
        peak = np.fmax.reduceat(st["ckpt_ms"].to_numpy(dtype=float), starts)  # NaN: none
        own = pd.Series(peak, index=step[starts].astype(np.int64))
    else:
        own = pd.Series(dtype=float)
    events = features.ckpt.groupby(["step", "rank"])["duration_ms"].sum()
    from_events = events.groupby(level="step").max() if len(events) else pd.Series(dtype=float)
    both = pd.concat([own, from_events], axis=1).max(axis=1).clip(lower=0.0)
    return both.reindex(steps).fillna(0.0)


def _paths(events: pd.DataFrame, num: int) -> list[tuple[str, float, float]]:
    """(path, MB/s, total ms) of the slowest paths: bytes / seconds summed over each path."""
    if events.empty:
        return []
    g = events.groupby("path").agg(num_bytes=("num_bytes", "sum"), ms=("duration_ms", "sum"))
    g["mb_s"] = (g["num_bytes"] / 1e6 / (g["ms"] / 1e3)).where(g["num_bytes"] > 0, np.nan)
    g = g.sort_values("ms", ascending=False, kind="stable").head(num)
    return [(str(p), float(r["mb_s"]), float(r["ms"])) for p, r in g.iterrows()]
