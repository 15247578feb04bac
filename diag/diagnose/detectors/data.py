"""Data detector: the input pipeline holds the job back.

Three signatures, each a finding with cause ``data``:

A rank's peers are the ranks doing the same work (its work class in the run's layout,
:mod:`~diag.diagnose.layout`; every other rank when the layout is unknown): a pipeline's first
stage may load data that the others do not, and a heavier stage computes longer by design.

1. *One rank's loader* (``data-rank<r>``): the rank's ``data_ms`` exceeds its peers' median by
   more than ``max(min_excess_ms, min_excess_frac x job step)`` in ``>= min_frac`` of a sliding
   ``window``, in ``min_run`` steps in a row, or in a quick run (a few steps far beyond that
   floor, as the node detector's: :func:`~diag.diagnose.features.quick_runs`).
   ``slowdown`` as in the node detector: job step after vs before onset (or, from the
   start, the excess divided by the job step).
2. *Every rank's loader* (``data-all``): the per-step median over ranks of ``data_ms /
   duration_ms`` (the data share) is above ``share_threshold`` and above its own baseline (the
   median share of the first ``window`` analysed steps) by ``min_share_growth``, persistently.
   ``slowdown`` = job step after vs before onset.
3. *Imbalance that moves* (``data-moving``; only ``info`` when a host's CPUs are saturated, since
   ranks descheduled in turn look the same): per step, each rank's compute over its work class's
   median (itself included); the step is imbalanced when the largest such ratio is
   ``>= min_ratio`` and that rank's compute is also ahead of its class's median by the floor,
   ``max(moving_min_excess_ms, min_excess_frac x job step)`` (a busy host's scheduling noise, a
   few tenths of a millisecond on one rank, is not an uneven batch: beside a busy loop it made
   one rank the "slowest" in 10 of 25 steps before the onset of a moving imbalance, enough to
   read as a node), in ``>= min_imbalanced_frac`` of steps, yet no rank is the slowest in more
   than ``max_top_share`` of those steps, or else none is the slowest of its work class (of
   ``k`` ranks) more than chance allows: ``(share - 1/k) / (1 - 1/k)`` within
   ``max_member_share`` and ``moving_sigmas`` standard errors of a uniform draw's share (0.68
   of 70 steps for the two replicas of a pipeline stage; a stage whose ranks show the uneven
   microbatches more is the job's slowest by the layout, while which replica moves); nor does a
   host or a data-parallel replica (all ranks of one replica read the same batch) hold the
   slowest rank more than ``max_top_share`` above chance (``(share - its ranks / all ranks) /
   (1 - its ranks / all ranks)``): the work itself is uneven (sequence lengths, sample sizes),
   not a node. ``ranks`` are the ``num_named`` most frequent slowest ranks; ``slowdown`` is the
   median over imbalanced steps of ``(the slowest rank's compute - its class's median) / job
   step``. Its evidence says how the work classes were found (``peers``).

Confidence: (1, 2) as in the node detector, ``consistency x (0.5 + 0.5 x min(1, gap /
confident_gap))`` with ``gap`` the excess as a fraction of the job step; (3) ``0.9 x imbalanced
fraction x (1 - top share)``: a rotating culprit is inferred, not observed, hence the 0.9 cap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from diag.diagnose.detectors.node import confidence, severity
from diag.diagnose.features import (
    Features,
    class_median,
    peer_median,
    persistence,
    persistent_columns,
    quick_runs,
)
from diag.diagnose.moving import SATURATED_CPU
from diag.findings import Evidence, Finding, job_cost_text


@dataclass(frozen=True, slots=True, kw_only=True)
class DataConfig:
    """Thresholds of the data detector (see the module docstring)."""

    warmup_steps: int = 5
    window: int = 10
    min_frac: float = 0.8
    min_run: int = 6  # ... or this many flagged steps in a row (found sooner)
    quick_min_run: int = 3  # ... or a quick run (steps far beyond the floor): at least this long
    quick_alpha: float = 0.01  # ... that noise makes this rarely over the whole table
    min_excess_ms: float = 2.0  # one rank: absolute floor of the data-wait excess
    min_excess_frac: float = 0.05  # one rank: excess as a fraction of the job step
    share_threshold: float = 0.15  # all ranks: data share of the step
    min_share_growth: float = 0.05  # all ranks: share above the early baseline
    min_ratio: float = 1.1  # moving: per-step max / median compute
    moving_min_excess_ms: float = 1.0  # moving: ... and max - median at least this (and the frac)
    min_imbalanced_frac: float = 0.5  # moving: fraction of steps that are imbalanced
    max_top_share: float = 0.4  # moving: a host's or replica's share as the slowest, over chance
    max_member_share: float = 0.2  # moving: a rank's share as its class's slowest, over chance
    moving_sigmas: float = 3.0  # ... or this many standard errors of a uniform draw's share
    num_named: int = 3  # moving: ranks named
    saturated_cpu_pct: float = 90.0  # moving: host CPU use at which it is only "info"
    confident_gap: float = 0.2
    warning: float = 0.1
    critical: float = 0.3


def detect(features: Features, cfg: DataConfig | None = None) -> list[Finding]:
    """Data-loader findings: one rank, every rank, or an imbalance that moves between ranks."""
    cfg = cfg or DataConfig()
    data = features.wide("data_ms", cfg.warmup_steps)
    if data.shape[1] < 1 or len(data) < cfg.window:
        return []
    duration = features.wide("duration_ms", cfg.warmup_steps).reindex_like(data)
    job_step = duration.median(axis=1)
    layout = features.work_layout()
    classes = layout.work_class if layout.known else None
    out = []
    if data.shape[1] >= 2:
        out.extend(_one_rank(data, job_step, cfg, classes))
    if not out:
        out.extend(_all_ranks(data, duration, job_step, cfg))
    compute = features.wide("compute_ms", cfg.warmup_steps)
    if compute.shape[1] >= 3:
        busy = _cpu_busy(features)
        units: dict[str, Mapping[int, object]] = {
            "host": features.hosts_of(),
            "replica": dict(layout.replica),
        }
        moving = _moving(compute, job_step.reindex(compute.index), cfg, busy, classes, units)
        out.extend(
            replace(f, evidence=(*f.evidence, _layout_ev(layout.describe(), classes)))
            for f in moving
        )
    return out


def _layout_ev(describe: str, classes: Mapping[int, int] | None) -> Evidence:
    num = len(set(classes.values())) if classes else 1
    return Evidence(
        metric="peers",
        subject="all ranks",
        value=float(num),
        unit="work classes",
        note=f"{describe}; each rank against its work class's median",
    )


def _cpu_busy(features: Features) -> float | None:
    """The median CPU use (0-100) of the run's busiest host, from the daemon's host samples
    taken while the job stepped (the daemon also samples before the workers start and after
    they end: idle seconds that pulled a saturated host's median from 95% to 74% on a short
    run)."""
    host = features.host
    if host.empty or "cpu_busy_pct" not in host:
        return None
    steps = features.steps
    if not steps.empty and "ts_ns" in host and {"start_ns", "end_ns"} <= set(steps.columns):
        during = host[
            host["ts_ns"].between(int(steps["start_ns"].min()), int(steps["end_ns"].max()))
        ]
        host = during if len(during) else host
    per_host = host.groupby("host")["cpu_busy_pct"].median()
    return float(per_host.max()) if len(per_host) else None


def _before_after(job_step: pd.Series, onset: int, end: int) -> float:
    after = float(job_step.iloc[onset : end + 1].median())
    before = float(job_step.iloc[:onset].median())
    return max(0.0, (after - before) / after) if after > 0 else 0.0


def _one_rank(
    data: pd.DataFrame,
    job_step: pd.Series,
    cfg: DataConfig,
    classes: Mapping[int, int] | None = None,
) -> list[Finding]:
    excess = data - peer_median(data, classes)
    floor = np.maximum(cfg.min_excess_ms, cfg.min_excess_frac * job_step.to_numpy())
    out = []
    # Only ranks with a persistent run of flagged steps can be named: find them all at once.
    flagged = excess.to_numpy() > floor[:, None]
    quick = quick_runs(
        excess.to_numpy() / floor[:, None],
        flagged,
        alpha=cfg.quick_alpha,
        min_run=cfg.quick_min_run,
        max_run=cfg.min_run - 1,
    )
    persistent = persistent_columns(flagged, cfg.window, cfg.min_frac, cfg.min_run, quick)
    for j in np.flatnonzero(persistent):
        rank = data.columns[j]
        flags = flagged[:, j]
        run = persistence(flags, cfg.window, cfg.min_frac, cfg.min_run, quick[:, j])
        if run is None:
            continue
        span = slice(run.onset_pos, run.end_pos + 1)
        extra = float(excess[rank].iloc[span].median())
        step_ms = float(job_step.iloc[span].median())
        structural = run.onset_pos < cfg.window
        slowdown = (
            extra / step_ms if structural else _before_after(job_step, run.onset_pos, run.end_pos)
        )
        onset = None if structural else int(data.index[run.onset_pos])
        mine = float(data[rank].iloc[span].median())
        out.append(
            Finding(
                id=f"data-rank{rank}",
                symptom="slowdown",
                cause="data",
                severity=severity(slowdown, cfg.warning, cfg.critical),
                ranks=(int(rank),),
                onset_step=onset,
                detected_step=int(data.index[run.detected_pos]),
                slowdown=slowdown,
                confidence=confidence(run.consistency, extra / step_ms, cfg.confident_gap),
                summary=(
                    f"rank {rank} waits {extra:.1f} ms/step longer for data than its peers "
                    f"{'from the start' if onset is None else f'from step {onset}'}; "
                    f"{job_cost_text(slowdown)}"
                ),
                evidence=(
                    Evidence(
                        metric="data_ms",
                        subject=f"rank {rank}",
                        value=mine,
                        reference=mine - extra,
                        unit="ms",
                        note="median data-loader wait in the anomaly vs the peers' median",
                    ),
                ),
            )
        )
    return out


def _all_ranks(
    data: pd.DataFrame, duration: pd.DataFrame, job_step: pd.Series, cfg: DataConfig
) -> list[Finding]:
    share = (data / duration.where(duration > 0)).median(axis=1).fillna(0.0)
    baseline = float(share.iloc[: cfg.window].median())
    flags = ((share > cfg.share_threshold) & (share > baseline + cfg.min_share_growth)).to_numpy()
    run = persistence(flags, cfg.window, cfg.min_frac, cfg.min_run)
    if run is None:
        return []
    now = float(share.iloc[run.onset_pos : run.end_pos + 1].median())
    slowdown = _before_after(job_step, run.onset_pos, run.end_pos)
    onset = int(data.index[run.onset_pos])
    return [
        Finding(
            id="data-all",
            symptom="slowdown",
            cause="data",
            severity=severity(slowdown, cfg.warning, cfg.critical),
            ranks=tuple(int(r) for r in data.columns),
            onset_step=onset,
            detected_step=int(data.index[run.detected_pos]),
            slowdown=slowdown,
            confidence=confidence(run.consistency, now - baseline, cfg.confident_gap),
            summary=(
                f"every rank waits for data: {now:.0%} of the step from step {onset} "
                f"(was {baseline:.0%}); {job_cost_text(slowdown)}"
            ),
            evidence=(
                Evidence(
                    metric="data_share",
                    subject="all ranks",
                    value=now,
                    reference=baseline,
                    note="median over ranks of data_ms / step, in the anomaly vs the first steps",
                ),
            ),
        )
    ]


def _member_share(rel: pd.DataFrame, classes: Mapping[int, int] | None, cfg: DataConfig) -> float:
    """How far one rank is the slowest of its work class more often than chance allows: per
    class of ``k`` ranks, its top rank's share of the steps above chance, ``(share - 1/k) / (1 -
    1/k)``, less the allowance: ``max_member_share``, or ``moving_sigmas`` standard errors of a
    share under a uniform draw over ``n`` steps (``sqrt(p (1 - p) / n) / (1 - p)``, ``p = 1/k``:
    two replicas drawn at random hold one of them in 65% of 70 steps once in a hundred runs);
    the largest over the classes (> 0: not moving). Classes of one rank say nothing. Within the
    class, not over all ranks: when one stage's ranks show an uneven microbatch more than the
    other's do, the job's slowest rank is mostly a rank of that stage by the layout, while which
    of its replicas it is still moves."""
    members: dict[int, list] = {}
    for col in rel.columns:
        members.setdefault(-1 if classes is None else classes.get(int(col), -1), []).append(col)
    best = -1.0
    for cols in members.values():
        k = len(cols)
        sub = rel[cols].dropna(how="all")
        if k < 2 or sub.empty:
            continue
        p, n = 1.0 / k, len(sub)
        share = float(sub.idxmax(axis=1).value_counts().max()) / n
        allowed = max(cfg.max_member_share, cfg.moving_sigmas * np.sqrt(p * (1 - p) / n) / (1 - p))
        best = max(best, (share - p) / (1.0 - p) - allowed)
    return best


def _unit_share(counts: Counter[int], unit: Mapping[int, object], ranks: pd.Index) -> float:
    """The largest share of imbalanced steps whose slowest rank is in one unit (a host, a
    replica), above the share chance gives it (its ranks / all ranks): ``(share - chance) / (1 -
    chance)``, 0 when the units say nothing (one unit, none known)."""
    size = Counter(unit[int(r)] for r in ranks if int(r) in unit)
    total = sum(counts.values())
    if len(size) < 2 or not total:
        return 0.0
    held = Counter(unit[r] for r in counts.elements() if r in unit)
    best = 0.0
    for u, n in held.items():
        chance = size[u] / len(ranks)
        best = max(best, (n / total - chance) / (1.0 - chance))
    return best


def _moving(
    compute: pd.DataFrame,
    job_step: pd.Series,
    cfg: DataConfig,
    cpu_busy: float | None = None,
    classes: Mapping[int, int] | None = None,
    units: Mapping[str, Mapping[int, object]] | None = None,
) -> list[Finding]:
    median = class_median(compute, classes)
    rel = compute / median
    ratio = rel.max(axis=1)
    ahead = (compute - median).max(axis=1)
    floor = np.maximum(cfg.moving_min_excess_ms, cfg.min_excess_frac * job_step)
    imbalanced = (ratio >= cfg.min_ratio) & (ahead >= floor)
    frac = float(imbalanced.mean())
    if frac < cfg.min_imbalanced_frac:
        return []
    slowest = rel[imbalanced].idxmax(axis=1)
    counts = Counter(int(r) for r in slowest)
    top_share = max(counts.values()) / len(slowest)
    if top_share > cfg.max_top_share and _member_share(rel[imbalanced], classes, cfg) > 0:
        return []  # one rank is the slowest, of all and of its class, more than chance says
    unit_share = max(
        (_unit_share(counts, unit, compute.columns) for unit in (units or {}).values()),
        default=0.0,
    )
    if unit_share > cfg.max_top_share:  # a host or a replica that is always the slowest
        return []
    named = sorted(counts, key=lambda r: (-counts[r], r))[: cfg.num_named]
    lost = (ahead / job_step)[imbalanced]
    slowdown = float(lost.median())
    gap = float(ratio[imbalanced].median()) - 1.0
    # On a host whose CPUs are saturated, ranks descheduled in turn look exactly like uneven
    # batches: say so, and do not raise it above info.
    saturated = cpu_busy is not None and cpu_busy >= cfg.saturated_cpu_pct
    level = "info" if saturated else severity(slowdown, cfg.warning, cfg.critical)
    caveat = ""
    busy_evidence: tuple[Evidence, ...] = ()
    if saturated and cpu_busy is not None:
        caveat = (
            f"; but the host CPUs are {cpu_busy:.0f}% busy, so ranks taking turns for CPU time "
            "look the same: check for contention first"
        )
        busy_evidence = (
            Evidence(
                metric=SATURATED_CPU,
                subject="hosts",
                value=cpu_busy,
                reference=cfg.saturated_cpu_pct,
                unit="%",
                note="median CPU use of the job's hosts: ranks descheduled in turn look like "
                "uneven batches",
            ),
        )
    return [
        Finding(
            id="data-moving",
            symptom="slowdown",
            cause="data",
            severity=level,
            ranks=tuple(named),
            slowdown=slowdown,
            confidence=float(min(0.9, 0.9 * frac * (1.0 - top_share))),
            summary=(
                f"compute is uneven across ranks in {frac:.0%} of steps (slowest rank "
                f"{gap:.0%} above the median) but the slowest rank keeps changing (none in more "
                f"than {top_share:.0%}): uneven batches (e.g. sequence lengths), not a node"
                f"{caveat}"
            ),
            evidence=(
                Evidence(
                    metric="compute_max_over_median",
                    subject="all ranks",
                    value=gap + 1.0,
                    reference=cfg.min_ratio,
                    note="median over imbalanced steps of max / median compute",
                ),
                Evidence(
                    metric="top_slowest_share",
                    subject=f"rank {named[0]}",
                    value=top_share,
                    reference=cfg.max_top_share,
                    note="share of imbalanced steps in which the most frequent rank is slowest",
                ),
                *busy_evidence,
            ),
        )
    ]
