"""Hook thread: a finished profiler window -> KernelSummary rows, a ProfileWindow, a raw trace file.

Summaries (:func:`summarize`) group the Kineto events by ``(name, category, device)``:
``num_calls``, ``total_ns`` (sum of the calls' durations), ``median_ns``, ``max_ns``,
``step_share = total_ns / window duration`` and the input shapes of the heaviest call (when shapes
were recorded). Categories: "cpu_op" (torch operators; nested ones overlap, e.g. ``aten::matmul``
contains ``aten::mm``), "kernel", "gpu_memcpy", "gpu_memset", and "collective" for communication:
names containing ``gloo:``, ``nccl`` or ``c10d::`` (operators such as ``c10d::allreduce_``, the
``gloo:all_reduce``/``nccl:all_reduce`` record_function annotations, ``ncclDevKernel_*`` kernels).
Other activities (CUDA runtime calls, other annotations, Python functions) are left out. The top
:data:`TOP_N` by total time are kept, plus every collective.

The work is done in chunks with a short sleep between them so the training thread gets the GIL;
``result.events()`` and ``result.save()`` are single calls into torch that hold it (about 2 us and
3 us per event).

Raw traces (:class:`TraceFiles`): Kineto's Chrome trace JSON, gzip-compressed, at
``<trace_dir>/rank<r>/<window_id>.json.gz``. Time in that file: every event's ``"ts"`` (and
``"dur"``) is in microseconds (fractional, ns resolution) relative to the top-level
``"baseTimeNanoseconds"``, so an event's wall-clock start is
``baseTimeNanoseconds + round(ts * 1000)`` Unix-epoch ns (CLOCK_REALTIME, as ``time.time_ns()``),
equal to the Kineto event's ``start_ns()``. ``ProfileWindow.start_ns`` is the hook's wall clock just
after the profiler was enabled; the trace's ``"PyTorch Profiler (0)"`` span starts a few us before.
"""

from __future__ import annotations

import gzip
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diag import schema
from diag.fsutil import atomic_open
from diag.hook.events import EventFactory
from diag.hook.opstats import OpTotals
from diag.hook.profiler import PLAIN_ID, WindowResult
from diag.kernel_category import KernelStat, kernel_category

log = logging.getLogger(__name__)

TOP_N = 50
CHUNK_EVENTS = 2000  # events processed between two pauses (by default: the hook paces finer)
CHUNK_BYTES = 1 << 20  # trace bytes compressed between two pauses
PAUSE_S = 0.001


def category_of(name: str, activity: str) -> str | None:
    """The KernelSummary category of a Kineto event, or None when it is not summarized."""
    return kernel_category(name, activity)


@dataclass(slots=True)
class WindowSummary:
    """``num_ops``: CPU operator events recorded; ``num_kernels``: GPU kernels (collectives too)."""

    rows: list[KernelStat] = field(default_factory=list)
    num_ops: int = 0
    num_kernels: int = 0


_UNSEEN: Any = object()


@dataclass(slots=True)
class _Acc:
    durations: list[int]
    heaviest: Any
    max_ns: int


def _device(event: Any, cache: dict[Any, str]) -> str:
    dtype = event.device_type()
    name = cache.get(dtype)
    if name is None:
        name = str(getattr(dtype, "name", dtype)).lower().removeprefix("devicetype.")
        cache[dtype] = name
    return name if name == "cpu" else f"{name}:{event.device_index()}"


#: CPU-side events that are CUDA/HIP runtime or driver calls, not operators (torch before 2.12
#: has no ``activity_type()`` to say so: :func:`_activity`)
_RUNTIME_PREFIXES = ("cuda", "cu", "hip")
#: Kineto's own overhead, a CPU event too (seen on an H200: 6 ms of "Activity Buffer Request"
#: in a window's first step, ranked as the second-heaviest "operator")
_OVERHEAD_NAMES = frozenset({"Activity Buffer Request", "Buffer Flush", "CUPTI Overhead"})


def _activity(event: Any) -> str:
    """The Kineto activity of ``event`` ("cpu_op", "kernel", "gpu_memcpy", ...). torch >= 2.12
    says it (``activity_type()``); before that a ``_KinetoEvent`` has only its device and
    whether it is a user annotation (seen on an H200 with torch 2.11: every window failed on the
    missing method), so: a device event is a memcpy, a memset or a kernel by its name (CUDA's
    "Memcpy HtoD ...", "Memset (Device)"); a CPU event named like a runtime call
    (``cudaLaunchKernel``, ``cuLaunchKernel``) is one; any other CPU event is an operator."""
    get = getattr(event, "activity_type", None)
    if get is not None:
        return str(get())
    on_cpu = str(getattr(event.device_type(), "name", event.device_type())).upper().endswith("CPU")
    annotation = getattr(event, "is_user_annotation", None)
    if annotation is not None and annotation():
        return "user_annotation" if on_cpu else "gpu_user_annotation"
    name = event.name()
    if name in _OVERHEAD_NAMES:
        return "overhead"
    if on_cpu:
        if name.startswith(_RUNTIME_PREFIXES) and ":" not in name:  # not "cudnn::..."
            return "cuda_runtime"
        return "cpu_op"
    if name.startswith("Memcpy"):
        return "gpu_memcpy"
    if name.startswith("Memset"):
        return "gpu_memset"
    return "kernel"


def summarize(
    events: Sequence[Any],
    duration_ns: int,
    *,
    record_shapes: bool,
    top_n: int = TOP_N,
    pause: Callable[[], None] = lambda: time.sleep(PAUSE_S),
    chunk: int = CHUNK_EVENTS,
) -> WindowSummary:
    """Group Kineto events (``result.events()``) into the rows kept for one window; ``pause()``
    between every ``chunk`` events."""
    accs: dict[tuple[str, str, str], _Acc] = {}
    devices: dict[Any, str] = {}
    # an operator's name repeats every step and layer: its category once per (name, activity)
    categories: dict[tuple[str, str], str | None] = {}
    out = WindowSummary()
    chunk = max(1, chunk)
    for i, event in enumerate(events):
        if i and i % chunk == 0:
            pause()
        activity = _activity(event)
        name = event.name()
        seen = (name, activity)
        category = categories.get(seen, _UNSEEN)
        if category is _UNSEEN:
            category = categories[seen] = category_of(name, activity)
        if category is None:
            continue
        if activity == "cpu_op":
            out.num_ops += 1
            device = "cpu"  # an operator runs on the CPU (device_type() costs ~0.5 us a call)
        else:
            if activity == "kernel":
                out.num_kernels += 1
            device = _device(event, devices)
        dur = max(0, int(event.duration_ns()))
        key = (name, category, device)
        acc = accs.get(key)
        if acc is None:
            accs[key] = _Acc([dur], event, dur)
        else:
            acc.durations.append(dur)
            if dur > acc.max_ns:
                acc.max_ns, acc.heaviest = dur, event
    window = max(1, duration_ns)
    rows = []
    for (name, category, device), acc in accs.items():
        shapes = ""
        if record_shapes:
            recorded = acc.heaviest.shapes()
            shapes = str(recorded) if any(recorded) else ""
        total = sum(acc.durations)
        rows.append(
            KernelStat(
                name=name,
                category=category,
                device=device,
                num_calls=len(acc.durations),
                total_ns=total,
                median_ns=int(statistics.median(acc.durations)),
                max_ns=acc.max_ns,
                step_share=total / window,
                input_shapes=shapes,
            )
        )
    out.rows = _kept(rows, top_n)
    return out


def _kept(rows: list[KernelStat], top_n: int) -> list[KernelStat]:
    """The top ``top_n`` rows by total time, plus every collective."""
    ranked = sorted(rows, key=lambda r: r.total_ns, reverse=True)
    return [r for i, r in enumerate(ranked) if i < top_n or r.category == "collective"]


def summarize_totals(totals: OpTotals, duration_ns: int, *, top_n: int = TOP_N) -> WindowSummary:
    """The rows of a window counted by diag's operator observer (:mod:`diag.hook.opstats`):
    the same names, categories and figures :func:`summarize` gives from Kineto's events (an
    annotation is Kineto's "user_annotation", the rest "cpu_op")."""
    out = WindowSummary()
    window = max(1, duration_ns)
    rows = []
    for op in totals.rows:
        activity = "user_annotation" if op.scope == "user" else "cpu_op"
        category = category_of(op.name, activity)
        if category is None:
            continue
        if activity == "cpu_op":
            out.num_ops += op.calls
        rows.append(
            KernelStat(
                name=op.name,
                category=category,
                device="cpu",
                num_calls=op.calls,
                total_ns=op.total_ns,
                median_ns=op.median_ns,
                max_ns=op.max_ns,
                step_share=op.total_ns / window,
            )
        )
    out.rows = _kept(rows, top_n)
    return out


class _TooLarge(Exception):
    """A compressed trace over the size limit (discards the temporary file atomic_open wrote)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


class TraceFiles:
    """Raw traces of one rank, at most ``max_files`` kept (oldest deleted first).

    A compressed trace larger than ``max_bytes`` is not kept (its size is still reported). A trace
    file appears whole or not at all (:func:`diag.fsutil.atomic_open`); torch writes the raw JSON
    to a hidden scratch file first (``.<window_id>.json.tmp``), removed once compressed.
    """

    def __init__(self, trace_dir: str, *, max_files: int, max_bytes: int) -> None:
        self.trace_dir = trace_dir
        self.max_files = max(1, max_files)
        self.max_bytes = max_bytes

    def write(
        self, result: Any, rank: int, window_id: str, pause: Callable[[], None]
    ) -> tuple[str, int]:
        """Save ``result``'s Chrome trace gzip-compressed: (path relative to trace_dir, bytes);
        ("", bytes) when it is over ``max_bytes`` (an older file of that name is left as it was)."""
        if not PLAIN_ID.fullmatch(window_id) or window_id.startswith("."):
            raise ValueError(f"window id {window_id[:40]!r} is not a plain token: no trace file")
        rel = f"rank{rank}/{window_id}.json.gz"
        final = Path(self.trace_dir) / rel
        final.parent.mkdir(parents=True, exist_ok=True)
        raw = final.parent / f".{window_id}.json.tmp"
        try:
            result.save(str(raw))
            with open(raw, "rb") as src, atomic_open(final, "wb") as packed:
                with gzip.GzipFile(f"{window_id}.json", "wb", 6, packed) as dst:
                    while chunk := src.read(CHUNK_BYTES):
                        dst.write(chunk)
                        pause()
                size = packed.tell()
                if size > self.max_bytes:
                    raise _TooLarge(size)
        except _TooLarge as big:
            return "", big.size
        finally:
            raw.unlink(missing_ok=True)
        self._prune(final.parent)
        return rel, size

    def _prune(self, directory: Path) -> None:
        files = []
        for path in directory.glob("*.json.gz"):
            try:
                files.append((path.stat().st_mtime_ns, path.name, path))
            except OSError:
                continue
        files.sort()
        for _, _, path in files[: max(0, len(files) - self.max_files)]:
            path.unlink(missing_ok=True)


def window_events(
    ev: EventFactory,
    done: WindowResult,
    summary: WindowSummary,
    *,
    trace_path: str = "",
    trace_bytes: int = 0,
    error: str = "",
) -> list[schema.Event]:
    """The window's KernelSummary events and its ProfileWindow (last), envelope step = S.

    ``ok`` is False when the window was not taken or the profiler failed (``done.error``).
    """
    plan = done.plan
    step = plan.start_step
    duration = max(0, done.end_ns - done.start_ns)
    out: list[schema.Event] = [
        ev.make(schema.KernelSummary, step=step, window_id=plan.window_id, name=row.name,
                category=row.category, device=row.device, num_calls=row.num_calls,
                total_ns=row.total_ns, median_ns=row.median_ns, max_ns=row.max_ns,
                step_share=row.step_share, input_shapes=row.input_shapes)
        for row in summary.rows
    ]  # fmt: skip
    out.append(
        ev.make(
            schema.ProfileWindow,
            step=step,
            window_id=plan.window_id,
            trigger=plan.trigger,
            request_id=plan.request_id,
            num_steps=plan.num_steps,
            start_ns=done.start_ns,
            end_ns=done.end_ns,
            duration_ns=duration,
            device=done.device,
            num_ops=summary.num_ops,
            num_kernels=summary.num_kernels,
            trace_path=trace_path,
            trace_bytes=trace_bytes,
            late=plan.late,
            ok=not done.error,
            error=done.error or error,
            settle_ns=done.settle.waited_ns,
            unsettled=done.settle.unsettled,
            device_only=done.device_only,
            aggregated=done.aggregated,
        )
    )
    return out


def process(
    done: WindowResult,
    ev: EventFactory,
    traces: TraceFiles | None,
    *,
    record_shapes: bool,
    pause: Callable[[], None] = lambda: time.sleep(PAUSE_S),
    chunk: int = CHUNK_EVENTS,
) -> list[schema.Event]:
    """Everything the hook thread emits for one window. A failing trace write is reported in
    ``error`` with ``ok`` still True (the summaries are valid); it is never raised. ``pause()``
    between every ``chunk`` events summarized and every chunk of the trace written."""
    summary = WindowSummary()
    trace_path, trace_bytes, error = "", 0, ""
    result = done.result
    duration = max(1, done.end_ns - done.start_ns)
    if isinstance(result, OpTotals):
        summary = summarize_totals(result, duration)
        if result.dropped:
            error = f"{result.dropped} operator calls beyond the observer's bound not counted"
    elif result is not None:
        summary = summarize(
            result.events(), duration, record_shapes=record_shapes, pause=pause, chunk=chunk
        )
        if traces is not None:
            try:
                trace_path, trace_bytes = traces.write(result, ev.rank, done.plan.window_id, pause)
            except Exception as exc:
                error = f"trace not written: {type(exc).__name__}: {exc}".splitlines()[0][:300]
                log.debug("diag hook: %s", error)
    return window_events(
        ev, done, summary, trace_path=trace_path, trace_bytes=trace_bytes, error=error
    )
