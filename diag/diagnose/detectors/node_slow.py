"""The node detector's machinery: slow columns (ranks, sets of ranks, layout groups) against
their peers, per step, with persistence and an onset (see :mod:`~diag.diagnose.detectors.node`
for what each threshold means). :class:`NodeConfig`, :func:`severity` and :func:`confidence`
are shared with the data detector."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from diag.diagnose.detectors import node_groups
from diag.diagnose.features import (
    Persistence,
    change_point,
    persistence,
    persistent_columns,
    quick_runs,
)

#: A set of ranks is slow as a whole when this quantile of its ranks' ratios is (see set_slow).
SET_QUANTILE = 0.25

#: Classes (or partitions of groups) smaller than this have no spread to judge by.
_MIN_SPREAD_CLASS = 4
#: A normal distribution's sigma over the MAD of its lower half (about its own median).
_LOW_MAD_SIGMA = 2.5

#: Confidence factor of a rank slow from the start when the layout is unknown: the ranks are
#: presumed to do the same work, but it may be its own pipeline stage (then: structural).
UNKNOWN_LAYOUT_FROM_START = 0.8


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """Thresholds of the node detector (see the module docstring for how each is used)."""

    warmup_steps: int = 5  # first steps of the run ignored (compilation, allocator warm-up)
    min_ratio: float = 1.08  # per-step compute / peers' median that flags a step
    min_excess_ms: float = 1.0  # ... and compute above the peers' median by at least this much
    min_excess_frac: float = 0.05  # ... and by at least this share of the job's step
    window: int = 10  # sliding window, in steps
    min_frac: float = 0.8  # flagged fraction of a window that makes it persistent
    min_run: int = 6  # ... or this many flagged steps in a row (found sooner)
    quick_min_run: int = 3  # ... or a quick run (steps far beyond the flag): at least this long
    quick_alpha: float = 0.01  # ... that noise makes this rarely over the whole table
    min_wait_explained: float = 0.5  # peers' wait growth / culprit's excess compute
    confident_gap: float = 0.2  # compute gap (ratio - 1) that counts fully toward confidence
    structural_share: float = 0.5  # gap before the onset / gap after it that means "no onset"
    min_z: float = 2.0  # ... and ratio - 1 >= this many robust sigmas of its class's spread
    warning: float = 0.1  # slowdown for severity "warning"
    critical: float = 0.3  # slowdown for severity "critical"
    # intermittent stalls (node_stall): a rank that loses its time in bursts
    stall_min_t: float = 3.0  # its mean lead over its peers, in standard errors
    stall_min_share_z: float = 3.0  # its class's slowest more often than chance, binomial sigmas
    stall_min_loss: float = 0.05  # its mean excess compute / the job's mean step
    stall_min_steps: int = 10  # steps from the onset the tests need
    # a rank process found stopped (node_stopped)
    stopped_min: int = 3  # state reads that found it stopped
    stopped_min_share: float = 0.05  # ... of its reads from the first such read to the last


def severity(slowdown: float, warning: float, critical: float) -> str:
    """``critical`` / ``warning`` / ``info`` for a slowdown (fraction of step time lost)."""
    return "critical" if slowdown >= critical else "warning" if slowdown >= warning else "info"


def confidence(consistency: float, gap: float, confident_gap: float) -> float:
    """``consistency x (0.5 + 0.5 x min(1, gap / confident_gap))``, in [0, 0.99]."""
    size = min(1.0, max(0.0, gap) / confident_gap)
    return float(min(0.99, max(0.0, consistency * (0.5 + 0.5 * size))))


@dataclass(frozen=True, slots=True)
class Slow:
    key: Any  # a rank, or a layout group's key (stage, (stage, TP position), class id)
    run: Persistence
    onset: int | None  # step; None: from the start
    detected: int
    slowdown: float
    gap: float  # median ratio - 1 in the anomaly
    culprit_ms: float
    peers_ms: float
    wait_before: float | None
    wait_after: float
    anomaly: tuple[int, int]  # first and last step of the anomaly
    before: tuple[int, int] | None  # first and last analysed step before onset; None: from start
    own_before_ms: float | None  # its median compute before onset; None: from the start

    @property
    def rank(self) -> int:
        return int(self.key)


#: Cells of a step x column table worked on at once where a whole table's temporaries are not
#: needed (~8 MB of floats).
_BLOCK_CELLS = 1 << 20


@dataclass(frozen=True, slots=True)
class Frames:
    """What slow columns are found on: per step and column (a rank or a group), its compute and
    wait, its peers' median compute and wait, the job step, and the spread of its class's
    ratios to their peers (NaN: too few to tell). ``peers_wait`` may be given as the function
    that makes it (:meth:`wait_of_peers` calls it once, when a found column needs it): at
    131,072 ranks the table is ~50 MB, not needed while :func:`find_slow` screens every column
    with its own temporaries."""

    compute: pd.DataFrame
    wait: pd.DataFrame
    peers: pd.DataFrame
    peers_wait: pd.DataFrame | Callable[[], pd.DataFrame]
    job_step: pd.Series
    spread: pd.DataFrame | None = None
    _made: dict[str, pd.DataFrame] = field(default_factory=dict, compare=False, repr=False)

    def wait_of_peers(self) -> pd.DataFrame:
        """The peers' median wait per step and column."""
        if isinstance(self.peers_wait, pd.DataFrame):
            return self.peers_wait
        made = self._made.get("peers_wait")
        if made is None:
            made = self._made["peers_wait"] = self.peers_wait()
        return made


def class_spread(ratio: pd.DataFrame, classes: Mapping[Any, Any] | None) -> pd.DataFrame:
    """Per column, the robust sigma of its class's ratios: per step ``_LOW_MAD_SIGMA x`` the
    median absolute deviation of the lower half of the class's ratios around their own median
    (the slow ones, even up to half of the class, are not in it, and what they do to their
    peers' medians shifts the lower half without spreading it), then the median over the run's
    steps (one number per class: a few ranks make a noisy estimate per step); NaN for classes
    under ``_MIN_SPREAD_CLASS`` columns."""
    values = ratio.to_numpy(dtype=float)
    out = np.full(values.shape[1], np.nan)
    members: dict[Any, list[int]] = {}
    for j, col in enumerate(ratio.columns):
        members.setdefault(classes.get(col) if classes is not None else 0, []).append(j)
    for cols in members.values():
        if len(cols) < _MIN_SPREAD_CLASS:
            continue
        # the table itself where the class is every column, the rows with a NaN left out only
        # where there are some: each copy was a step x rank table (45 MB at 131,072 ranks)
        v = values if len(cols) == values.shape[1] else values[:, cols]
        whole = ~np.isnan(v).any(axis=1)
        if not whole.all():
            v = v[whole]
        del whole
        if not len(v):
            continue
        half, block = (len(cols) + 1) // 2, max(1, _BLOCK_CELLS // len(cols))
        mads = []
        for lo in range(0, len(v), block):  # a block of steps at a time: each step's own
            low = np.sort(v[lo : lo + block], axis=1)[:, :half]  # each step's lower half
            mads.append(np.median(np.abs(low - np.median(low, axis=1, keepdims=True)), axis=1))
            del low
        mad = np.concatenate(mads)
        out[cols] = float(np.median(_LOW_MAD_SIGMA * mad))
    # one number per column, read-only: a broadcast view, not a step x rank table of copies
    return pd.DataFrame(
        np.broadcast_to(out, values.shape), index=ratio.index, columns=ratio.columns, copy=False
    )


def group_frames(
    compute_wait: tuple[pd.DataFrame, pd.DataFrame],
    job_step: pd.Series,
    partition: node_groups.Partition,
) -> Frames:
    """Per group of ``partition``: the median over its ranks (of the ranks' ``compute_wait``
    tables, steps x ranks), its peer groups' median."""

    def per_group(wide: pd.DataFrame) -> pd.DataFrame:
        cols = {k: wide[list(ranks)].median(axis=1) for k, ranks in partition.members.items()}
        return pd.DataFrame(cols, index=wide.index)

    def of_peers(grouped: pd.DataFrame) -> pd.DataFrame:
        cols = {k: grouped[list(p)].median(axis=1) for k, p in partition.peers.items() if p}
        return pd.DataFrame(cols, index=grouped.index).reindex(columns=grouped.columns)

    compute, wait = (per_group(table) for table in compute_wait)
    peers = of_peers(compute)
    # Groups whose peers are each other (the stages; the TP positions of one stage) are a class.
    classes = {k: min([k, *p], key=str) for k, p in partition.peers.items()}
    spread = class_spread(compute / peers, classes)
    return Frames(compute, wait, peers, of_peers(wait), job_step, spread)


def set_slow(frames: Frames, ranks: tuple[int, ...], cfg: NodeConfig) -> Slow | None:
    """A set of ranks judged as one: per step, the lower quartile over its ranks of each one's
    ratio to its peers (three quarters of its ranks at least that slow: a few very slow ranks,
    or half of them, do not make the set slow), against the median of their peers' compute;
    flags, persistence, onset and the wait check as for a rank."""
    cols = [c for c in frames.compute.columns if int(c) in set(ranks)]
    ratio = (frames.compute[cols] / frames.peers[cols]).quantile(SET_QUANTILE, axis=1)
    peers = frames.peers[cols].median(axis=1)

    def one(series: pd.Series) -> pd.DataFrame:
        return series.to_frame(name=ranks[0])

    wait, peers_wait = frames.wait[cols].median(axis=1), frames.wait_of_peers()[cols].median(axis=1)
    spread = frames.spread[cols].median(axis=1) if frames.spread is not None else None
    found = find_slow(
        Frames(
            one(peers * ratio),
            one(wait),
            one(peers),
            one(peers_wait),
            frames.job_step,
            one(spread) if spread is not None else None,
        ),
        cfg,
    )
    return found[0] if found else None


def find_slow(frames: Frames, cfg: NodeConfig) -> list[Slow]:
    compute, peers = frames.compute, frames.peers
    # A step is flagged when the rank is slower than its peers both relatively and absolutely:
    # on a busy node scheduler jitter makes 2 ms of compute look 2x slow now and then.
    floor = np.maximum(cfg.min_excess_ms, cfg.min_excess_frac * frames.job_step.to_numpy())
    # Step x rank tables at 131,072 ranks are ~50 MB each: the arithmetic below works in place
    # on as few of them as it can (the same values as the plain expressions), and the ratio is
    # not kept: a found column's is taken again (_slow_one)
    with np.errstate(divide="ignore", invalid="ignore"):  # as pandas divides: inf, NaN
        over = compute.to_numpy(dtype=float) / peers.to_numpy(dtype=float)
    flagged = over >= cfg.min_ratio
    over -= 1.0
    excess = compute.to_numpy(dtype=float) - peers.to_numpy(dtype=float)
    flagged &= excess >= floor[:, None]
    unknown = None
    if frames.spread is not None:  # and beyond what its class's own spread makes common
        spread = frames.spread.to_numpy()
        if spread.ndim == 2 and len(spread) and spread.strides[0] == 0:
            spread = spread[:1]  # one value a column (class_spread's view): a row, broadcast
        unknown = np.isnan(spread)
        flagged &= unknown | (over >= cfg.min_z * spread)
    # How far beyond the flag each step is (the least of its criteria): a few steps far beyond
    # it, rarer on noise than the whole window, say so sooner (features.quick_runs).
    with np.errstate(divide="ignore", invalid="ignore"):
        excess /= floor[:, None]
        strength = excess  # the least of the criteria, in place, a block of steps at a time
        block = max(1, _BLOCK_CELLS // max(1, over.shape[1]))
        for lo in range(0, len(over), block):
            rows = slice(lo, lo + block)
            np.minimum(over[rows] / (cfg.min_ratio - 1.0), strength[rows], out=strength[rows])
        del excess
        if frames.spread is not None:
            assert unknown is not None
            over /= cfg.min_z * spread  # over is not needed after this
            np.minimum(strength, over, out=strength, where=~unknown)
        del over
    quick = quick_runs(
        strength, flagged, alpha=cfg.quick_alpha, min_run=cfg.quick_min_run, max_run=cfg.min_run - 1
    )
    del strength
    slow = []
    # Only columns with a persistent run of flagged steps can be slow: find them all at once.
    persistent = persistent_columns(flagged, cfg.window, cfg.min_frac, cfg.min_run, quick)
    for j in np.flatnonzero(persistent):
        found = _slow_one(int(j), frames, flagged[:, j], quick[:, j], cfg)
        if found is not None:
            slow.append(found)
    return slow


def _slow_one(
    j: int,
    frames: Frames,
    flags: np.ndarray,
    quick: np.ndarray,
    cfg: NodeConfig,
) -> Slow | None:
    key = frames.compute.columns[j]
    run = persistence(flags, cfg.window, cfg.min_frac, cfg.min_run, quick)
    if run is None:
        return None
    ratio = frames.compute.iloc[:, j] / frames.peers.iloc[:, j]
    run = _refine_onset(run, flags, ratio.to_numpy(), cfg)
    compute, wait, job_step = frames.compute.iloc[:, j], frames.wait.iloc[:, j], frames.job_step
    steps = frames.compute.index.to_numpy()
    anomaly = slice(run.onset_pos, run.end_pos + 1)
    culprit_ms = float(compute.iloc[anomaly].median())
    peers_ms = float(frames.peers.iloc[:, j].iloc[anomaly].median())
    excess = culprit_ms - peers_ms
    peers_wait = frames.wait_of_peers().iloc[:, j]
    wait_after = float(peers_wait.iloc[anomaly].median())
    gap = float(ratio.iloc[anomaly].median()) - 1.0
    before_gap = float(ratio.iloc[: run.onset_pos].median()) - 1.0 if run.onset_pos else 0.0
    held = gap > 0 and before_gap >= cfg.structural_share * gap
    from_start = run.onset_pos < cfg.window or held
    own_wait = float(wait.iloc[anomaly].median())
    if from_start:
        wait_before = None
        grown = wait_after - own_wait
        step_ms = float(job_step.iloc[anomaly].median())
        slowdown = excess / step_ms if step_ms > 0 else 0.0
    else:
        wait_before = float(peers_wait.iloc[: run.onset_pos].median())
        # The peers wait for the culprit: their wait grew since the onset, or (when the run was
        # already noisy before it) they wait more than the culprit does in the anomaly.
        grown = max(wait_after - wait_before, wait_after - own_wait)
        after = float(job_step.iloc[anomaly].median())
        before = float(job_step.iloc[: run.onset_pos].median())
        # The job got slower by this much, but no more than this rank's own excess explains.
        growth = (after - before) / after if after > 0 else 0.0
        slowdown = min(growth, excess / after) if after > 0 else 0.0
    if excess <= 0 or grown < cfg.min_wait_explained * excess:
        return None
    return Slow(
        key=key,
        run=run,
        onset=None if from_start else int(steps[run.onset_pos]),
        detected=int(steps[run.detected_pos]),
        slowdown=max(0.0, slowdown),
        gap=gap,
        culprit_ms=culprit_ms,
        peers_ms=peers_ms,
        wait_before=wait_before,
        wait_after=wait_after,
        anomaly=(int(steps[run.onset_pos]), int(steps[run.end_pos])),
        before=None if from_start else (int(steps[0]), int(steps[run.onset_pos - 1])),
        own_before_ms=None if from_start else float(compute.iloc[: run.onset_pos].median()),
    )


def _refine_onset(
    run: Persistence, flags: np.ndarray, ratio: np.ndarray, cfg: NodeConfig
) -> Persistence:
    """Move the onset to the change point of the rank's compute ratio near the first persistent
    window: the step ``t`` that splits the span from ``window`` steps before the earliest
    candidate to ``window`` steps after the latest into the two most homogeneous segments (least
    summed absolute deviation from each segment's median: a robust L1 change point) with a higher
    median after than before. Noise
    flags just before a real onset would otherwise pull the onset early (and into the
    "structural" range); a step just after it whose "before" segment holds a few slow steps
    scores worse than the true onset. A run flagged from the first window on keeps its onset:
    there is no "before" to compare with."""
    w = cfg.window
    if run.onset_pos < w and flags[:w].mean() >= cfg.min_frac:
        return run
    x = np.nan_to_num(ratio, nan=1.0, posinf=10.0, neginf=0.0)
    lo, hi = max(1, run.onset_pos - w), min(len(x) - 1, run.detected_pos)
    found = change_point(x, range(lo, hi + 1), max(0, lo - w), min(len(x), hi + w))
    best = run.onset_pos if found is None else found
    onset = best if flags[best] else best + int(np.argmax(flags[best:]))
    if onset > run.detected_pos:
        return run
    end = run.end_pos
    return Persistence(onset, run.detected_pos, end, float(flags[onset : end + 1].mean()))
