"""Kineto (PyTorch profiler) Chrome traces: load one file, summarize its operators and kernels.

Standard library only (no pandas), so the hook could use it too.

**Clock.** Kineto writes ``"ts"``/``"dur"`` in microseconds (floats, ns precision). torch >= 2.x
(checked on 2.13) adds ``"baseTimeNanoseconds"`` at the top level and writes ``ts`` relative to
it: ``wall_ns = baseTimeNanoseconds + round(ts * 1000)``. Checked against :func:`time.time_ns`:
a ``record_function``'s start so computed lies between a reading taken just before it and one
taken inside it (50-200 us apart; ``tests/data/kineto/marks.json``). Older Kineto
wrote ``ts`` as microseconds since the Unix epoch with no base field (the 128-rank NCCL sample
traces); a ``ts`` above ``1e15`` us (2001) is read that way. Anything else is a trace on its own
clock (``clock == "relative"``): its events keep that clock and :meth:`KinetoTrace.wall_offset_ns`
aligns its first event to a known window start.

**Categories** (:func:`diag.kernel_category.kernel_category`, the rule the hook uses too):
Kineto's ``kernel``, ``gpu_memcpy``, ``gpu_memset`` and ``cpu_op`` keep their names, except that
one whose name contains ``gloo:``, ``nccl`` or ``c10d::`` (any case) is a ``collective``; a
``user_annotation``/``gpu_user_annotation`` of that kind (``nccl:all_reduce``,
``gloo:all_reduce``: the record_function around a collective) is one too. Other annotations
(``ProfilerStep#N``, ``## forward ##``) span whole phases and would swamp the table;
``python_function`` (Python stack, when enabled) and ``cuda_runtime``/``cuda_driver`` (launch
calls, already inside their CPU operator) are not summarized either.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diag.errors import InputError
from diag.untrusted import gunzip, loads_json, printable, read_regular

#: Kineto categories that are activity on a GPU.
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_RANK_RE = re.compile(r"rank[-_]?(\d{1,7})(?!\d)", re.IGNORECASE)
_EPOCH_US = 1e15  # a ts above this (microseconds) is an absolute Unix time (after 2001-09)
#: Largest trace read, compressed or not, and the most a gzip trace may inflate to (bytes).
MAX_TRACE_BYTES = 2 << 30


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One complete event (``"ph": "X"``). ``ts_ns`` is wall-clock ns since the Unix epoch when
    the trace's ``clock`` is ``"wall"``, else ns on the trace's own clock; ``dur_ns`` its length.
    ``device`` is the GPU index of GPU activity (``None`` on the CPU); ``input_dims`` the
    operator's ``"Input Dims"`` as compact JSON ("" when not recorded)."""

    name: str
    cat: str
    ts_ns: int
    dur_ns: int
    pid: int | str
    tid: int | str
    device: int | None = None
    external_id: int | None = None
    input_dims: str = ""


@dataclass(frozen=True, slots=True)
class DeviceProperties:
    """One GPU as the trace's ``deviceProperties`` describe it (0/"" where absent)."""

    id: int
    name: str
    total_memory_bytes: int
    compute_capability: str
    num_sms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class KinetoTrace:
    """One loaded trace. ``rank`` comes from ``distributedInfo``, else from the file name
    (``rank-3``, ``rank_3``, ``rank3``, also in the parent folder's name), else ``None``.
    ``start_ns``/``end_ns`` bound all complete events (the profiler's own span included);
    ``track_names`` maps ``(pid, tid)`` to a readable track ("thread 12 (python)",
    "GPU 0 stream 7"). ``num_skipped`` counts complete events without a usable ts/dur."""

    path: Path
    rank: int | None
    world_size: int | None
    backend: str
    base_time_ns: int | None
    clock: str  # "wall" or "relative"
    devices: tuple[DeviceProperties, ...]
    events: tuple[TraceEvent, ...]
    track_names: Mapping[tuple[int | str, int | str], str]
    start_ns: int
    end_ns: int
    num_skipped: int = 0

    @property
    def span_ns(self) -> int:
        return max(self.end_ns - self.start_ns, 0)

    def wall_offset_ns(self, window_start_ns: int | None = None) -> int | None:
        """What to add to ``ts_ns`` for wall-clock time: 0 for a wall-clock trace; for a trace
        on its own clock, the shift that puts its first event at ``window_start_ns`` (``None``
        when that is unknown)."""
        if self.clock == "wall":
            return 0
        return None if window_start_ns is None else window_start_ns - self.start_ns

    def track_name(self, ev: TraceEvent) -> str:
        return self.track_names.get((ev.pid, ev.tid), f"{ev.pid}/{ev.tid}")


def _bad(path: Path, reason: str) -> InputError:
    return InputError(f"{printable(str(path))} is not a readable Kineto trace: {reason}")


def _read_json(path: Path) -> Any:
    """The trace's JSON: a regular file of at most :data:`MAX_TRACE_BYTES`, inflated (gzip) to
    at most :func:`max_inflated` bytes, parsed with :func:`diag.untrusted.loads_json`'s bounds
    (its walk skipped: a trace holds millions of values, each read below by its type)."""
    try:
        raw = read_regular(path, MAX_TRACE_BYTES, "trace")
    except OSError as exc:
        raise InputError(f"cannot read {printable(str(path))}: {exc.strerror or exc}") from None
    except InputError as exc:
        raise _bad(path, str(exc)) from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gunzip(raw, max_inflated(len(raw)))
        return loads_json(raw, check=False)
    except InputError as exc:
        raise _bad(path, str(exc)) from None


def max_inflated(num_compressed: int) -> int:
    """The most a gzip trace of ``num_compressed`` bytes may inflate to: 100x (a Kineto trace
    inflates 10-15x), at least 64 MiB, at most :data:`MAX_TRACE_BYTES`."""
    return min(MAX_TRACE_BYTES, max(64 << 20, 100 * num_compressed))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    """A name field as text: a string as it is, a number written out, anything else (a list or
    an object where a name belongs) empty."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int | float) else ""


def _key(value: Any) -> int | str:
    """A ``pid``/``tid``: an int or a string as it is, anything else as :func:`_text`."""
    return value if isinstance(value, int) and not isinstance(value, bool) else _text(value)


def _dims(value: Any) -> str:
    """``"Input Dims"`` as compact JSON (``""`` when absent or nested too deep to write)."""
    if value is None:
        return ""
    try:
        return json.dumps(value)
    except (RecursionError, ValueError):
        return ""


def _us_to_ns(value: Any) -> int:
    """Microseconds (JSON int or float) to integer ns; exact for ints (epoch-us ts are ~1.7e15,
    beyond a float's exact range once multiplied by 1000)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(value)
    if isinstance(value, int):
        return value * 1000
    us = float(value)
    whole = math.floor(us)
    return whole * 1000 + round((us - whole) * 1000)


def rank_from_name(path: Path) -> int | None:
    """The rank a file name (or its parent folder) names: ``rank-3``, ``rank_3``, ``rank3``."""
    for part in (path.name, path.parent.name):
        m = _RANK_RE.search(part)
        if m:
            return int(m.group(1))
    return None


def _devices(raw: Any) -> tuple[DeviceProperties, ...]:
    out = []
    for d in raw if isinstance(raw, list) else []:
        if isinstance(d, dict):
            major, minor = d.get("computeMajor"), d.get("computeMinor")
            out.append(
                DeviceProperties(
                    id=_int(d.get("id")) or 0,
                    name=_text(d.get("name")),
                    total_memory_bytes=_int(d.get("totalGlobalMem")) or 0,
                    compute_capability=(
                        f"{_text(major)}.{_text(minor)}" if major is not None else ""
                    ),
                    num_sms=_int(d.get("numSms")) or 0,
                )
            )
    return tuple(out)


def _track_names(meta: Iterable[dict[str, Any]]) -> dict[tuple[int | str, int | str], str]:
    labels: dict[int | str, str] = {}
    threads: dict[tuple[int | str, int | str], str] = {}
    for e in meta:
        args = _dict(e.get("args"))
        if e.get("name") == "process_labels":
            labels[_key(e.get("pid"))] = _text(args.get("labels"))
        elif e.get("name") == "thread_name":
            threads[(_key(e.get("pid")), _key(e.get("tid")))] = _text(args.get("name")).strip()
    out = {}
    for (pid, tid), name in threads.items():
        label = labels.get(pid, "")
        out[(pid, tid)] = f"{label} {name}" if label.startswith("GPU") else name
    return out


def load_trace(path: str | Path) -> KinetoTrace:
    """Load a ``.json`` or gzipped ``.json.gz`` Kineto/Chrome trace (gzip is detected by its
    magic bytes). Raises :class:`InputError`, one line naming the file, if it is unreadable."""
    path = Path(path)
    doc = _read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise _bad(path, "no traceEvents list")
    base = _int(doc.get("baseTimeNanoseconds"))
    raw_x: list[tuple[int, int, dict[str, Any]]] = []
    meta: list[dict[str, Any]] = []
    skipped = 0
    for e in doc["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M":
            meta.append(e)
        elif ph == "X":
            try:
                raw_x.append((_us_to_ns(e.get("ts")), _us_to_ns(e.get("dur", 0)), e))
            except (TypeError, ValueError, OverflowError):
                skipped += 1
    min_ts = min((ts for ts, _, _ in raw_x), default=0)
    if base is not None:
        clock, base_ns = "wall", base
    elif min_ts > _EPOCH_US * 1000:
        clock, base_ns = "wall", 0
    else:
        clock, base_ns = "relative", 0
    events = []
    for ts, dur, e in raw_x:
        args = _dict(e.get("args"))
        dims = args.get("Input Dims")
        events.append(
            TraceEvent(
                name=_text(e.get("name")),
                cat=_text(e.get("cat")),
                ts_ns=base_ns + ts,
                dur_ns=max(dur, 0),
                pid=_key(e.get("pid")),
                tid=_key(e.get("tid")),
                device=_int(args.get("device")),
                external_id=_int(args.get("External id")),
                input_dims=_dims(dims),
            )
        )
    dist = _dict(doc.get("distributedInfo"))
    rank = _int(dist.get("rank"))
    return KinetoTrace(
        path=path,
        rank=rank if rank is not None else rank_from_name(path),
        world_size=_int(dist.get("world_size")),
        backend=_text(dist.get("backend")),
        base_time_ns=base,
        clock=clock,
        devices=_devices(doc.get("deviceProperties")),
        events=tuple(events),
        track_names=_track_names(meta),
        start_ns=min((ev.ts_ns for ev in events), default=0),
        end_ns=max((ev.ts_ns + ev.dur_ns for ev in events), default=0),
        num_skipped=skipped,
    )
