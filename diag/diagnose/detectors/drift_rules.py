"""The drift detector's rules as plain functions on arrays and frames (no findings here).

- :func:`spikes`: a value is a *spike* when it is above a robust rolling baseline of the values
  before it: with ``med`` the median and ``mad = 1.4826 x median(|x - med|)`` of the previous
  ``window`` values (at least ``min_history`` of them), ``x > med + k x max(mad, rel_floor x
  |med|)`` and ``x > min_ratio x med`` (the second test only bites for a positive baseline).
  The median and the MAD ignore the spikes themselves (a single outlier moves neither),
  ``rel_floor`` keeps a flat series from flagging rounding noise, and ``min_ratio`` asks for a
  jump large in absolute terms too.
- :func:`replica_votes`: at each fingerprint step, the ranks of a data-parallel group must report
  one checksum. With three or more ranks the checksum of a strict majority is the healthy one
  and the others are the odd ranks; with two (or no majority) the replicas differ but which one
  is wrong cannot be told.
- :func:`scale_collapse`: the AMP loss scale *collapses* when it falls to ``peak / 2**halvings``
  of its running peak (repeated overflows, each halving it), or below ``tiny`` after at least
  three drops.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

MAD_SIGMA = 1.4826  # MAD x this estimates the standard deviation of normal noise
_CHUNK = 8192


def _history(padded: np.ndarray, window: int, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The ``window`` values before each of ``rows`` (a copy; NaN before its group's start).
    ``padded``: the values after ``window`` NaNs, made once by the caller."""
    w = sliding_window_view(padded, window)[rows].copy()  # row i: values[i - window : i]
    pos = rows[:, None] - window + np.arange(window)[None, :]
    w[pos < starts[rows][:, None]] = np.nan
    return w


def _median_mad(w: np.ndarray, min_history: int) -> tuple[np.ndarray, np.ndarray]:
    """Row medians and MAD-sigmas of ``w`` ignoring NaN (NaN where fewer than ``min_history``
    values): sorts, not ``nanmedian`` (a masked array per call: 2.7 ms per rank at scale)."""
    cnt = (~np.isnan(w)).sum(axis=1)
    enough = cnt >= max(min_history, 1)
    med = np.full(len(w), np.nan)
    mad = np.full(len(w), np.nan)
    if not enough.any():
        return med, mad
    w, cnt = w[enough], cnt[enough]
    m = _sorted_median(np.sort(w, axis=1), cnt)  # NaN sort last
    d = _sorted_median(np.sort(np.abs(w - m[:, None]), axis=1), cnt)
    med[enough], mad[enough] = m, MAD_SIGMA * d
    return med, mad


def _sorted_median(sorted_rows: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    r = np.arange(len(sorted_rows))
    return (sorted_rows[r, (cnt - 1) // 2] + sorted_rows[r, cnt // 2]) / 2.0


@dataclass(frozen=True, slots=True)
class Spike:
    """One spike: at ``step``, ``value`` against the baseline ``median`` and its ``mad``."""

    step: int
    value: float
    median: float
    mad: float

    @property
    def ratio(self) -> float:
        return self.value / self.median if self.median > 0 else float("inf")


def spikes(
    series: pd.Series,
    *,
    window: int,
    min_history: int,
    k: float,
    min_ratio: float,
    rel_floor: float,
) -> list[Spike]:
    """The spikes of ``series`` (index: step, sorted; non-finite values left out)."""
    table = pd.DataFrame({"group": 0, "step": series.index, "value": series.to_numpy()})
    found = spikes_table(
        table, window=window, min_history=min_history, k=k, min_ratio=min_ratio,
        rel_floor=rel_floor,
    )  # fmt: skip
    return found.get(0, [])


def spikes_table(
    table: pd.DataFrame,
    *,
    window: int,
    min_history: int,
    k: float,
    min_ratio: float,
    rel_floor: float,
) -> dict[int, list[Spike]]:
    """The spikes of many series at once: ``table`` has ``group``, ``step``, ``value`` (each
    group's steps sorted; non-finite values left out), the result each group's spikes, as
    :func:`spikes` finds them one series at a time.

    Vectorized for 100k ranks: the groups are concatenated and each window masked at its
    group's start; the baseline is computed only where a spike is possible. With a positive
    ``min_ratio``, a value at most ``min_ratio`` x the smallest value of its window is at most
    ``min_ratio`` x its median, so it fails the ratio test whatever the median (when that
    smallest value is positive): a healthy run's steps mostly end there."""
    # Arrays of one value a row, as few as possible (at 131,072 ranks x 50 steps each is ~50
    # MB): the table's own where every value is finite, each row's group start as the narrowest
    # integer that holds it, the steps read only at the spikes.
    values = table["value"].to_numpy(dtype=float)
    groups = table["group"].to_numpy()
    steps = table["step"].to_numpy()
    keep = np.isfinite(values)
    if not keep.all():
        values, groups, steps = values[keep], groups[keep], steps[keep]
    del keep
    n = len(values)
    if n == 0 or window < 1:
        return {}
    new = np.ones(n, dtype=bool)
    new[1:] = groups[1:] != groups[:-1]
    first = np.flatnonzero(new)
    del new
    index = np.int32 if n < 2**31 else np.int64
    starts = np.repeat(first.astype(index), np.diff(np.append(first, n)))
    del first
    padded = np.concatenate([np.full(window, np.nan), values])
    candidates = []
    for lo in range(0, n, _CHUNK):
        rows = np.arange(lo, min(n, lo + _CHUNK))
        w = _history(padded, window, rows, starts)
        enough = (~np.isnan(w)).sum(axis=1) >= max(min_history, 1)
        possible = enough
        if min_ratio > 0:
            low = np.where(np.isnan(w), np.inf, w).min(axis=1)
            possible = enough & ((values[rows] > min_ratio * low) | (low <= 0))
        candidates.append(rows[possible])
    out: dict[int, list[Spike]] = {}
    rows = np.concatenate(candidates)
    for lo in range(0, len(rows), _CHUNK):  # in chunks too: every row may be a candidate
        chunk = rows[lo : lo + _CHUNK]
        med, mad = _median_mad(_history(padded, window, chunk, starts), min_history)
        x = values[chunk]
        scale = np.fmax(mad, rel_floor * np.abs(med))
        with np.errstate(invalid="ignore"):
            flag = (x > med + k * scale) & (x > min_ratio * med)
        for i in np.flatnonzero(flag):
            row = chunk[i]
            out.setdefault(groups[row].item(), []).append(
                Spike(int(steps[row]), float(x[i]), float(med[i]), float(mad[i]))
            )
    return out


@dataclass(frozen=True, slots=True)
class Vote:
    """The replicas of one data-parallel group at one fingerprint step."""

    group: str
    step: int
    ranks: tuple[int, ...]
    agree: bool
    odd: tuple[int, ...]  # the minority; () when all agree or no majority can be told
    num_checksums: int


def replica_votes(fingerprints: pd.DataFrame) -> list[Vote]:
    """One :class:`Vote` per (group, step) with at least two ranks, in step order."""
    if fingerprints.empty:
        return []
    df = fingerprints[fingerprints["rank"] >= 0]
    df = df.drop_duplicates(subset=["dp_group", "step", "rank"], keep="last")
    out = []
    for (group, step), g in df.groupby(["dp_group", "step"], sort=True):
        if len(g) < 2:
            continue
        ranks = tuple(int(r) for r in g["rank"])
        sums = [int(c) for c in g["checksum"]]
        counts = Counter(sums)
        if len(counts) == 1:
            out.append(Vote(str(group), int(step), ranks, True, (), 1))
            continue
        top, top_n = counts.most_common(1)[0]
        odd: tuple[int, ...] = ()
        if len(ranks) >= 3 and top_n * 2 > len(ranks):
            odd = tuple(sorted(r for r, c in zip(ranks, sums, strict=True) if c != top))
        out.append(Vote(str(group), int(step), ranks, False, odd, len(counts)))
    return sorted(out, key=lambda v: (v.step, v.group))


@dataclass(frozen=True, slots=True)
class Collapse:
    """A loss-scale collapse on one rank: from ``peak`` down to ``value`` at ``detected_step``,
    in ``num_drops`` drops from ``onset_step`` (the first drop after the peak)."""

    rank: int
    onset_step: int
    detected_step: int
    peak: float
    value: float
    num_drops: int


def scale_collapse(scales: pd.DataFrame, *, halvings: int, tiny: float) -> list[Collapse]:
    """Per rank, the first collapse of its loss scale (``scales``: rank, step, ts_ns,
    loss_scale; see the module docstring)."""
    out: list[Collapse] = []
    if scales.empty:
        return out
    df = scales.sort_values(["rank", "step", "ts_ns"], kind="stable")
    for rank, g in df.groupby("rank", sort=True):
        peak, first_drop, drops, last = -np.inf, -1, 0, None
        for step, value in zip(g["step"], g["loss_scale"].astype(float), strict=True):
            if value >= peak:
                peak, drops = value, 0
            elif last is not None and value < last:
                drops += 1
                first_drop = int(step) if drops == 1 else first_drop
            last = value
            collapsed = value <= peak / 2.0**halvings or (value < tiny and drops >= 3)
            if drops and collapsed:
                out.append(Collapse(int(rank), first_drop, int(step), peak, value, drops))
                break
    return out
