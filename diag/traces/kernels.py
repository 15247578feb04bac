"""The cross-rank kernel table: per kernel, the time each rank spent in it, and who is slowest.

Two sources give the same table:

- a run store (:func:`from_store`): the hooks' :class:`~diag.schema.KernelSummary` rows (the
  ``"kernel"`` frame). A rank's time for a kernel is the **median over the rank's profiler
  windows** of the kernel's ``total_ns`` in that window (summed over devices); a window the rank
  profiled without that kernel counts as 0.
- Kineto files (:func:`from_traces`): each file is one window of its rank; the time is the
  trace's total for the kernel (the median over files when a rank has several).

A kernel is identified by ``(name, category)``, not by device: rank 1's kernels run on cuda:1.
``spread`` is the slowest rank's time over the median rank's time (1.0 is balanced, 2.0 means
the slowest rank spent twice the typical time; ``None`` when the median is 0, i.e. most ranks
never ran it). Rows are sorted by the time summed over ranks, heaviest first.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from diag.store.run_store import RunStore
from diag.traces.kineto_summary import TraceSummary

_NS_PER_MS = 1e6


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRow:
    """One kernel across ranks. ``ns_by_rank`` holds every rank of the table (0 where the rank
    never ran it); ``num_calls`` is the median number of calls per window over the ranks that ran
    it. ``median_ns``/``min_ns``/``max_ns`` are over ranks; ``slowest_rank`` has ``max_ns``
    (the lowest such rank on ties)."""

    name: str
    category: str
    ns_by_rank: Mapping[int, float]
    total_ns: float
    median_ns: float
    min_ns: float
    max_ns: float
    spread: float | None
    slowest_rank: int
    num_calls: float

    def to_json(self) -> dict[str, Any]:
        """Milliseconds, rank keys as strings (JSON object keys)."""
        return {
            "name": self.name,
            "category": self.category,
            "total_ms": self.total_ns / _NS_PER_MS,
            "median_ms": self.median_ns / _NS_PER_MS,
            "min_ms": self.min_ns / _NS_PER_MS,
            "max_ms": self.max_ns / _NS_PER_MS,
            "spread": self.spread,
            "slowest_rank": self.slowest_rank,
            "num_calls": self.num_calls,
            "ms_by_rank": {str(r): ns / _NS_PER_MS for r, ns in self.ns_by_rank.items()},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelTable:
    """Rows heaviest first; ``ranks`` are the ranks with at least one window; ``num_windows``
    the distinct windows (store) or files (traces) that went in."""

    ranks: tuple[int, ...]
    rows: tuple[KernelRow, ...]
    num_windows: int
    source: str  # "store" or "traces"

    def to_json(self) -> list[dict[str, Any]]:
        return [row.to_json() for row in self.rows]


def kernel_table(
    per_window: Iterable[tuple[int, str, str, str, float, int]],
    windows_by_rank: Mapping[int, Sequence[str]],
    *,
    source: str,
    top: int | None = None,
) -> KernelTable:
    """The table from ``(rank, window, name, category, total_ns, num_calls)`` tuples, one per
    kernel per window (several for one window, e.g. one per device, are summed);
    ``windows_by_rank`` lists each rank's windows, so a window without a kernel counts as 0.
    ``top`` keeps only the heaviest rows."""
    sums: dict[tuple[str, str], dict[tuple[int, str], list[float]]] = {}
    for rank, window, name, category, total_ns, num_calls in per_window:
        cell = sums.setdefault((name, category), {}).setdefault((rank, window), [0.0, 0.0])
        cell[0] += total_ns
        cell[1] += num_calls
    ranks = tuple(sorted(r for r, w in windows_by_rank.items() if w))
    rows = []
    for (name, category), cells in sums.items():
        by_rank: dict[int, float] = {}
        calls = []
        for rank in ranks:
            vals = [cells.get((rank, w), [0.0, 0.0]) for w in windows_by_rank[rank]]
            by_rank[rank] = float(statistics.median(v[0] for v in vals))
            if any(v[1] for v in vals):
                calls.append(statistics.median(v[1] for v in vals))
        if not by_rank:
            continue
        values = list(by_rank.values())
        median = float(statistics.median(values))
        top_ns = max(values)
        rows.append(
            KernelRow(
                name=name,
                category=category,
                ns_by_rank=by_rank,
                total_ns=sum(values),
                median_ns=median,
                min_ns=min(values),
                max_ns=top_ns,
                spread=top_ns / median if median > 0 else None,
                slowest_rank=min(r for r, v in by_rank.items() if v == top_ns),
                num_calls=float(statistics.median(calls)) if calls else 0.0,
            )
        )
    rows.sort(key=lambda r: (-r.total_ns, r.name, r.category))
    num_windows = len({w for ws in windows_by_rank.values() for w in ws})
    return KernelTable(
        ranks=ranks, rows=tuple(rows[:top] if top else rows), num_windows=num_windows, source=source
    )


def from_store(store: RunStore, *, top: int | None = None) -> KernelTable:
    """The table of a run's stored :class:`~diag.schema.KernelSummary` rows (see module doc).

    A rank's windows are the ids of its successful :class:`~diag.schema.ProfileWindow` events
    plus any window its kernel rows name."""
    kern = store.frame("kernel")
    kern = kern[kern["rank"] >= 0]
    windows: dict[int, set[str]] = {}
    for rank, window in zip(kern["rank"], kern["window_id"], strict=True):
        windows.setdefault(int(rank), set()).add(str(window))
    if "profile_window" in store.kinds():
        pw = store.frame("profile_window")
        pw = pw[(pw["rank"] >= 0) & pw["ok"]]
        for rank, window in zip(pw["rank"], pw["window_id"], strict=True):
            windows.setdefault(int(rank), set()).add(str(window))
    grouped = (
        kern.groupby(["rank", "window_id", "name", "category"], sort=False)[
            ["total_ns", "num_calls"]
        ].sum()
        if len(kern)
        else pd.DataFrame()
    )
    rows = (
        (int(r), str(w), str(n), str(c), float(v["total_ns"]), int(v["num_calls"]))
        for (r, w, n, c), v in grouped.iterrows()
    )
    return kernel_table(rows, {r: sorted(w) for r, w in windows.items()}, source="store", top=top)


def from_traces(summaries: Sequence[TraceSummary], *, top: int | None = None) -> KernelTable:
    """The table of loaded Kineto traces (their full stats, not only their ``top``).

    A trace without a rank gets the lowest rank no other trace has."""
    ranks = assign_ranks(summaries)
    windows: dict[int, list[str]] = {}
    rows: list[tuple[int, str, str, str, float, int]] = []
    for rank, s in zip(ranks, summaries, strict=True):
        window = str(s.path)
        windows.setdefault(rank, []).append(window)
        rows.extend(
            (rank, window, k.name, k.category, float(k.total_ns), k.num_calls) for k in s.kernels
        )
    return kernel_table(rows, windows, source="traces", top=top)


def assign_ranks(traces: Sequence[TraceSummary] | Sequence[Any]) -> list[int]:
    """Each trace's rank; a trace without one gets the lowest rank no trace has (in order)."""
    taken = {t.rank for t in traces if t.rank is not None}
    out, nxt = [], 0
    for t in traces:
        if t.rank is not None:
            out.append(int(t.rank))
            continue
        while nxt in taken:
            nxt += 1
        taken.add(nxt)
        out.append(nxt)
    return out
