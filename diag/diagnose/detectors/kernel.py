"""Kernel detector: one operator or GPU kernel slower on one rank than on its peers, or slower
than earlier in the same run (a regression), from the ``kernel`` frame (one
:class:`~diag.schema.KernelSummary` per kernel per profiler window per rank).

A kernel is ``(name, category)``; its time in a window is ``total_ns`` summed over devices (0 when
a rank profiled the window without it; unknown when the rank did not profile that window, e.g. its
profiler was still busy, or did not complete it (cut short at the job's end, a profiler error):
such cells take no part in medians or flags; a ``cpu_op``'s time is unknown too in a window that
recorded the device's activity only, ``ProfileWindow.device_only``). ``collective`` kernels are
ignored (they hold the wait for late peers: the link and node detectors' business), and so are
autograd's per-node wrappers (``autograd::engine::evaluate_function: ...``), whose time includes
the gradient hooks run inside them (DDP's reducer: bucket copies and all-reduce launches). A
window's duration is the median over ranks of its :class:`~diag.schema.ProfileWindow`
``duration_ns`` (without one, the window's busiest rank's summed ``kernel``-category time, or the
summed ``cpu_op`` time).

- **Cross-rank** (``kernel:<name>:rank<r>``): in a window, rank r is slow when its time over the
  median over ranks is >= ``rank_ratio`` and the excess (time - median) is >= ``min_excess_frac``
  of the window (the excess says it matters, the ratio that it is more than noise); flagged when,
  from an onset window on, that holds in >= ``consistent_frac`` of the windows (at least
  ``min_windows``), with >= ``min_ranks`` ranks. Windows before the onset do not count against
  it: a kernel that slows down mid-run was fine before. A window in which the rank calls the
  kernel more than ``max_calls_ratio`` x the median number of calls is not slow for that: the rank
  does more work there (an extra loop, a different batch), it does not run a slower kernel. It
  does the same work another way when, in that window, it also calls some operator less than ``1 /
  max_calls_ratio`` x as often as the median rank of its work class (its pipeline stage) (a layer
  done as a broadcast multiply: fewer ``aten::addmm``, more and far heavier ``aten::mul``); then
  an operator with more calls is slow when each call is slower too (time per call ``>=
  rank_ratio`` x the median over ranks' per call) and that alone, ``time - calls x the median per
  call``, is ``>= min_excess_frac`` of the window. Extra work on top of the peers' (every operator
  of theirs called as often, more matrix products besides) stays more work.
- **Regression** (``kernel:<name>:regression``): per call (``total_ns / num_calls``; a window that
  calls the kernel more often, e.g. with an eval pass, does more work, it does not run a slower
  kernel), and not in a window with more than ``max_calls_ratio`` x the baseline's calls (other
  work: 600 extra calls on larger tensors need not cost per call what 8 did). A rank's
  baseline is its median per-call time over the first ``baseline_windows`` windows; a later
  window regresses when per call / baseline >= ``regress_ratio`` and the time lost,
  ``(per call - baseline) x calls``, is >= ``min_excess_frac`` of the window; a rank regresses
  when, from an onset window on, >= ``consistent_frac`` of the windows do. One finding
  lists every regressing rank (not already flagged cross-rank for that kernel); its excess is the
  time lost, its reference the baseline x calls.

``slowdown`` = median over flagged windows of the mean excess over the named ranks / window
duration. Nested wrappers: a flagged CPU operator is dropped when a flagged operator of the same
category and kind, with the same ranks and a smaller total time, explains >= ``nest_share`` of its
excess and can lie inside it (its total in no window above the wrapper's on the named ranks:
``aten::matmul`` -> ``aten::mm``); the wrapper is named in the evidence. Severity:
``critical`` at ``critical_slowdown``, else ``warning`` (an excess under ``min_excess_frac`` of
the window is never flagged).
Confidence = 0.4 + 0.4 x consistency + 0.15 x min(1, flagged windows / 4), at most 0.95.
A cross-rank finding also carries ``rank_excess_share``: its excess over its flagged windows /
the least the rank lost to its peers in them (:func:`rank_excess`); reconciliation asks a kernel
that takes over a slow rank's diagnosis to hold most of that.

**Preemption is not the operator's.** A profiler times an operator by the wall clock, so a
thread descheduled inside it (another process on its CPU, a busy VM) makes it look many times
slower (busy CI: ``aten::addcdiv_`` 27x its peers' time in one window, a neighbour process on
the rank's core). The hook measures each step's run-queue delay (``cpu_wait_ms``: ready to run,
not running), and a window covers whole steps, so what a rank waited for a CPU in a window's
steps beyond what its work class's median and its own demand explain (``preempted``,
:func:`preempted`: a rank that computes longer on a host the job oversubscribes waits longer in
proportion, and that wait is its slow operator's) bounds how much of any operator's excess there
can be preemption. A preemption is a burst that lands in whichever operator runs, so where an
operator's excess over the window's median is within it the window cannot tell: the rank's time
there is unknown, as in a window it was not profiled in (consistency counts the windows that
can tell); where the excess is beyond it, the time net of it stands
(:func:`_net_of_preemption`). The finding names the median taken off (evidence
``preempted_ns``). Without the hook's measure
(another team's tables, an old hook) nothing is taken off.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from diag.diagnose.coverage import RANK_SHARE
from diag.diagnose.features import class_median
from diag.findings import Evidence, Finding
from diag.store.run_store import RunStore

_IGNORED = ("collective",)
#: operator names whose time is not the operator's own (autograd node wrappers run hooks inside).
_IGNORED_PREFIXES = ("autograd::engine::evaluate_function:",)


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelConfig:
    """Thresholds of the kernel detector (see the module doc for the formulas)."""

    rank_ratio: float = 1.15  # rank's time / median over ranks for a slow window
    regress_ratio: float = 1.3  # window time / the rank's early baseline for a regressed window
    min_excess_frac: float = 0.05  # the excess must be >= 5% of the window to matter
    consistent_frac: float = 0.6  # share of windows (from the onset) that must agree
    min_windows: int = 2  # fewer flagged windows is noise
    min_ranks: int = 3  # a median over fewer ranks says little
    max_calls_ratio: float = 1.25  # cross-rank: more calls than this x the median is more work
    baseline_windows: int = 2  # the first windows: the run's own baseline
    nest_share: float = 0.8  # a child explaining 80% of a wrapper's excess replaces it
    # consistency over every window from the first one, not from the first slow one (detect_for)
    whole_span: bool = False
    critical_slowdown: float = 0.2


def detect_from_store(store: RunStore, cfg: KernelConfig | None = None) -> list[Finding]:
    """:func:`detect` on the store's ``kernel`` and ``profile_window`` frames."""
    kinds = store.kinds()
    if "kernel" not in kinds:
        return []
    windows = store.frame("profile_window") if "profile_window" in kinds else pd.DataFrame()
    return detect(store.frame("kernel"), windows, cfg or KernelConfig())


def preempted(
    wait: pd.DataFrame,
    windows: pd.DataFrame,
    classes: Mapping[int, int] | None = None,
    compute: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per profiler window (rows, ``window_id``) and rank (columns): how much longer (ns) the
    rank waited for a CPU in the window's steps than its own demand explains, at least 0.
    Expected: the larger of its work class's median delay there (``classes``: rank -> class,
    None: one class) and, with ``compute`` (step x rank on-CPU ms), its own compute times its
    class's median delay per millisecond of compute: on a host the job oversubscribes, a rank
    that computes longer (a float64 layer) is runnable longer and waits longer in proportion,
    and that wait is the slow operator's doing, not a competitor's (a class with a rank's
    compute unknown: its median delay alone). ``wait``: step x rank
    run-queue delay in ms (``Features.wide("cpu_wait_ms")``); a window covers ``num_steps``
    steps from its first (the median over ranks). Empty when either is."""
    cols = ["window_id", "step", "num_steps"]
    if wait.empty or windows.empty or not set(cols) <= set(windows.columns):
        return pd.DataFrame(dtype=float)
    w = windows[windows["rank"] >= 0] if "rank" in windows.columns else windows
    spans = w.groupby("window_id").agg(first=("step", "min"), n=("num_steps", "median"))
    steps = wait.index.to_numpy()

    def sums_of(wide: pd.DataFrame) -> pd.DataFrame:
        values = np.nan_to_num(wide.to_numpy(dtype=float), nan=0.0)
        rows = [
            values[(steps >= first) & (steps < first + max(1.0, float(n)))].sum(axis=0)
            for first, n in zip(spans["first"].to_numpy(), spans["n"].to_numpy(), strict=True)
        ]
        return pd.DataFrame(np.array(rows).reshape(len(rows), len(wide.columns)),
                            index=spans.index, columns=wide.columns)  # fmt: skip

    sums = sums_of(wait)
    expected = class_median(sums, classes)
    if compute is not None and not compute.empty:
        demand = sums_of(compute.reindex_like(wait))
        per_ms = sums / demand.where(demand > 0)  # NaN where a rank's compute is unknown
        expected = np.fmax(expected, class_median(per_ms, classes) * demand)
    over = sums - expected
    return (over.clip(lower=0.0) * 1e6).rename_axis(index="window_id", columns="rank")


def detect(
    kernels: pd.DataFrame,
    windows: pd.DataFrame,
    cfg: KernelConfig,
    classes: Mapping[int, int] | None = None,
    preempt: pd.DataFrame | None = None,
) -> list[Finding]:
    """Kernel findings from a ``kernel`` frame and a ``profile_window`` frame (may be empty);
    ``classes``: rank -> work class (the layout's, when known); ``preempt``: per window and rank,
    the run-queue delay beyond its peers' (:func:`preempted`), taken off the rank's operator
    times there (None: nothing)."""
    k = (
        kernels[
            (kernels["rank"] >= 0)
            & ~kernels["category"].isin(_IGNORED)
            & ~kernels["name"].astype(str).str.startswith(_IGNORED_PREFIXES)
        ]
        if len(kernels)
        else kernels
    )
    k = _complete(k, windows)
    if k.empty:
        return []
    # (window, rank) pairs that were profiled at all: elsewhere a rank's time is unknown, not 0.
    profiled = k.groupby(["window_id", "rank"]).size().unstack("rank", fill_value=0)
    sums = k.groupby(["name", "category", "window_id", "rank"])[["total_ns", "num_calls"]].sum()
    table = sums["total_ns"].astype(float).unstack("rank", fill_value=0.0)
    typical = _typical(k).reindex(table.index).fillna(0.0)
    calls = sums["num_calls"].unstack("rank", fill_value=0).reindex_like(table).fillna(0)
    ranks = [int(r) for r in table.columns]
    order, first_step, dur = _windows(k, windows)
    if len(ranks) < 1 or not order:
        return []
    replaced = _replaced(calls, order, cfg, classes)
    lost = rank_excess(table, profiled)
    off = (
        preempt.reindex(index=order, columns=table.columns).fillna(0.0).astype(float)
        if preempt is not None and len(preempt)
        else None
    )
    blind = _device_only(windows, order, table.columns)
    found: list[dict] = []
    for (name, cat), t in table.groupby(level=["name", "category"]):
        seen = profiled.reindex(index=order, columns=t.columns).fillna(0).astype(bool)
        if blind is not None and cat == "cpu_op":
            seen &= ~blind
        t = t.droplevel(["name", "category"]).reindex(order).fillna(0.0).astype(float)
        t = t.where(seen)
        if off is not None:
            typ = typical.loc[(name, cat)].reindex(index=order, columns=t.columns).fillna(0.0)
            t = _net_of_preemption(t, off, typ)
        n = calls.loc[(name, cat)].reindex(order).fillna(0).astype(float).where(seen)
        if len(ranks) >= cfg.min_ranks:
            found += _cross_rank(name, cat, t, n, dur, cfg, replaced, lost, off)
        found += _regression(
            name, cat, t, n, dur, cfg, {c["ranks"] for c in found if c["name"] == name}
        )
    kept = _drop_wrappers(found, cfg, table)
    return [
        _finding(c, first_step, cfg)
        for c in sorted(kept, key=lambda c: (c["kind"], c["name"], c["ranks"]))
    ]


def _device_only(windows: pd.DataFrame, order: list[str], ranks: pd.Index) -> pd.DataFrame | None:
    """Per window (rows, in ``order``) and rank: True where the window recorded no CPU operators
    (``ProfileWindow.device_only``, schema 1.20: a periodic window on a CUDA rank), so an
    operator's time there is unknown, not 0 (on-demand windows record them: a GPU run's
    ``aten::mm`` is in those and absent from the periodic ones, not 0 in them). None when no
    window is such."""
    if windows.empty or "device_only" not in windows.columns:
        return None
    flagged = windows[windows["device_only"].fillna(False).astype(bool) & (windows["rank"] >= 0)]
    if flagged.empty:
        return None
    cells = flagged.assign(flag=True).pivot_table(
        index="window_id", columns="rank", values="flag", aggfunc="any"
    )
    return cells.reindex(index=order, columns=ranks).fillna(False).astype(bool)


def _typical(k: pd.DataFrame) -> pd.DataFrame:
    """Per (name, category, window, rank) (rows) and rank: the operator's median call time
    times its calls where it made at least ``_MIN_CALLS_TYPICAL`` calls (0 elsewhere): a floor
    a preemption cannot explain away, since a burst inflates a few calls, not the median one."""
    typ = np.where(
        k["num_calls"].to_numpy() >= _MIN_CALLS_TYPICAL,
        k["median_ns"].to_numpy(dtype=float) * k["num_calls"].to_numpy(dtype=float),
        0.0,
    )
    keys = ["name", "category", "window_id", "rank"]
    return k[keys].assign(typ=typ).groupby(keys)["typ"].sum().unstack("rank", fill_value=0.0)


#: calls in a window from which an operator's median call is its typical one (a burst that
#: lands in one call moves the median of three no more than the median of thirty)
_MIN_CALLS_TYPICAL = 3


def _net_of_preemption(
    t: pd.DataFrame, off: pd.DataFrame, typical: pd.DataFrame | None = None
) -> pd.DataFrame:
    """An operator's time per window (rows) and rank (columns) net of the rank's preemption
    there (``off``, ns: run-queue delay beyond what its peers' and its own demand explain). A
    preemption is a burst that lands in whichever operator runs: where the rank's excess over
    the window's median is within it, the window cannot tell a slow operator from a preempted
    one and the rank's time there is unknown (NaN, as where it was not profiled), not short;
    where the excess is beyond it, what is beyond it stands; a rank no slower than the median
    keeps its time. ``typical`` (the operator's median call times its calls, where it made
    several): the preemption taken off is at most the time above it, since a burst inflates a
    few calls, not the median one (busy CI: rank 2's injected operator at 15 ms a call against
    0.1 on its peers, seven calls, beside 60 ms of a neighbour's preemption in the window, was
    left "unknown" and the closed loop's decision lost)."""
    o = off.reindex(index=t.index, columns=t.columns).fillna(0.0)
    if typical is not None:
        above = (t - typical.reindex(index=t.index, columns=t.columns).fillna(0.0)).clip(lower=0)
        o = o.where(o <= above, above)
    over = t.sub(t.median(axis=1), axis=0)
    unknown = (o > 0) & (over > 0) & (over <= o)
    return (t - o.where(over > o, 0.0)).where(~unknown)


def _complete(k: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """``k`` without the rows of a window a rank did not complete (``ProfileWindow.ok`` False:
    cut short when the hook was uninstalled, a profiler error): its summaries cover part of the
    window, so its time there is unknown, not short or long. A window cut at the job's last step
    held one ``aten::item`` call per rank and, its duration unknown, a 2 us excess counted as a
    second slow window beside a one-off 4.6 ms preemption (CI: a kernel warning on an innocent
    rank)."""
    if k.empty or windows.empty or not {"window_id", "rank", "ok"} <= set(windows.columns):
        return k
    cut = windows[~windows["ok"].astype(bool)]
    if cut.empty:
        return k
    bad = pd.MultiIndex.from_frame(cut[["window_id", "rank"]].astype({"rank": int}))
    keys = pd.MultiIndex.from_frame(k[["window_id", "rank"]].astype({"rank": int}))
    return k[~keys.isin(bad)]


def detect_for(
    kernels: pd.DataFrame,
    windows: pd.DataFrame,
    ranks: tuple[int, ...],
    onset: int,
    cfg: KernelConfig,
    classes: Mapping[int, int] | None = None,
    preempt: pd.DataFrame | None = None,
) -> list[Finding]:
    """Cross-rank kernel candidates for a rank the steps already show slower from ``onset``:
    only the profiler windows from that step on, and no floor on the excess (``min_excess_frac``
    0, one window enough): the steps are the evidence that the excess is real, the windows only
    say where it goes (:mod:`diag.diagnose.reconcile` keeps a candidate only when it explains
    most of the rank's compute excess, concentrated in it). The ratio to the peers'
    (``rank_ratio``), the same work (calls) and the consistency still hold, the consistency over
    every window from the onset (``whole_span``): an operator that explains a slowdown present
    since the onset is slow in most of them, not in the last one only (busy CI: a preemption
    inside ``aten::div`` in the last of the windows after a node onset read as an 81x kernel)."""
    if kernels.empty or len(ranks) != 1 or "step" not in kernels.columns:
        return []
    covering = kernels.groupby("window_id")["step"].min()
    keep = set(covering.index[covering >= onset])
    if not keep:
        return []
    k = kernels[kernels["window_id"].isin(keep)]
    w = windows[windows["window_id"].isin(keep)] if len(windows) else windows
    focused = replace(cfg, min_excess_frac=0.0, min_windows=1, whole_span=True)
    return [
        f
        for f in detect(k, w, focused, classes, preempt)
        if f.ranks == tuple(ranks) and not f.id.endswith(":regression")
    ]


def _windows(k: pd.DataFrame, pw: pd.DataFrame) -> tuple[list[str], dict[str, int], pd.Series]:
    """Window order (by first step, then time), each window's first step and duration (ns)."""
    key = k.groupby("window_id").agg(step=("step", "min"), ts=("ts_ns", "min"))
    if len(pw):
        pw = pw[(pw["rank"] >= 0) & pw["ok"]]
        dur = pw.groupby("window_id")["duration_ns"].median().astype(float)
        key = key.combine_first(
            pw.groupby("window_id").agg(step=("step", "min"), ts=("ts_ns", "min"))
        )
    else:
        dur = pd.Series(dtype=float)
    busy = (
        k.groupby(["window_id", "category", "rank"])["total_ns"]
        .sum()
        .groupby(["window_id", "category"])
        .max()
        .unstack()
    )
    fallback = busy["kernel"] if "kernel" in busy else busy.get("cpu_op", pd.Series(dtype=float))
    key = key.sort_values(["step", "ts"], kind="stable")
    dur = dur.combine_first(fallback.astype(float)).reindex(key.index)
    return list(key.index), {w: int(s) for w, s in key["step"].items()}, dur


def _replaced(
    calls: pd.DataFrame, order: list[str], cfg: KernelConfig, classes: Mapping[int, int] | None
) -> pd.DataFrame:
    """Per window (rows, in ``order``) and rank: whether the rank calls some operator (one it
    recorded) fewer than ``1 / max_calls_ratio`` x as often as the median rank of its work class
    does (it does part of its peers' work another way; ``classes``: rank -> work class, None:
    one class; a pipeline's stages run different operators by design)."""
    med = class_median(calls.astype(float), classes)
    # an operator a rank did not record is unknown, not 0 calls: the hook keeps each window's
    # heaviest operators only, and a rank busy with other work drops light ones
    fewer = (calls < med / cfg.max_calls_ratio) & (calls > 0) & (med >= 1)
    return fewer.groupby(level="window_id").any().reindex(order).fillna(False).astype(bool)


def _cross_rank(
    name: str,
    cat: str,
    t: pd.DataFrame,
    n: pd.DataFrame,
    dur: pd.Series,
    cfg: KernelConfig,
    replaced: pd.DataFrame | None = None,
    lost: pd.DataFrame | None = None,
    off: pd.DataFrame | None = None,
) -> list[dict]:
    # Every rank at once (windows x ranks, numpy), then a Python step only for a rank flagged
    # somewhere. NaN (a window the rank was not profiled in) compares False, as in pandas.
    tv, nv = t.to_numpy(dtype=float), n.to_numpy(dtype=float)
    d = dur.reindex(t.index).to_numpy(dtype=float)[:, None]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN window's median is NaN
        med_v = np.nanmedian(tv, axis=1)[:, None]
        med_calls = np.nanmedian(nv, axis=1)[:, None]
        each_call = tv / np.where(nv > 0, nv, np.nan)
        per_call = np.nanmedian(each_call, axis=1)[:, None]
        excesses = tv - med_v
        # More calls is more work, unless the rank does part of its peers' work another way
        # (some of their operators it calls less) and each of these calls is slower, which alone
        # matters: another algorithm, not extra work.
        other_way = (
            replaced.reindex(index=t.index, columns=t.columns).fillna(False).to_numpy(dtype=bool)
            if replaced is not None
            else np.zeros(tv.shape, dtype=bool)
        )
        slower_calls = (
            other_way
            & (each_call >= cfg.rank_ratio * per_call)
            & (tv - nv * per_call >= cfg.min_excess_frac * d)
        )
        same_work = ~(nv > cfg.max_calls_ratio * med_calls) | slower_calls
        flagged = (
            (tv >= cfg.rank_ratio * med_v)
            & (med_v > 0)
            & (excesses >= cfg.min_excess_frac * d)
            & same_work
        )
    med = pd.Series(med_v[:, 0], index=t.index)
    dur = pd.Series(d[:, 0], index=t.index)
    out = []
    for j in np.flatnonzero(flagged.any(axis=0)).tolist():
        r = t.columns[j]
        # only the windows where the rank's time is known (profiled, not within its preemption)
        known = ~np.isnan(tv[:, j])
        excess = pd.Series(excesses[:, j], index=t.index)[known]
        slow = pd.Series(flagged[:, j], index=t.index)[known]
        onset = _onset(slow.to_numpy(), cfg)
        if onset is None:
            continue
        # Consistency counts from the first slow window: windows before a mid-run onset are
        # fine by definition and say nothing against it.
        after = slow.iloc[onset:]
        wins = list(after.index[after])
        c = _cand(
            "rank", name, cat, (int(r),), wins, excess[wins], dur, float(after.mean()),
            med[wins], t[r][wins],
        )  # fmt: skip
        c["rank_share"] = _rank_share(excess[wins], lost, cat, r)
        if off is not None and r in off.columns:
            c["preempted"] = float(off[r].reindex(wins).fillna(0.0).median())
        out.append(c)
    return out


def rank_excess(table: pd.DataFrame, profiled: pd.DataFrame) -> pd.DataFrame:
    """Per (category, window) and rank: the least time the rank lost to its peers in the window
    (0 when none): CPU operators nest (``aten::linear`` holds ``aten::addmm``), so the largest
    excess of any one over the median over ranks is a lower bound of the rank's whole excess;
    GPU kernels and copies do not nest, so their excesses add up. ``table``: time per (name,
    category, window) and rank; ``profiled``: calls per window and rank (0: not profiled)."""
    if table.empty:
        return pd.DataFrame()
    seen = profiled.reindex(columns=table.columns, fill_value=0).gt(0)
    mask = seen.reindex(table.index.get_level_values("window_id")).fillna(False).to_numpy()
    t = table.where(mask)
    exc = t.sub(t.median(axis=1), axis=0).clip(lower=0).fillna(0.0)
    nested = exc.index.get_level_values("category") == "cpu_op"
    parts = [
        exc[nested].groupby(level=["category", "window_id"]).max(),
        exc[~nested].groupby(level=["category", "window_id"]).sum(),
    ]
    return pd.concat([p for p in parts if len(p)])


def _rank_share(excess: pd.Series, lost: pd.DataFrame | None, cat: str, rank: object) -> float:
    """The operator's excess over its flagged windows / the rank's least whole excess in them
    (:func:`rank_excess`), in (0, 1]; NaN when unknown."""
    if lost is None or lost.empty or rank not in lost.columns:
        return float("nan")
    keys = [(cat, w) for w in excess.index]
    whole = lost[rank].reindex(pd.MultiIndex.from_tuples(keys)).fillna(0.0).sum()
    own = float(excess.clip(lower=0).sum())
    return float(min(1.0, own / whole)) if whole > 0 else float("nan")


def _onset(flags: np.ndarray, cfg: KernelConfig) -> int | None:
    """The first flagged position from which >= ``consistent_frac`` of the windows, and at least
    ``min_windows``, are flagged; ``None`` when there is none. ``whole_span``: the share is over
    every window (the first flagged position, when the whole span holds)."""
    if cfg.whole_span:
        first = np.flatnonzero(flags)
        enough = flags.sum() >= cfg.min_windows and flags.mean() >= cfg.consistent_frac
        return int(first[0]) if len(first) and enough else None
    for i in range(len(flags)):
        rest = flags[i:]
        if rest[0] and rest.sum() >= cfg.min_windows and rest.mean() >= cfg.consistent_frac:
            return i
    return None


def _regression(
    name: str,
    cat: str,
    t: pd.DataFrame,
    calls: pd.DataFrame,
    dur: pd.Series,
    cfg: KernelConfig,
    taken: set,
) -> list[dict]:
    if len(t) <= cfg.baseline_windows:
        return []
    # Per call when the calls are known: a window that runs the kernel more often (an eval pass,
    # more micro-batches) does more work, it does not run a slower kernel.
    known = calls > 0
    per_call = (t / calls.where(known)).where(known, t)
    weight = calls.where(known, 1.0)
    base = per_call.iloc[: cfg.baseline_windows].median()
    later = per_call.iloc[cfg.baseline_windows :]
    lost = (later - base) * weight.iloc[cfg.baseline_windows :]  # time lost in the window
    # A window with many more calls than the baseline's (``max_calls_ratio``) is other work, not
    # a slower kernel: its calls need not cost what the baseline's did (a microbatch made long by
    # 600 extra calls on larger tensors: 2x per call). It is not flagged; an eval pass's few more
    # calls stay comparable per call.
    base_calls = calls.iloc[: cfg.baseline_windows].where(known).median()
    more_work = calls.iloc[cfg.baseline_windows :].gt(cfg.max_calls_ratio * base_calls, axis=1)

    def from_onset(f: np.ndarray) -> int | None:
        for i in range(len(f)):
            if (
                f[i]
                and f[i:].sum() >= min(cfg.min_windows, len(f))
                and f[i:].mean() >= cfg.consistent_frac
            ):
                return i
        return None

    ranks, wins, consist = [], set(), []
    slower: dict[Any, int | None] = {}  # per rank with a baseline: where the ratio alone holds
    for r in t.columns:
        if (int(r),) in taken or base[r] <= 0:
            continue
        ratio_flags = ((later[r] >= cfg.regress_ratio * base[r]) & ~more_work[r]).to_numpy()
        slower[r] = from_onset(ratio_flags)
        f = ratio_flags & (lost[r] >= cfg.min_excess_frac * dur.reindex(later.index)).to_numpy()
        i = from_onset(f)
        if i is not None:
            ranks.append(r)
            wins |= set(later.index[i:][f[i:]])
            consist.append(float(f[i:].mean()))
    if not ranks:
        return []
    # Every rank's calls got as much slower (a change of the job's, e.g. denormal optimizer
    # state: Adam's addcdiv_ 18 -> 340 us a call on all four ranks from one window on), while
    # the loss passed the floor on one rank only (its windows were longer, or noisier): the
    # regression is all of theirs, and naming the one would blame it for the job's change.
    # Judged as one, on the ranks' median ratio and median loss per window: one rank's noise
    # around a small baseline (15 -> 20 us a call) would date the set hundreds of steps early,
    # and a change that costs the ranks under the floor is no finding (the one rank above it
    # was above it by its noise: 4.8% of the window on the median, 10.7% on rank 1).
    every = list(slower)
    if len(every) >= cfg.min_ranks and len(ranks) < len(every) and None not in slower.values():
        ratio = (later[every] / base[every]).median(axis=1)
        share = lost[every].median(axis=1) / dur.reindex(later.index)
        f = (
            (ratio >= cfg.regress_ratio)
            & (share >= cfg.min_excess_frac)
            & ~more_work[every].all(axis=1)
        ).to_numpy()
        i = from_onset(f)
        if i is None:
            return []
        ranks, wins, consist = every, set(later.index[i:][f[i:]]), [float(f[i:].mean())]
    w = [x for x in t.index if x in wins]
    excess = lost.loc[w, ranks].mean(axis=1)
    return [
        _cand(
            "regression",
            name,
            cat,
            tuple(int(r) for r in ranks),
            w,
            excess,
            dur,
            statistics.mean(consist),
            (base[ranks] * weight.loc[w, ranks]).mean(axis=1),
            t.loc[w, ranks].mean(axis=1),
        )
    ]


def _cand(kind, name, cat, ranks, wins, excess, dur, consist, ref, value) -> dict:
    frac = (excess / dur.reindex(excess.index)).dropna()
    return {
        "kind": kind,
        "name": name,
        "category": cat,
        "ranks": ranks,
        "windows": list(wins),
        "excess_ns": float(excess.median()),
        "slowdown": float(min(1.0, frac.median())) if len(frac) else None,
        "consistency": consist,
        "value": float(pd.Series(value).median()),
        "reference": float(pd.Series(ref).median()),
        "wrappers": [],
    }


def _drop_wrappers(
    found: list[dict], cfg: KernelConfig, table: pd.DataFrame | None = None
) -> list[dict]:
    """Keep leaf operators: scan by reference time, smallest first; drop a candidate whose
    excess is mostly explained by a kept, smaller one of the same kind, category and ranks,
    and that holds it: a child's calls run inside its wrapper's, so on the named ranks its
    total time in a window is never more than the wrapper's (``table``: the operators' total
    ns per window and rank; :func:`_inside`). Magnitudes alone mistook a float64 layer's
    casts for a child of its matrix product: ``aten::mm`` 3x its peers' time, 57% of the rank's
    excess, was dropped as a wrapper of ``aten::_to_copy``, whose excess was 85% of its own,
    though in one window the casts took 1.58 ms and the products 1.41."""
    kept: list[dict] = []
    for c in sorted(found, key=lambda c: (c["reference"], c["name"])):
        child = next(
            (
                j
                for j in kept
                if (j["kind"], j["category"], j["ranks"]) == (c["kind"], c["category"], c["ranks"])
                and c["category"] == "cpu_op"
                and j["reference"] < c["reference"]
                and j["excess_ns"] >= cfg.nest_share * c["excess_ns"]
                and _inside(j, c, table)
            ),
            None,
        )
        if child is None:
            kept.append(c)
        else:
            child["wrappers"].append(c["name"])
    return kept


def _inside(child: dict, wrapper: dict, table: pd.DataFrame | None) -> bool:
    """Whether ``child``'s time can lie inside ``wrapper``'s: on every named rank, in every
    window both were timed in, the child's total is at most the wrapper's (1 us of rounding
    allowed). Without the table, as before: by magnitudes alone."""
    if table is None:
        return True
    try:
        inner = table.loc[(child["name"], child["category"])]
        outer = table.loc[(wrapper["name"], wrapper["category"])]
    except KeyError:
        return True
    ranks = [r for r in child["ranks"] if r in inner.columns and r in outer.columns]
    if not ranks:
        return True
    a, b = inner[ranks].reindex(outer.index), outer[ranks]
    both = (a > 0) & (b > 0)
    return bool((a.where(both, 0.0) <= b.where(both, 0.0) + 1_000).all(axis=None))


def _finding(c: dict, first_step: dict[str, int], cfg: KernelConfig) -> Finding:
    slowdown = c["slowdown"]
    severity = (
        "critical" if slowdown is not None and slowdown >= cfg.critical_slowdown else "warning"
    )
    onset_w = c["windows"][0]
    ratio = c["value"] / c["reference"] if c["reference"] > 0 else float("inf")
    ranks = c["ranks"]
    confidence = 0.4 + 0.4 * c["consistency"] + 0.15 * min(1.0, len(c["windows"]) / 4)
    also = f" (also slower: {', '.join(c['wrappers'])}, its callers)" if c["wrappers"] else ""
    if c["kind"] == "rank":
        r = ranks[0]
        onset = (
            None if onset_w == min(first_step, key=lambda w: first_step[w]) else first_step[onset_w]
        )
        summary = (
            f"{c['name']} takes {ratio:.1f}x the peers' median time on rank {r} in "
            f"{len(c['windows'])} profiler windows{also}; compare rank {r}'s GPU clocks and "
            f"throttling, or rerun the op in isolation on that GPU"
        )
        ref_note = "median over ranks"
    else:
        onset = first_step[onset_w]
        who = f"ranks {list(ranks)}"
        summary = (
            f"{c['name']} regressed {ratio:.1f}x against the run's first windows on {who} "
            f"from step {onset}{also}; look for a change in input shapes, dtype or clocks"
        )
        ref_note = "median over the first windows"
    evidence = [
        Evidence(
            metric="kernel_time_ns",
            subject=c["name"],
            value=c["value"],
            reference=c["reference"],
            unit="ns",
            note=ref_note,
        ),
        Evidence(
            metric="excess_window_share",
            subject=c["name"],
            value=slowdown if slowdown is not None else float("nan"),
            reference=cfg.min_excess_frac,
            unit="fraction",
        ),
        Evidence(
            metric="consistent_windows",
            subject=c["name"],
            value=c["consistency"],
            reference=cfg.consistent_frac,
            unit="fraction",
        ),
    ]
    share = c.get("rank_share", float("nan"))
    if share == share:  # known (not NaN)
        evidence.append(
            Evidence(
                metric=RANK_SHARE,
                subject=f"rank {ranks[0]}",
                value=share,
                reference=1.0,
                unit="fraction",
                note="its excess over the peers' median / the rank's largest excess of any "
                "operator in the same windows (the least the rank lost there), summed over them",
            )
        )
    if c.get("preempted", 0.0) > 0:
        evidence.append(
            Evidence(
                metric="preempted_ns",
                subject=f"rank {ranks[0]}",
                value=c["preempted"],
                reference=0.0,
                unit="ns",
                note="run-queue delay beyond its peers' and its own demand's in the windows' "
                "steps (median), taken off its operator times there: descheduled time is not "
                "the operator's",
            )
        )
    evidence += [
        Evidence(metric="wrapper", subject=w, value=1.0, note=f"caller of {c['name']}")
        for w in c["wrappers"]
    ]
    suffix = f"rank{ranks[0]}" if c["kind"] == "rank" else "regression"
    return Finding(
        id=f"kernel:{c['name']}:{suffix}",
        symptom="slowdown",
        cause="kernel",
        severity=severity,
        ranks=ranks,
        kernel=c["name"],
        onset_step=onset,
        detected_step=first_step[c["windows"][min(cfg.min_windows, len(c["windows"])) - 1]],
        slowdown=slowdown,
        confidence=min(0.95, confidence),
        summary=summary,
        evidence=tuple(evidence),
    )
