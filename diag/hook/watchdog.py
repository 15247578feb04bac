"""The hook's hang watchdog: no progress for too long -> one report with the evidence, at once.

Progress is a step end or a collective completed (the Flight Recorder's ``last_completed``
counters, or a blocking Python-level collective returning). The hook thread keeps running while
the training thread is blocked (in a collective, a data loader, a checkpoint write), so it is the
one that notices. The rule (:class:`StallWatch`):

- the watch arms at the first progress (a job still starting up is not hung; a hook installed
  mid-run arms at once), and measures from the last progress seen by the hook thread (it looks
  every ``flush_interval_s``; the Flight Recorder's counters are read at each harvest);
- :meth:`HangWatchdog.arm` (any thread) arms it at once and measures from that moment: a hook
  attached to a running job whose rank is already stuck sees no progress at all, yet finding that
  rank is what attaching is for;
- a stall is ``now - last progress >= threshold``, with ``threshold = max(hang_factor x p99 of the
  last STEP_WINDOW step durations, hang_min_s)`` (the p99 is the largest duration until there are
  100);
- it fires once per stall and re-arms at the next progress.

On a stall :class:`HangWatchdog` takes a fresh Flight Recorder dump (the in-flight entries and
each group's counters) and every thread's Python stack, and returns a
:class:`~diag.schema.HangReport` followed by one :class:`~diag.schema.StackDump` per thread; the
hook thread sends them in the same cycle. Building them is bounded (at most ``FR_TAIL`` entries per
group, :data:`~diag.schema.MAX_FRAMES` frames per thread) and never raises: a failed dump is a
report without the Flight Recorder part.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from diag import schema
from diag.flight_recorder import normalize_op
from diag.hook.events import EventFactory
from diag.hook.stacks import thread_stacks

STEP_WINDOW = 200  # step durations kept for the p99
FR_TAIL = 32  # newest Flight Recorder entries per process group kept in a report
_COMPLETED = "last_completed_collective"


@dataclass(frozen=True, slots=True)
class Stall:
    """A stall as the watch saw it (monotonic ns)."""

    since_ns: int  # the last progress
    stall_ns: int  # how long without progress when it fired
    threshold_ns: int


class StallWatch:
    """Pure stall logic over an injected clock (see the module docstring for the rule)."""

    def __init__(self, *, min_s: float, factor: float) -> None:
        self.min_ns = int(min_s * 1e9)
        self.factor = factor
        self._steps: deque[int] = deque(maxlen=STEP_WINDOW)
        self._token: Hashable = None
        self._last_ns = 0
        self._armed = False
        self._started = False
        self.num_stalls = 0

    @property
    def enabled(self) -> bool:
        return self.min_ns > 0

    def step_time(self, duration_ns: int) -> None:
        if duration_ns > 0:
            self._steps.append(duration_ns)

    def threshold_ns(self) -> int:
        if not self._steps:
            return self.min_ns
        ordered = sorted(self._steps)
        p99 = ordered[max(math.ceil(0.99 * len(ordered)) - 1, 0)]
        return max(int(self.factor * p99), self.min_ns)

    def arm(self, token: Hashable, now_ns: int) -> None:
        """Arm now, as if the progress state ``token`` had just been seen at ``now_ns``."""
        self._started, self._token, self._last_ns, self._armed = True, token, now_ns, True

    def observe(self, token: Hashable, now_ns: int, *, started: bool = False) -> Stall | None:
        """Feed the progress state ``token`` (anything that changes on progress) at ``now_ns``;
        a :class:`Stall` the first time the threshold is passed since the last progress.
        ``started`` says progress was made before the first observation (the watch arms then)."""
        if not self._started:
            self._started, self._token, self._last_ns, self._armed = True, token, now_ns, started
            return None
        if token != self._token:
            self._token, self._last_ns, self._armed = token, now_ns, True
            return None
        if not (self._armed and self.enabled):
            return None
        threshold = self.threshold_ns()
        stall = now_ns - self._last_ns
        if stall < threshold:
            return None
        self._armed = False
        self.num_stalls += 1
        return Stall(self._last_ns, stall, threshold)


def completed_total(dump: Mapping[str, Any] | None) -> int:
    """The sum of every group's ``last_completed_collective`` (those that completed one): grows
    when any collective ends; 0 before the first."""
    status = (dump or {}).get("pg_status") or {}
    return sum(max(int(s.get(_COMPLETED, -1)), 0) for s in status.values())


def _entry_done(entry: Mapping[str, Any]) -> bool:
    return bool(entry.get("retired")) or entry.get("state") == "completed"


def fr_facts(dump: Mapping[str, Any]) -> dict[str, Any]:
    """The Flight Recorder part of a :class:`~diag.schema.HangReport` from one dump."""
    entries = [e for e in dump.get("entries") or () if isinstance(e, Mapping)]
    entries.sort(key=lambda e: int(e.get("record_id", -1)))
    by_pg: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_pg.setdefault(str((e.get("process_group") or ("",))[0]), []).append(e)
    tail: list[dict[str, Any]] = []
    for pg_entries in by_pg.values():
        for e in pg_entries[-FR_TAIL:]:
            dtypes = e.get("input_dtypes") or []
            tail.append(
                {
                    "pg": str((e.get("process_group") or ("",))[0]),
                    "seq": int(e.get("collective_seq_id", -1)),
                    "op": normalize_op(str(e.get("profiling_name", ""))),
                    "sizes": e.get("input_sizes") or [],
                    "dtype": str(dtypes[0]) if dtypes else "",
                    "done": _entry_done(e),
                    "enqueue_ns": int(e.get("time_created_ns", 0)),
                }
            )
    tail.sort(key=lambda t: t["enqueue_ns"])
    status = {
        str(pg): [int(st.get("last_enqueued_collective", -1)), int(st.get(_COMPLETED, -1))]
        for pg, st in (dump.get("pg_status") or {}).items()
        if isinstance(st, Mapping)
    }
    out: dict[str, Any] = {
        "fr_tail_json": json.dumps(tail, separators=(",", ":")),
        "pg_status_json": json.dumps(status, separators=(",", ":")),
    }
    pending = [t for t in tail if not t["done"]]
    if pending:
        first = pending[0]
        out.update(
            pg_name=first["pg"],
            seq_id=first["seq"],
            op=first["op"],
            input_sizes=json.dumps(first["sizes"], separators=(",", ":")),
            dtype=first["dtype"],
            enqueue_ns=first["enqueue_ns"],
        )
        pg = first["pg"]
    else:
        pg = "0" if "0" in status else next(iter(status), "")
    if pg in status:
        out["last_enqueued_seq"], out["last_completed_seq"] = status[pg]
    return out


class HangWatchdog:
    """Runs :class:`StallWatch` in the hook thread and builds the report when it fires.

    ``progress()`` returns the current progress token and whether any progress was made yet
    (:meth:`StallWatch.observe`'s ``started``), ``fr_dump()`` a fresh parsed Flight
    Recorder dump (or None without one), ``last_step()`` the last completed step (-1 none),
    ``current_step()`` the step in progress. Everything but :meth:`arm` runs in the hook thread.
    """

    def __init__(
        self,
        watch: StallWatch,
        events: EventFactory,
        *,
        progress: Callable[[], tuple[Hashable, bool]],
        fr_dump: Callable[[], Mapping[str, Any] | None],
        last_step: Callable[[], int],
        current_step: Callable[[], int],
        on_error: Callable[[BaseException], None],
        clock: Callable[[], int] = time.monotonic_ns,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.watch = watch
        self.ev = events
        self._progress = progress
        self._fr_dump = fr_dump
        self._last_step = last_step
        self._current_step = current_step
        self._on_error = on_error
        self._clock = clock
        self._wall = wall_clock
        # (ns,) of the latest arm() request, a new tuple each time (written by arming threads);
        # the request the watch was last armed for (hook thread only)
        self._arm_request: tuple[int] | None = None
        self._armed_for: tuple[int] | None = None

    def arm(self) -> None:
        """Arm the watch now, from any thread: the next :meth:`check` measures a stall from this
        moment even if no progress is ever seen."""
        self._arm_request = (self._clock(),)

    def check(self) -> list[schema.Event]:
        """The report and stacks if a stall fires now, else nothing; never raises."""
        if not self.watch.enabled:
            return []
        try:
            now = self._clock()
            token, started = self._progress()
            request = self._arm_request
            if request is not None and request is not self._armed_for:
                self._armed_for = request
                self.watch.arm(token, request[0])
            stall = self.watch.observe(token, now, started=started)
            return [] if stall is None else self.report(stall, now)
        except Exception as exc:
            self._on_error(exc)
            return []

    def report(self, stall: Stall, now_ns: int) -> list[schema.Event]:
        since_wall = self._wall() - (now_ns - stall.since_ns)
        facts: dict[str, Any] = {}
        fr_ok = True
        try:
            dump = self._fr_dump()
            if dump is None:
                fr_ok = False
            else:
                facts = fr_facts(dump)
        except Exception as exc:
            self._on_error(exc)
            fr_ok = False
        stacks = thread_stacks(skip_ident=threading.get_ident())
        step = self._current_step()
        out: list[schema.Event] = [
            self.ev.make(
                schema.HangReport,
                step=step,
                pid=self.ev.pid,
                stalled_since_ns=since_wall,
                stall_ns=stall.stall_ns,
                threshold_ns=stall.threshold_ns,
                last_step=self._last_step(),
                fr_ok=fr_ok,
                num_threads=len(stacks),
                **facts,
            )
        ]
        for s in stacks:
            out.append(
                self.ev.make(
                    schema.StackDump,
                    step=step,
                    pid=self.ev.pid,
                    reason="hang",
                    origin="python",
                    thread_id=s.thread_id,
                    thread_name=s.thread_name,
                    is_main=s.is_main,
                    frames=s.frames,
                    num_frames=s.num_frames,
                )
            )
        return out
