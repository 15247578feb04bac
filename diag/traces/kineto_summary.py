"""Per-kernel summaries of a loaded Kineto trace (:mod:`diag.traces.kineto` loads it).

The field names and categories are those of :class:`diag.schema.KernelSummary`, so tables built
from trace files and from the hook's shipped summaries agree.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diag.kernel_category import KernelStat, kernel_category
from diag.traces.kineto import (
    GPU_CATS,
    KinetoTrace,
    TraceEvent,
)


def category_of(ev: TraceEvent) -> str | None:
    """The :class:`~diag.schema.KernelSummary` category of an event, ``None`` if not summarized."""
    return kernel_category(ev.name, ev.cat)


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceSummary:
    """The operators and kernels of one trace, heaviest first.

    ``span_ns``: the traced time (first event start to last event end). ``gpu_busy_ns``: the
    union of all GPU activity intervals (kernels, copies, sets; any device or stream), so
    ``gpu_busy_ns / span_ns`` is how busy the GPUs were. ``top_share``: the summed
    ``step_share`` of ``top`` (the listed stats of the trace's main side: GPU activity when there
    is any, else CPU operators and collectives): share of the *span*, not of GPU busy time, so
    it reads the same as :class:`~diag.schema.KernelSummary`'s ``step_share``.
    """

    path: Path
    rank: int | None
    clock: str
    span_ns: int
    gpu_busy_ns: int
    num_events: int
    kernels: tuple[KernelStat, ...]
    top: tuple[KernelStat, ...]
    top_share: float

    @property
    def has_gpu(self) -> bool:
        return any(k.on_gpu for k in self.kernels)


def _device(ev: TraceEvent) -> str:
    if ev.cat in GPU_CATS or ev.cat == "gpu_user_annotation":
        dev = ev.device if ev.device is not None else ev.pid
        return f"cuda:{dev}"
    return "cpu"


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


def summarize(trace: KinetoTrace, top: int | None = 10) -> TraceSummary:
    """Per (name, category, device) stats of ``trace``; ``top`` (``None``: all) sets how many of
    the main side's heaviest stats go into ``TraceSummary.top``. ``kernels`` always has all."""
    groups: dict[tuple[str, str, str], list[TraceEvent]] = {}
    gpu_intervals = []
    for ev in trace.events:
        cat = category_of(ev)
        if cat is None:
            continue
        groups.setdefault((ev.name, cat, _device(ev)), []).append(ev)
        if ev.cat in GPU_CATS:
            gpu_intervals.append((ev.ts_ns, ev.ts_ns + ev.dur_ns))
    span = trace.span_ns
    stats = []
    for (name, cat, device), evs in groups.items():
        durs = [e.dur_ns for e in evs]
        total = sum(durs)
        heaviest = max(evs, key=lambda e: e.dur_ns)
        stats.append(
            KernelStat(
                name=name,
                category=cat,
                device=device,
                num_calls=len(evs),
                total_ns=total,
                median_ns=int(statistics.median(durs)),
                max_ns=heaviest.dur_ns,
                step_share=total / span if span else 0.0,
                input_shapes=heaviest.input_dims,
            )
        )
    stats.sort(key=lambda k: (-k.total_ns, k.name, k.device))
    on_gpu = [k for k in stats if k.on_gpu]
    main = on_gpu if on_gpu else stats
    chosen = tuple(main if top is None else main[:top])
    return TraceSummary(
        path=trace.path,
        rank=trace.rank,
        clock=trace.clock,
        span_ns=span,
        gpu_busy_ns=_union_ns(gpu_intervals),
        num_events=len(trace.events),
        kernels=tuple(stats),
        top=chosen,
        top_share=sum(k.step_share for k in chosen),
    )


def summary_json(s: TraceSummary) -> dict[str, Any]:
    """A :class:`TraceSummary` for ``--json`` and the renderers: ms for the trace, us per call."""
    return {
        "path": str(s.path),
        "rank": s.rank,
        "clock": s.clock,
        "span_ms": s.span_ns / 1e6,
        "gpu_busy_ms": s.gpu_busy_ns / 1e6,
        "num_events": s.num_events,
        "top_share": s.top_share,
        "top": [
            {
                "name": k.name,
                "category": k.category,
                "device": k.device,
                "num_calls": k.num_calls,
                "total_ms": k.total_ns / 1e6,
                "median_us": k.median_ns / 1e3,
                "max_us": k.max_ns / 1e3,
                "step_share": k.step_share,
                "input_shapes": k.input_shapes,
            }
            for k in s.top
        ],
    }
