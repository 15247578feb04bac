"""What the job's threads and the hook thread share: the record queue, drop and error counts, clock.

The hook has two sides. The *job side* is whatever thread calls a wrapped torch function: the
training thread above all, but also a thread of the job's own that runs a collective or a
checkpoint save, or raises an uncaught exception. The *hook side* is the one hook thread
(:mod:`diag.hook.thread`). They meet only in a :class:`HookState`, and every counter in it has one
writing side, so no increment is ever lost to the other side's (a ``+=`` is not atomic across
threads) and no lock is needed:

=====================  ================================  ==========================================
field                  written by                        read by
=====================  ================================  ==========================================
``queue``              job side appends (:meth:`emit`)   hook thread pops (deque ends are atomic)
``num_queue_dropped``  job side (:meth:`emit`)           hook thread (``HookHealth``)
``job_errors``         job side (:meth:`Hook.error`)     hook thread (``HookHealth``), callers
``num_fr_dropped``     hook thread (FR pacing)           hook thread (``HookHealth``), callers
``thread_errors``      hook thread                       hook thread (``HookHealth``), callers
``queue_max_events``,  set once at construction          both
``clock``,
``wall_offset_ns``
=====================  ================================  ==========================================

``HookHealth.num_dropped`` is :attr:`HookState.num_dropped` (queue drops + Flight Recorder
drops) plus what the sender dropped (:class:`~diag.hook.sender.DropCounts`); the health reports
each reason apart too. ``num_errors`` and ``last_error`` combine both sides
(:attr:`HookState.num_errors`, :attr:`HookState.last_error`: the more recent of the two).

``active`` (installed or not) is not here: the wrappers read it on their fast path as
``hook.active`` and only the install/uninstall side writes it; the hook thread's one use of it
(wrapping DCP once the job imports it) goes through the callback it is given.

Times: ``clock`` is the hook's monotonic ns clock (``time.perf_counter_ns``); a record's times are
on it, and ``clock() + wall_offset_ns`` is Unix-epoch ns (as ``time.time_ns()``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


def measure_wall_offset_ns(
    clock: Callable[[], int] = time.perf_counter_ns,
    wall_clock: Callable[[], int] = time.time_ns,
    samples: int = 5,
) -> int:
    """``wall_clock() - clock()``, from the tightest of ``samples`` bracketed readings."""
    best: tuple[int, int] | None = None
    for _ in range(max(1, samples)):
        a = clock()
        wall = wall_clock()
        b = clock()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    assert best is not None
    return best[1]


@dataclass(slots=True, eq=False)
class ErrorLog:
    """diag's own failures on one side (one writing thread side, see the module docstring).

    ``num_errors`` counts them; ``last_error`` is the latest one's first line (at most 300
    characters) and ``last_ns`` when it was recorded (``clock``). The first failure of each kind
    is logged at debug level, with its traceback.
    """

    clock: Callable[[], int] = time.perf_counter_ns
    num_errors: int = 0
    last_error: str = ""
    last_ns: int = 0

    def record(self, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if self.num_errors == 0 or message != self.last_error:
            log.debug("diag hook error: %s", message, exc_info=exc)
        self.num_errors += 1
        self.last_error = message
        self.last_ns = self.clock()


@dataclass(slots=True, kw_only=True, eq=False)
class HookState:
    """The state both sides of one installed hook share (see the module docstring for who writes
    which field). ``queue_max_events`` bounds the queue; a record that does not fit is dropped
    and counted in ``num_queue_dropped``."""

    queue_max_events: int
    clock: Callable[[], int] = time.perf_counter_ns
    wall_offset_ns: int = 0
    queue: deque[tuple[Any, ...]] = field(default_factory=deque)
    num_queue_dropped: int = 0
    num_fr_dropped: int = 0
    job_errors: ErrorLog = field(default_factory=ErrorLog)
    thread_errors: ErrorLog = field(default_factory=ErrorLog)

    def emit(self, rec: tuple[Any, ...]) -> None:
        """Queue one record for the hook thread (job side); never blocks: drops and counts when
        full. The hot path of every wrapper: one length check and one append."""
        if len(self.queue) < self.queue_max_events:
            self.queue.append(rec)
        else:
            self.num_queue_dropped += 1

    @property
    def num_dropped(self) -> int:
        """Records lost in the hook: queue full (job side) + Flight Recorder entries overwritten
        before a harvest saw them (hook thread)."""
        return self.num_queue_dropped + self.num_fr_dropped

    @property
    def num_errors(self) -> int:
        return self.job_errors.num_errors + self.thread_errors.num_errors

    @property
    def last_error(self) -> str:
        """The most recent of both sides' last errors ("" when there was none)."""
        job, thread = self.job_errors, self.thread_errors
        latest = thread if thread.num_errors and thread.last_ns >= job.last_ns else job
        return latest.last_error
