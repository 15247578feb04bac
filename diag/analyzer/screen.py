"""The live triage's screen: has anything changed since the last full pass? Decided from the new
steps alone, so that a live pass at fleet scale costs what one more step costs, not what the run
costs.

A full triage pass reads every stored row and runs every detector on the whole run: at 16,384
ranks x 50 steps that is 4-6 s of one core (``bench/scale.py``), and a live pass every few seconds
would take most of a core for findings that, step after step, do not change. The screen keeps
state per window instead:

- at ingest it is handed each batch's ``StepEvent`` columns (:meth:`StepScreen.observe`: the
  numbers it reads appended to a bounded list, under the ingest lock; nothing else) and notes the
  kinds of the other events;
- at each live pass (:meth:`StepScreen.take` under the lock, then :meth:`StepScreen.decide`
  outside it) it closes the steps that are complete (as many ranks as any step had, and a newer
  step began) or open for ``close_after_s`` (daemons ship at their own pace: a host's rows of a
  step come seconds after another's), the newest ``window`` of them only (a pass after 250 fast
  steps costs 10 steps' work) and, per closed step and rank, *flags* each phase time
  (compute less run-queue delay, run-queue delay, data wait, checkpoint, collective wait) that
  stands out against the median of the rank's work class (the ranks doing the same work, from the
  last full pass's layout; every rank one class when it is unknown): at least ``ratio`` x the
  class median and ``max(min_excess_ms, min_excess_frac x the job's median step)`` above it.

A pass is a full one (``ScreenVerdict.full``) when any of these holds, else it keeps the last full
pass's findings:

- the screen is off: no full pass yet, or the last one cost under ``screen_above_s`` of CPU (a
  small job: every live pass stays full, its findings exactly as before);
- an event of a kind that is not continuous telemetry arrived (:data:`CONTINUOUS_KINDS` are not:
  a hang report, an exception, a profiler window, a probe result, a checkpoint... each is news);
- a rank became *persistent*, flagged in ``>= min_flagged`` of its last ``window`` closed steps,
  that the last full pass did not know (not named by its findings, not persistent then: at 16k
  ranks some rank is always above its class median in one step, hardly in six of ten);
- the job's median step over the steps closed since the last full pass (at least
  ``min_flagged`` of them) moved by ``>= job_change`` of what it was then (a host, a link, the
  whole job slower or faster: no single rank stands out);
- a rank appeared, or one the last full pass saw is missing from the last ``missing_after``
  closed steps (a rank that stopped, a restart);
- the last full pass is older than ``max(full_every_s, cost x (1 / full_share - 1))`` (slow
  changes below the screen's floors, loss and numerics drift, a link that degrades by degrees,
  are found at most that late; the full passes take at most ``full_share`` of a core).

What it costs: the ingest path appends arrays (no work per event); a pass closes the new steps
(per step, a group-by median over its ranks: ~5 ms at 16,384 ranks) and counts flags over a
``window`` x ranks array. Pending rows are bounded (``max_pending_rows``; the oldest are dropped
and counted: a full pass follows, as the screen no longer knows what it missed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from diag import schema
from diag.diagnose.features import device_split

#: Event kinds that arrive continuously while a job runs: alone, they are not news to the screen
#: (steps are screened; telemetry and numerics are read by the full passes the staleness bound
#: schedules). Every other kind makes the next pass a full one.
CONTINUOUS_KINDS = frozenset(
    {
        schema.StepEvent.kind,
        "collective",
        "collective_summary",
        "gpu",
        "host",
        "proc",
        "hook_health",
        "clock",
        "numerics",
        "fingerprint",
        "batch_stats",
        "host_process",
        "tcp_peer",
        "nic",
    }
)

#: The phase times screened (ms, as the features name them: :func:`_step_rows` derives them).
PHASES = ("compute_ms", "cpu_wait_ms", "data_ms", "ckpt_ms", "wait_ms")
_NS_PER_MS = 1e6
#: the largest rank id the screen keeps state for (a hostile rank id must not size its arrays)
MAX_RANK = 1 << 21


@dataclass(frozen=True, slots=True, kw_only=True)
class ScreenConfig:
    """See the module docstring."""

    screen_above_s: float = 1.0
    window: int = 10
    min_flagged: int = 6
    ratio: float = 1.1
    min_excess_ms: float = 1.0
    min_excess_frac: float = 0.05
    job_change: float = 0.1
    missing_after: int = 2
    close_after_s: float = 10.0
    full_every_s: float = 30.0
    full_share: float = 0.2
    max_pending_rows: int = 2_000_000


@dataclass(frozen=True, slots=True)
class ScreenVerdict:
    """Whether the live pass must be a full one (``full``), and why (one line)."""

    full: bool
    reason: str


@dataclass(slots=True)
class Taken:
    """What ingest handed the screen since the last :meth:`StepScreen.take`: step rows (rank,
    step, then :data:`PHASES` and the step's duration, in ms), the other kinds seen, rows
    dropped at the bound."""

    rows: list[np.ndarray] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    num_dropped: int = 0


@dataclass(frozen=True, slots=True)
class _Base:
    """The last full pass, as the screen compares with it."""

    at_s: float
    cost_s: float
    known: frozenset[int]  # ranks its findings name, or persistent at its snapshot
    ranks: frozenset[int]  # ranks seen in the window at its snapshot
    job_step_ms: float  # the job's median step over the window at its snapshot (NaN: none)
    closed: int  # closed steps at its snapshot


class StepScreen:
    """See the module docstring. ``observe`` and ``take`` are the ingest side (thread-safe,
    cheap); ``decide``, ``mark`` and ``rebase`` the live triage's (one thread at a time)."""

    def __init__(
        self, config: ScreenConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config or ScreenConfig()
        self.clock = clock
        self._lock = threading.Lock()
        self._taken = Taken()
        self._pending_rows = 0
        self.num_dropped_rows = 0
        # the live triage's side
        self._state = threading.Lock()
        self._open: dict[int, list[np.ndarray]] = {}  # step -> its rows so far
        self._opened: dict[int, float] = {}  # step -> when its first rows came
        self._counts: dict[int, int] = {}  # step -> rows so far
        self._done: dict[int, None] = {}  # recently closed steps, oldest first
        self._newest_step = -1
        self._expected = 0  # rows a complete step has (the most any step had; fewer after aged)
        w = self.config.window
        self._values = np.full((w, 0, len(PHASES)), np.nan, dtype=np.float32)
        self._flags = np.zeros((w, 0), dtype=np.uint8)
        self._present = np.zeros((w, 0), dtype=bool)
        self._job = np.full(w, np.nan)
        self._closed = 0  # steps closed so far
        self._dirty = False  # rows dropped or kinds seen since the last full pass
        self._news: set[str] = set()
        self._base: _Base | None = None
        self._classes = np.zeros(0, dtype=np.int64)
        self._marked: tuple[frozenset[int], float, int] | None = None

    # -- ingest side --------------------------------------------------------------------------

    def observe(self, kind: str, columns: Mapping[str, Any]) -> None:
        """Note one ingested kind's rows (columns as :class:`~diag.transport.codec.BatchColumns`
        holds them). Never raises: a row it cannot read is left to the full passes."""
        try:
            if kind != schema.StepEvent.kind:
                if kind not in CONTINUOUS_KINDS:
                    with self._lock:
                        self._taken.kinds.add(kind)
                return
            rows = _step_rows(columns)
        except (KeyError, TypeError, ValueError):
            with self._lock:
                self._taken.kinds.add(kind)  # unreadable here: a full pass reads it
            return
        if not len(rows):
            return
        with self._lock:
            self._taken.rows.append(rows)
            self._pending_rows += len(rows)
            while self._pending_rows > self.config.max_pending_rows and self._taken.rows:
                old = self._taken.rows.pop(0)
                self._pending_rows -= len(old)
                self._taken.num_dropped += len(old)
                self.num_dropped_rows += len(old)

    def take(self) -> Taken:
        """Everything observed since the last take (O(1): the lists change hands)."""
        with self._lock:
            taken, self._taken = self._taken, Taken()
            self._pending_rows = 0
            return taken

    # -- live triage side ---------------------------------------------------------------------

    def mark(self, taken: Taken) -> None:
        """At a full pass's snapshot: absorb ``taken`` (the rows that snapshot holds) and note
        the ranks and the job's step then, for :meth:`rebase` after the pass."""
        with self._state:
            self._absorb(taken)
            self._marked = (self._seen(), self._job_median(self.config.window), self._closed)

    def rebase(
        self, cost_s: float, named: Iterable[int], classes: Mapping[int, int] | None
    ) -> None:
        """After a full pass of ``cost_s`` CPU seconds whose findings name the ranks ``named``
        and whose layout gives ``classes`` (rank -> work class; ``None``: one class): what later
        passes compare with. The window's flags are taken again with those classes (the first
        full pass is the first to know them), and the ranks persistent in it are known."""
        with self._state:
            seen, job, closed = self._marked or (
                self._seen(),
                self._job_median(self.config.window),
                self._closed,
            )
            self._marked = None
            self._set_classes(classes)
            self._base = _Base(
                at_s=self.clock(),
                cost_s=cost_s,
                known=self._persistent() | frozenset(int(r) for r in named),
                ranks=seen,
                job_step_ms=job,
                closed=closed,
            )
            self._dirty = False
            self._news.clear()

    def decide(self, taken: Taken) -> ScreenVerdict:
        """Absorb ``taken`` and say whether this pass must be a full one (the module docstring)."""
        with self._state:
            self._absorb(taken)
            return self._verdict()

    def _verdict(self) -> ScreenVerdict:
        cfg, base = self.config, self._base
        if base is None:
            return ScreenVerdict(True, "no full pass yet")
        if base.cost_s < cfg.screen_above_s:
            return ScreenVerdict(True, f"a full pass costs {base.cost_s:.2f} s: no screen")
        if self._news:
            return ScreenVerdict(True, "new events: " + ", ".join(sorted(self._news)))
        if self._dirty:
            return ScreenVerdict(True, "step rows dropped at the screen's bound")
        age = self.clock() - base.at_s
        limit = max(cfg.full_every_s, base.cost_s * (1 / cfg.full_share - 1))
        if age >= limit:
            return ScreenVerdict(True, f"last full pass {age:.0f} s ago (at most {limit:.0f} s)")
        new = sorted(self._persistent() - base.known)
        if new:
            return ScreenVerdict(True, f"ranks newly outlying: {_ranks_text(new)}")
        seen = self._seen()
        if seen - base.ranks:
            return ScreenVerdict(True, f"new ranks: {_ranks_text(sorted(seen - base.ranks))}")
        missing = base.ranks - self._recent(cfg.missing_after)
        if missing and self._closed - base.closed >= cfg.missing_after:
            return ScreenVerdict(True, f"ranks stopped reporting: {_ranks_text(sorted(missing))}")
        since = min(self._closed - base.closed, cfg.window)
        if since >= cfg.min_flagged and np.isfinite(base.job_step_ms) and base.job_step_ms > 0:
            now = self._job_median(since)
            moved = now / base.job_step_ms - 1
            if abs(moved) >= cfg.job_change:
                return ScreenVerdict(
                    True, f"job step {base.job_step_ms:.1f} -> {now:.1f} ms ({moved:+.0%})"
                )
        return ScreenVerdict(False, "no change since the last full pass")

    # -- state --------------------------------------------------------------------------------

    def _absorb(self, taken: Taken) -> None:
        cfg = self.config
        if taken.num_dropped:
            self._dirty = True
        self._news |= taken.kinds
        now = self.clock()
        # Batch by batch, not one concatenation of them all: that was a second copy of every
        # pending row (2 M rows, 128 MB at the bound), and the chunks of a step left open were
        # views of it, which kept all of it alive until that step closed (the next pass).
        oldest_done = min(self._done) if self._done else None
        for batch in taken.rows:
            steps = batch[:, 1].astype(np.int64)
            order = np.argsort(steps, kind="stable")
            batch, steps = batch[order], steps[order]
            cuts = np.flatnonzero(np.diff(steps)) + 1
            for chunk in np.split(batch, cuts):
                step = int(chunk[0, 1])
                if step in self._done or (oldest_done is not None and step < oldest_done):
                    continue  # late rows of a closed step: the full passes have them
                self._open.setdefault(step, []).append(chunk)
                self._opened.setdefault(step, now)
                self._counts[step] = self._counts.get(step, 0) + len(chunk)
            self._newest_step = max(self._newest_step, int(steps[-1]))
        if not self._open:
            return
        self._expected = max(self._expected, max(self._counts.values()))
        complete = [
            s for s in self._open if self._counts[s] >= self._expected and s < self._newest_step
        ]
        aged = [s for s in self._open if now - self._opened[s] >= cfg.close_after_s]
        closing = set(complete) | set(aged)
        held = sum(self._counts[s] for s in self._open if s not in closing)
        for s in sorted(self._open):  # the bound: the oldest open steps close first
            if held <= cfg.max_pending_rows:
                break
            if s not in closing:
                closing.add(s)
                held -= self._counts[s]
        if aged:  # a step that never completed: fewer ranks report now
            self._expected = min(self._counts[s] for s in aged)
        steps_closing = sorted(closing)
        for s in steps_closing[-cfg.window :]:  # only the window's worth counts from here on
            self._close(np.concatenate(self._open[s]))
        for s in steps_closing:
            del self._open[s], self._opened[s], self._counts[s]
            self._done[s] = None
        for s, chunks in self._open.items():  # the open steps' rows alone, not their batches'
            if len(chunks) > 1 or chunks[0].base is not None:
                self._open[s] = [np.concatenate(chunks)]
        while len(self._done) > 4 * cfg.window + 64:
            del self._done[next(iter(self._done))]

    def _close(self, rows: np.ndarray) -> None:
        """Put one step's rows in the window (its oldest slot) and flag them."""
        ranks = rows[:, 0].astype(np.int64)
        keep = (ranks >= 0) & (ranks < MAX_RANK)
        rows, ranks = rows[keep], ranks[keep]
        if not len(rows):
            return
        # the last row of each rank (a resent step)
        _, last = np.unique(ranks[::-1], return_index=True)
        rows = rows[::-1][last]
        ranks = rows[:, 0].astype(np.int64)
        self._grow(int(ranks.max()) + 1)
        duration = rows[:, 2 + len(PHASES)]
        pos = self._closed % self.config.window
        self._values[pos] = np.nan
        self._present[pos] = False
        self._values[pos, ranks] = rows[:, 2 : 2 + len(PHASES)]
        self._present[pos, ranks] = True
        finite = duration[np.isfinite(duration)]
        self._job[pos] = float(np.median(finite)) if len(finite) else np.nan
        self._closed += 1
        self._flag(pos)

    def _flag(self, pos: int) -> None:
        """Flag the ranks of the step in slot ``pos`` against their work class's median."""
        cfg = self.config
        self._flags[pos] = 0
        ranks = np.flatnonzero(self._present[pos])
        if not len(ranks):
            return
        values = self._values[pos, ranks].astype(float)
        job = self._job[pos]
        floor = max(cfg.min_excess_ms, cfg.min_excess_frac * job if np.isfinite(job) else 0.0)
        classes = np.zeros(len(ranks), dtype=np.int64)
        known = ranks < len(self._classes)
        classes[known] = self._classes[ranks[known]]
        med = pd.DataFrame(values).groupby(classes).transform("median").to_numpy()
        with np.errstate(invalid="ignore"):
            flagged = (values >= cfg.ratio * med) & (values - med >= floor)
        weights = 1 << np.arange(len(PHASES), dtype=np.uint8)
        self._flags[pos, ranks] = (flagged * weights).sum(axis=1).astype(np.uint8)

    def _grow(self, size: int) -> None:
        have = self._flags.shape[1]
        if size <= have:
            return
        size = max(size, 2 * have)
        w = self.config.window
        values = np.full((w, size, len(PHASES)), np.nan, dtype=np.float32)
        flags = np.zeros((w, size), dtype=np.uint8)
        present = np.zeros((w, size), dtype=bool)
        values[:, :have], flags[:, :have], present[:, :have] = (
            self._values,
            self._flags,
            self._present,
        )
        self._values, self._flags, self._present = values, flags, present

    def _set_classes(self, classes: Mapping[int, int] | None) -> None:
        """Work classes as a rank -> code array (0: a rank the layout does not know); the
        window's flags are taken again when they change."""
        codes = np.zeros(0, dtype=np.int64)
        if classes:
            size = min(max(self._flags.shape[1], max(classes) + 1), MAX_RANK)
            codes = np.zeros(size, dtype=np.int64)
            ranks = np.fromiter(classes.keys(), dtype=np.int64, count=len(classes))
            cls = np.fromiter(classes.values(), dtype=np.int64, count=len(classes))
            inside = (ranks >= 0) & (ranks < size)
            codes[ranks[inside]] = cls[inside] + 1
        if np.array_equal(codes, self._classes):
            return
        self._classes = codes
        for pos in self._slots(self.config.window):
            self._flag(int(pos))

    def _slots(self, last: int) -> np.ndarray:
        """Ring positions of the ``last`` closed steps."""
        n = min(last, self._closed, self.config.window)
        return np.arange(self._closed - n, self._closed) % self.config.window

    def _persistent(self) -> frozenset[int]:
        if self._closed < self.config.min_flagged:
            return frozenset()
        counts = (self._flags != 0).sum(axis=0)
        return frozenset(np.flatnonzero(counts >= self.config.min_flagged).tolist())

    def _seen(self) -> frozenset[int]:
        return frozenset(np.flatnonzero(self._present.any(axis=0)).tolist())

    def _recent(self, last: int) -> frozenset[int]:
        slots = self._slots(last)
        if not len(slots):
            return self._seen()
        return frozenset(np.flatnonzero(self._present[slots].any(axis=0)).tolist())

    def _job_median(self, last: int) -> float:
        values = self._job[self._slots(last)]
        values = values[np.isfinite(values)]
        return float(np.median(values)) if len(values) else float("nan")


def _step_rows(columns: Mapping[str, Any]) -> np.ndarray:
    """A batch's StepEvent columns as rows of (rank, step, PHASES..., duration) in ms; rows
    with a negative rank or step (not a training rank's step) left out."""

    def col(name: str) -> np.ndarray:
        return np.asarray(columns[name], dtype=float)

    rank, step = col("rank"), col("step")
    cpu_wait = np.zeros(len(rank))
    if "cpu_wait_ns" in columns:  # schema 1.2
        cpu_wait = np.clip(np.nan_to_num(col("cpu_wait_ns")), 0, None)
    in_data = np.zeros(len(rank))
    if "cpu_wait_data_ns" in columns:  # schema 1.18: the delay met making a batch is not compute's
        in_data = np.clip(np.nan_to_num(col("cpu_wait_data_ns")), 0, cpu_wait)
    duration = col("duration_ns") / _NS_PER_MS
    data = col("data_wait_ns") / _NS_PER_MS
    ckpt = col("checkpoint_ns") / _NS_PER_MS
    wait = col("collective_wait_ns") / _NS_PER_MS
    compute = (col("compute_ns") - (cpu_wait - in_data)) / _NS_PER_MS
    device_wait = columns.get("device_wait_ns")
    if isinstance(device_wait, list) and device_wait.count(None) == len(device_wait):
        device_wait = None  # no device timer (a CPU job): a list of None, skipped at C speed
    if device_wait is not None:  # the device's split wins where the hook has it (schema 1.11)
        device = col("device_wait_ns") / _NS_PER_MS
        timed = np.isfinite(device)
        by_device = device_split(duration, data, ckpt, device)
        compute, wait = np.where(timed, by_device[0], compute), np.where(timed, by_device[1], wait)
    rows = np.column_stack([rank, step, compute, cpu_wait / _NS_PER_MS, data, ckpt, wait, duration])
    return rows[(rank >= 0) & (step >= 0)]


def _ranks_text(ranks: list[int], most: int = 8) -> str:
    text = ", ".join(str(r) for r in ranks[:most])
    return text + (f" (+{len(ranks) - most} more)" if len(ranks) > most else "")
