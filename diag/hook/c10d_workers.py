"""Before a profiler window is switched off: let c10d's gloo worker threads finish the
collectives the window recorded. A workaround for a use-after-free in torch's profiler.

Why. ProcessGroupGloo runs a collective on a worker thread (``pt_gloo_runloop``) under the
issuing thread's thread-local state, the profiler's included: the collective's record
(``gloo:all_reduce``) begins on the worker and ends there too, in ``Work::finish`` -- *after* the
work's future was marked complete, which already released the training thread waiting on it. If
the training thread switches the profiler off in that gap (under DDP the optimizer step between
the last bucket's completion and the window's end is short, and a busy host preempts the worker
right there), ``_disable_profiler`` collects and frees the window's records while the worker
still holds a pointer into them; the worker's late end writes through it. The heap is corrupt
and the job dies later in some unrelated ``malloc`` ("malloc(): unsorted double linked list
corrupted": seen twice in this project's busy-machine test runs, about once in 500 windows).
``torch.profiler.profile`` has the same race. A late end is visible in the trace: the record
ends exactly where the window does (the profiler clamps it).

How. Linux says, for each thread of this process, where it is blocked:
``/proc/self/task/<tid>/syscall`` has the system call, its arguments, and the user stack pointer
and program counter. An idle gloo worker waits on its process group's condition variable in
``runLoop``, always the same futex wait at the same stack pointer and program counter: its
*home*. A worker still finishing a collective is running, runnable, or blocked somewhere else
(the GIL for a Python future callback, a lock, a peer's data). :class:`CollectiveWorkers` learns
each worker's home from samples (:meth:`observe`: the hook thread takes one per cycle, every
window start another) as the *shallowest* futex wait seen (the highest stack pointer) among the
places seen at least :data:`MIN_HOME_SAMPLES` times and in :data:`HOME_SHARE` of the samples:
every wait inside a collective is nested below ``runLoop``'s frame, so deeper. (Not the place
seen most often: a rank that waits for a slow peer spends much of its step in the collective's
receive wait, a condition variable too, ~35 % of a 4-rank test job's samples with one rank 30 ms
late, and beside a busy loop it can lead; the home then was that wait, the idle worker read as
away at every stop, and the stop ran out its bound with a worker counted unsettled.) A place
shallower than the home is in ``runLoop`` too (its lock) and counts as home. :meth:`settle`
waits -- sleeping, so the GIL is free -- until every worker is at home. Until a worker's home is
known it counts as settled once it is blocked in a futex wait and the scheduler did not run it
across one pause (``schedstat``'s count of runs unchanged).

The wait is bounded by ``timeout_s``. A worker that stays away that long is usually in a
collective still in flight (waiting on the network); a record it began in the window will end
after the stop whatever the wait, so the stop goes ahead and says so. :class:`Settle` says how
long the stop waited and how many workers were still away from home; the window reports both
(``settle_ns``, ``unsettled``). Where ``/proc`` has no such files (not Linux) there is nothing to
read and :meth:`settle` returns at once.

Cost: reading two small files per worker thread (two workers per gloo process group), about
20-40 us per window stop when the workers are home; the hook thread's samples cost about as much
(~40 us here alone, ~330 us beside a busy training thread on this 2-core VM: a quarter of the
hook thread's CPU at a ~50 ms step). So they are taken every cycle only until every worker's home
was seen :data:`SURE_SAMPLES` times, then every :data:`SURE_EVERY`-th cycle (a home does not
move; a new process group's workers are found at the next sample, and every window start takes
one of its own): :meth:`CollectiveWorkers.idle_sample`. A worker whose home never becomes sure
(it ended first, or it is hardly ever idle) keeps the samples at every cycle.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

#: thread names (``comm``) of c10d worker threads that end records of the issuing thread's
#: profiler after the issuing thread may have moved on (ProcessGroupNCCL ends them on the
#: issuing thread at launch: not listed)
WORKER_NAMES = frozenset({"pt_gloo_runloop"})
#: the futex system call's number, by machine (``platform.machine()``)
FUTEX_NR = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "riscv64": 98,
            "ppc64le": 221, "ppc64": 221, "s390x": 238}  # fmt: skip
MIN_HOME_SAMPLES = 2  # a home is the shallowest futex wait seen this often ...
HOME_SHARE = 0.02  # ... and in this share of the worker's samples (not a one-off lock wait) ...
MAX_PLACES = 32  # ... among at most this many distinct places remembered per worker
#: the hook thread's idle samples (:meth:`CollectiveWorkers.idle_sample`): every call until each
#: worker's home was seen this often, then every ``SURE_EVERY``-th call
SURE_SAMPLES = 8
SURE_EVERY = 10
POLL_S = 0.0005
DEFAULT_TIMEOUT_S = 0.1


@dataclass(frozen=True, slots=True)
class Place:
    """Where a thread is: ``nr`` the system call it is blocked in (-1: blocked outside one, -2:
    running or runnable), ``sp``/``pc`` its user stack pointer and program counter there."""

    nr: int
    sp: int = 0
    pc: int = 0


RUNNING = Place(-2)


@dataclass(frozen=True, slots=True)
class Settle:
    """What a stop waited: ``waited_ns`` in all, ``workers`` gloo worker threads seen,
    ``unsettled`` of them not at home when the wait ended (0: every collective the window
    recorded has ended its record)."""

    waited_ns: int = 0
    workers: int = 0
    unsettled: int = 0


NO_WAIT = Settle()


def parse_syscall(text: str) -> Place | None:
    """``/proc/<pid>/task/<tid>/syscall`` -> :class:`Place`; None when unreadable."""
    fields = text.split()
    if not fields:
        return None
    if fields[0] == "running":
        return RUNNING
    try:
        nr = int(fields[0])
        sp, pc = int(fields[-2], 16), int(fields[-1], 16)
    except (ValueError, IndexError):
        return None
    return Place(nr, sp, pc)


def parse_runs(text: str) -> int | None:
    """``schedstat`` -> how many times the scheduler ran the thread (its third field)."""
    fields = text.split()
    try:
        return int(fields[2])
    except (ValueError, IndexError):
        return None


class CollectiveWorkers:
    """The gloo worker threads of this process: where each one lives, and a bounded wait at a
    window's stop until all are there. Thread-safe (the hook thread samples while the training
    thread settles); never raises."""

    def __init__(
        self,
        *,
        task_dir: str = "/proc/self/task",
        machine: str | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        sleep: Callable[[float], None] = time.sleep,
        names: frozenset[str] = WORKER_NAMES,
    ) -> None:
        self.task_dir = task_dir
        self.futex_nr = FUTEX_NR.get((machine or platform.machine()).lower())
        self.clock = clock
        self.sleep = sleep
        self.names = names
        self._lock = threading.Lock()
        self._places: dict[int, Counter[Place]] = {}
        self._names: dict[int, bool] = {}  # tid -> is a worker, for threads named for good
        self._own_name = self._process_name()
        self._idle_calls = 0
        self._sure = False  # every worker seen at the last idle sample has a sure home

    # ---------------------------------------------------------------- reading /proc
    def _read(self, tid: int, name: str) -> str | None:
        try:
            with open(f"{self.task_dir}/{tid}/{name}", encoding="ascii", errors="replace") as f:
                return f.read()
        except OSError:
            return None

    def workers(self) -> list[int]:
        """Thread ids of the worker threads alive now."""
        try:
            tids = [int(t) for t in os.listdir(self.task_dir) if t.isdigit()]
        except OSError:
            return []
        with self._lock:
            return self._named(tids)

    def _named(self, tids: list[int]) -> list[int]:
        found = []
        for tid in tids:
            known = self._names.get(tid)
            if known is None:
                comm = self._read(tid, "comm")
                if comm is None:
                    continue
                name = comm.strip()
                known = name in self.names
                # a thread starts with the process's name and may name itself later (a gloo
                # worker does, first thing): only a worker's or another chosen name is final
                if known or name != self._own_name:
                    self._names[tid] = known
            if known:
                found.append(tid)
        if len(self._names) > len(tids) + 64:  # forget threads that ended
            alive = set(tids)
            self._names = {t: v for t, v in self._names.items() if t in alive}
        return found

    def _process_name(self) -> str:
        try:
            with open(f"{self.task_dir}/../comm", encoding="ascii", errors="replace") as f:
                return f.read().strip()
        except OSError:
            return ""

    def place(self, tid: int) -> Place | None:
        text = self._read(tid, "syscall")
        return None if text is None else parse_syscall(text)

    def _runs(self, tid: int) -> int | None:
        text = self._read(tid, "schedstat")
        return None if text is None else parse_runs(text)

    # ---------------------------------------------------------------- homes
    def observe(self) -> None:
        """Take one sample of every worker's place (call when the workers are likely idle: the
        hook thread's cycle, a window's start)."""
        try:
            for tid in self.workers():
                where = self.place(tid)
                if where is not None and where.nr >= 0:
                    self._add(tid, where)
            self._prune()
        except Exception:  # a sample is never worth an error in the job
            return

    def idle_sample(self) -> bool:
        """The hook thread's sample between windows: :meth:`observe` every call while some
        worker's home is not sure yet (seen fewer than :data:`SURE_SAMPLES` times), then every
        :data:`SURE_EVERY`-th call. True when it sampled."""
        self._idle_calls += 1
        if self._sure and self._idle_calls % SURE_EVERY:
            return False
        self.observe()
        try:
            self._sure = self._homes_sure()
        except Exception:
            self._sure = False
        return True

    def _homes_sure(self) -> bool:
        with self._lock:
            for tid, worker in self._names.items():
                if not worker:
                    continue
                seen = self._places.get(tid, Counter())
                home = self._home_of(seen)
                if home is None or seen[home] < SURE_SAMPLES:
                    return False
        return True

    def _add(self, tid: int, where: Place) -> None:
        with self._lock:
            seen = self._places.setdefault(tid, Counter())
            seen[where] += 1
            if len(seen) > MAX_PLACES:  # keep the most frequent half
                self._places[tid] = Counter(dict(seen.most_common(MAX_PLACES // 2)))

    def _prune(self) -> None:
        with self._lock:
            gone = [t for t in self._places if not self._names.get(t)]
            for tid in gone:
                del self._places[tid]

    def home(self, tid: int) -> Place | None:
        """Where ``tid`` waits when idle: the shallowest (highest stack pointer) futex wait seen at
        least ``MIN_HOME_SAMPLES`` times and in ``HOME_SHARE`` of its samples; None until one
        was (any blocked place stands for a futex wait where its number is not known)."""
        with self._lock:
            return self._home_of(self._places.get(tid, Counter()))

    def _home_of(self, seen: Counter[Place]) -> Place | None:
        least = max(MIN_HOME_SAMPLES, HOME_SHARE * sum(seen.values()))
        waits = [p for p, n in seen.items() if n >= least and self._waits(p)]
        return max(waits, key=lambda p: (p.sp, p.pc), default=None)

    def _waits(self, where: Place) -> bool:
        return where.nr == self.futex_nr if self.futex_nr is not None else where.nr >= 0

    def _at_home(self, where: Place, home: Place) -> bool:
        """At ``home``, or in a wait shallower than it (``runLoop`` itself: its lock)."""
        return where == home or (self._waits(where) and where.sp > home.sp)

    # ---------------------------------------------------------------- the wait
    def settle(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> Settle:
        """Wait until every worker is at home, at most ``timeout_s`` (see the module doc)."""
        t0 = self.clock()
        try:
            return self._settle(t0, timeout_s)
        except Exception:  # the window stops anyway
            return Settle(self.clock() - t0)

    def _settle(self, t0: int, timeout_s: float) -> Settle:
        deadline = t0 + int(timeout_s * 1e9)
        last: dict[int, tuple[Place, int | None]] = {}  # tid -> (place, runs) at the last poll
        tids = self.workers()
        homes = {tid: self.home(tid) for tid in tids}  # once: the polls below are on the clock
        while True:
            now = self.clock()
            away = 0
            for tid in tids:
                where = self.place(tid)
                if where is None:  # ended
                    continue
                home = homes[tid]
                if home is not None and self._at_home(where, home):
                    continue
                runs = self._runs(tid)
                if home is None and where.nr == self.futex_nr and last.get(tid) == (where, runs):
                    continue  # home unknown: blocked on a futex, not run across a pause
                away += 1
                last[tid] = (where, runs)
            if away == 0:
                return Settle(now - t0, len(tids), 0)
            if now >= deadline:
                return Settle(now - t0, len(tids), away)
            self.sleep(POLL_S)
