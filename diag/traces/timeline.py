"""One Chrome/Perfetto trace of a whole run: every rank's steps, collectives and profiled kernels.

Layout: one process per rank (``pid`` = rank, named "rank R (host)", sorted by rank) with threads

- ``steps``: an ``X`` span per step from ``start_ns`` to ``end_ns`` and, inside it, one child span
  per non-zero phase in the order data_wait, forward, backward, optimizer, checkpoint, other. The
  hook measures phases as *sums* over the step (e.g. two forward passes), so the children are
  those sums laid end to end from the step's start, not the moments the phases ran.
- ``collectives``: an ``X`` span per collective from ``start_ns`` (when the backend recorded it,
  else ``enqueue_ns``) lasting ``duration_ns``; an instant ``i`` event at ``enqueue_ns`` when the
  duration is unknown (gloo). Args: op, seq_id, pg, bytes, and the enqueue-to-start delay.
- a step whose collectives a node daemon summed (schema 1.17, :mod:`diag.daemon.collsum`): one
  ``X`` span per (step, group) on ``collectives``, from the first call's enqueue to the last
  call's enqueue plus the longest duration (``cat`` "collective_summary", named "N calls on
  pg P"; args: calls, p2p, bytes, summed and longest durations, first and last seq_id), unless
  raw rows of that rank, step and group are there (fetched: ``diag fetch``);
- ``kernels: <track>``: the complete events of each profiler window's raw trace (categories in
  :data:`TRACE_CATS`: CPU operators, annotations, GPU kernels, copies and sets), one thread per
  trace track ("kernels: thread 12 (python)", "kernels: GPU 0 stream 7").

Spans that overlap without nesting on one thread (concurrent collectives) go to extra threads
("collectives #2"), since Chrome/Perfetto tracks need properly nested slices.

Clocks: each host's timestamps are moved to the analyzer's clock with the host's
:class:`~diag.schema.ClockSync` sample of smallest ``rtt_ns`` (``analyzer = host + offset_ns``;
0 for a host without one); raw traces go to wall clock first (:mod:`diag.traces.kineto`). All
``ts`` are then microseconds since the earliest event (``metadata.diag.time_origin_ns``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from diag.errors import DiagError, InputError
from diag.store.run_store import RunStore
from diag.traces.kernels import assign_ranks
from diag.traces.kineto import KinetoTrace, load_trace

PHASES = ("data_wait", "forward", "backward", "optimizer", "checkpoint", "other")
#: Raw-trace categories shown on the timeline (python_function and cuda_runtime are left out).
TRACE_CATS = frozenset({"cpu_op", "user_annotation", "kernel", "gpu_memcpy", "gpu_memset"})
_FIXED_THREADS = ("steps", "collectives")


def parse_steps(text: str | None) -> slice | None:
    """``"A:B"`` -> ``slice(A, B)`` (either end may be empty); ``None`` for ``None``/""."""
    if not text:
        return None
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        lo, hi = (int(p) if p.strip() else None for p in parts)
    except ValueError:
        raise InputError(f"--step-range {text!r}: expected A:B, e.g. 10:20") from None
    return slice(lo, hi)


def _step_bounds(sel: slice, steps: pd.Series) -> tuple[int, int]:
    """Python slice semantics on step numbers: A..B-1; negatives count back from the last step."""
    end = int(steps.max()) + 1 if len(steps) else 0
    lo, hi = sel.start, sel.stop
    lo = 0 if lo is None else (lo + end if lo < 0 else lo)
    hi = end if hi is None else (hi + end if hi < 0 else hi)
    return lo, hi


def clock_offsets(store: RunStore) -> dict[str, int]:
    """Per host, ``offset_ns`` of its :class:`~diag.schema.ClockSync` with the smallest rtt."""
    if "clock" not in store.kinds():
        return {}
    df = store.frame("clock").sort_values(["rtt_ns", "ts_ns"], kind="stable")
    best = df.groupby("host", sort=False).head(1)
    return {str(h): int(o) for h, o in zip(best["host"], best["offset_ns"], strict=True)}


class _Chrome:
    """Collects spans per (pid, thread name) in ns, then lays them out as Chrome trace JSON."""

    def __init__(self) -> None:
        self.procs: dict[int, str] = {}
        self.tracks: dict[tuple[int, str], list[tuple[int, int, str, str, dict[str, Any]]]] = {}
        self.instants: list[tuple[int, str, int, str, str, dict[str, Any]]] = []

    def span(
        self, pid: int, track: str, ts: int, dur: int, name: str, cat: str, args: dict
    ) -> None:
        self.tracks.setdefault((pid, track), []).append((ts, max(dur, 0), name, cat, args))

    def instant(self, pid: int, track: str, ts: int, name: str, cat: str, args: dict) -> None:
        self.tracks.setdefault((pid, track), [])
        self.instants.append((pid, track, ts, name, cat, args))

    def to_json(self, meta: dict[str, Any]) -> dict[str, Any]:
        stamps = [s[0] for spans in self.tracks.values() for s in spans]
        stamps += [i[2] for i in self.instants]
        origin = min(stamps, default=0)
        out: list[dict[str, Any]] = []
        for pid, pname in sorted(self.procs.items()):
            out.append(_meta(pid, 0, "process_name", {"name": pname}))
            out.append(_meta(pid, 0, "process_sort_index", {"sort_index": pid}))
        order = {name: i for i, name in enumerate(_FIXED_THREADS)}
        # steps, collectives, then CPU threads before GPU streams (as Kineto shows them)
        keys = sorted(
            self.tracks,
            key=lambda k: (
                k[0],
                order.get(k[1], len(order)),
                k[1].startswith("kernels: GPU"),
                k[1],
            ),
        )
        tids: dict[tuple[int, str], int] = {}
        for pid, track in keys:
            lanes: list[list[int]] = []  # per lane, the ends of its open spans (a stack)
            for ts, dur, name, cat, args in sorted(self.tracks[(pid, track)], key=_by_start):
                lane = _fit(lanes, ts, ts + dur)
                label = track if lane == 0 else f"{track} #{lane + 1}"
                tid = tids.setdefault((pid, label), len(tids) + 1)
                out.append(
                    {
                        "ph": "X",
                        "pid": pid,
                        "tid": tid,
                        "name": name,
                        "cat": cat,
                        "ts": _us(ts - origin),
                        "dur": _us(dur),
                        "args": args,
                    }
                )
            tids.setdefault((pid, track), len(tids) + 1)
        for pid, track, ts, name, cat, args in self.instants:
            out.append(
                {
                    "ph": "i",
                    "s": "t",
                    "pid": pid,
                    "tid": tids[(pid, track)],
                    "name": name,
                    "cat": cat,
                    "ts": _us(ts - origin),
                    "args": args,
                }
            )
        for (pid, label), tid in tids.items():
            out.append(_meta(pid, tid, "thread_name", {"name": label}))
            out.append(_meta(pid, tid, "thread_sort_index", {"sort_index": tid}))
        meta = {**meta, "time_origin_ns": origin, "num_ranks": len(self.procs)}
        return {"traceEvents": out, "displayTimeUnit": "ms", "metadata": {"diag": meta}}


def _by_start(span: tuple[int, int, str, str, dict[str, Any]]) -> tuple[int, int]:
    return (span[0], -span[1])


def _fit(lanes: list[list[int]], start: int, end: int) -> int:
    """The first lane where [start, end) nests in, or follows, the open spans; a new one else."""
    for i, stack in enumerate(lanes):
        while stack and stack[-1] <= start:
            stack.pop()
        if not stack or end <= stack[-1]:
            stack.append(end)
            return i
    lanes.append([end])
    return len(lanes) - 1


def _meta(pid: int, tid: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "ts": 0, "args": args}


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def _val(value: Any) -> Any:
    """A JSON-safe plain value: ``None`` for NA, a string for a non-finite float."""
    if value is None or value is pd.NA or (not isinstance(value, str) and pd.isna(value)):
        return None
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _add_trace(chrome: _Chrome, pid: int, trace: KinetoTrace, shift: int, keep: tuple) -> int:
    """Add a raw trace's events (``ts_ns + shift`` on the common clock) inside ``keep``."""
    lo, hi = keep
    num = 0
    for ev in trace.events:
        if ev.cat not in TRACE_CATS:
            continue
        ts = ev.ts_ns + shift
        if not lo <= ts < hi:
            continue
        args: dict[str, Any] = {}
        if ev.input_dims:
            args["Input Dims"] = ev.input_dims
        if ev.external_id is not None:
            args["External id"] = ev.external_id
        chrome.span(pid, f"kernels: {trace.track_name(ev)}", ts, ev.dur_ns, ev.name, ev.cat, args)
        num += 1
    return num


_ALL = (-(2**63), 2**63 - 1)


def merged_trace(
    store: RunStore, traces_dir: str | Path | None = None, steps: slice | None = None
) -> dict[str, Any]:
    """The run's merged Chrome trace (see module doc). ``steps`` keeps steps A..B-1 (step
    numbers, Python slice semantics) and, per rank, the collectives and raw-trace events that
    start within those steps. Raw traces that are missing or unreadable are skipped and named in
    ``metadata.diag.notes``; :class:`InputError` if there is nothing to show."""
    traces_dir = Path(traces_dir) if traces_dir is not None else store.run_dir / "traces"
    kinds = store.kinds()
    offsets = clock_offsets(store)
    frames = {
        k: store.frame(k)
        for k in ("step", "collective", "collective_summary", "profile_window", "rank_info")
        if k in kinds
    }
    frames = {k: df[df["rank"] >= 0] for k, df in frames.items()}
    if not any(len(df) for df in frames.values()):
        raise InputError(f"{store.run_dir}: no steps, collectives or profiler windows to show")

    def shift(df: pd.DataFrame) -> pd.Series:
        return df["host"].map(lambda h: offsets.get(str(h), 0)).astype("int64")

    step = frames.get("step", pd.DataFrame(columns=["rank", "step", "host"]))
    keep: dict[int, tuple[int, int]] = {}
    default = _ALL
    if steps is not None:
        lo, hi = _step_bounds(steps, step["step"])
        step = step[(step["step"] >= lo) & (step["step"] < hi)]
        if not len(step):
            raise InputError(f"--steps {lo}:{hi}: no recorded steps in that range")
        off = shift(step)
        starts, ends = step["start_ns"] + off, step["end_ns"] + off
        default = (int(starts.min()), int(ends.max()))
        for rank, idx in step.groupby("rank").groups.items():
            keep[int(rank)] = (int(starts[idx].min()), int(ends[idx].max()))

    chrome = _Chrome()
    for df in frames.values():
        for rank, host in zip(df["rank"], df["host"], strict=True):
            chrome.procs[int(rank)] = f"rank {rank} ({host})"
    _add_steps(chrome, step, offsets)
    if "collective" in frames:
        _add_collectives(chrome, frames["collective"], offsets, keep, default)
    if "collective_summary" in frames:
        raw = frames.get("collective", pd.DataFrame(columns=["rank", "step", "pg_name"]))
        _add_summaries(chrome, frames["collective_summary"], raw, offsets, keep, default)
    notes: list[str] = []
    num_traces = 0
    if "profile_window" in frames:
        num_traces = _add_windows(
            chrome, frames["profile_window"], offsets, keep, default, traces_dir, notes
        )
    meta = {
        "run_dir": str(store.run_dir),
        "clock_offsets_ns": offsets,
        "notes": notes,
        "steps": None if steps is None else _slice_text(steps),
        "num_traces": num_traces,
    }
    return chrome.to_json(meta)


def _slice_text(sel: slice) -> str:
    return f"{'' if sel.start is None else sel.start}:{'' if sel.stop is None else sel.stop}"


def _add_steps(chrome: _Chrome, step: pd.DataFrame, offsets: dict[str, int]) -> None:
    for row in step.itertuples(index=False):
        rank, t = int(row.rank), int(row.start_ns) + offsets.get(row.host, 0)
        end = t + int(row.end_ns - row.start_ns)
        args = {
            "step": int(row.step),
            "loss": _val(row.loss),
            "compute_ns": int(row.compute_ns),
            "collective_wait_ns": int(row.collective_wait_ns),
        }
        chrome.span(rank, "steps", t, end - t, f"step {row.step}", "step", args)
        for phase in PHASES:
            dur = min(int(getattr(row, f"{phase}_ns")), end - t)
            if dur > 0:
                chrome.span(rank, "steps", t, dur, phase, "phase", {"step": int(row.step)})
                t += dur


def _add_collectives(
    chrome: _Chrome,
    coll: pd.DataFrame,
    offsets: dict[str, int],
    keep: dict[int, tuple[int, int]],
    default: tuple[int, int],
) -> None:
    for row in coll.itertuples(index=False):
        rank, off = int(row.rank), offsets.get(row.host, 0)
        enq = int(row.enqueue_ns) or int(row.ts_ns)
        start = enq if pd.isna(row.start_ns) else int(row.start_ns)
        lo, hi = keep.get(rank, default)
        if not lo <= start + off < hi:
            continue
        args = {
            "op": row.op,
            "seq_id": int(row.seq_id),
            "pg": row.pg_name or row.pg_desc,
            "bytes": int(row.num_bytes),
            "state": row.state,
            "origin": row.origin,
            "enqueue_to_start_us": _us(start - enq),
        }
        if pd.isna(row.duration_ns):
            chrome.instant(rank, "collectives", enq + off, row.op, "collective", args)
        else:
            dur = int(row.duration_ns)
            chrome.span(rank, "collectives", start + off, dur, row.op, "collective", args)


def _add_summaries(
    chrome: _Chrome,
    sums: pd.DataFrame,
    raw: pd.DataFrame,
    offsets: dict[str, int],
    keep: dict[int, tuple[int, int]],
    default: tuple[int, int],
) -> None:
    have = set(zip(raw["rank"], raw["step"], raw["pg_name"], strict=True))
    for row in sums.itertuples(index=False):
        rank, off = int(row.rank), offsets.get(row.host, 0)
        if (row.rank, row.step, row.pg_name) in have:
            continue  # its raw rows were fetched: they show each call
        start = int(row.first_enqueue_ns) or int(row.ts_ns)
        end = max(int(row.last_enqueue_ns) + int(row.duration_max_ns), start)
        lo, hi = keep.get(rank, default)
        if not lo <= start + off < hi:
            continue
        calls = int(row.num_collectives) + int(row.num_p2p)
        args = {
            "step": int(row.step),
            "pg": row.pg_name or row.pg_desc,
            "calls": int(row.num_collectives),
            "p2p": int(row.num_p2p),
            "bytes": int(row.num_bytes) + int(row.p2p_bytes),
            "timed": int(row.num_timed),
            "duration_sum_us": _us(int(row.duration_sum_ns)),
            "duration_max_us": _us(int(row.duration_max_ns)),
            "seq_ids": f"{int(row.first_seq_id)}-{int(row.last_seq_id)}",
        }
        name = f"{calls} calls on pg {row.pg_name or row.pg_desc or '?'}"
        chrome.span(rank, "collectives", start + off, end - start, name, "collective_summary", args)


def _add_windows(
    chrome: _Chrome,
    windows: pd.DataFrame,
    offsets: dict[str, int],
    keep: dict[int, tuple[int, int]],
    default: tuple[int, int],
    traces_dir: Path,
    notes: list[str],
) -> int:
    """Add the raw traces of the windows in range; returns how many were added."""
    num = 0
    root = traces_dir.resolve()
    for row in windows.itertuples(index=False):
        rank, off = int(row.rank), offsets.get(row.host, 0)
        lo, hi = keep.get(rank, default)
        if not row.trace_path or not row.ok or row.end_ns + off < lo or row.start_ns + off >= hi:
            continue
        path = traces_dir / str(row.trace_path)
        try:
            if not path.resolve().is_relative_to(root):
                raise InputError(f"{row.trace_path} is outside {traces_dir}")
            trace = load_trace(path)
        except DiagError as exc:
            notes.append(f"skipped rank {rank} window {row.window_id}: {exc}")
            continue
        wall = trace.wall_offset_ns(int(row.start_ns))
        assert wall is not None  # a window always has a start
        _add_trace(chrome, rank, trace, wall + off, (lo, hi))
        num += 1
    return num


def merged_kineto(traces: Sequence[KinetoTrace]) -> dict[str, Any]:
    """One Chrome trace of several Kineto files, a process per rank ("rank R (file name)").

    Aligned on wall clock when every trace has one, else each trace starts at 0."""
    chrome = _Chrome()
    wall = all(t.clock == "wall" for t in traces)
    for rank, trace in zip(assign_ranks(traces), traces, strict=True):
        chrome.procs[rank] = f"rank {rank} ({trace.path.name})"
        _add_trace(chrome, rank, trace, 0 if wall else -trace.start_ns, _ALL)
    meta = {"files": [str(t.path) for t in traces], "clock": "wall" if wall else "relative"}
    return chrome.to_json(meta)
