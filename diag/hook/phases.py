"""Per-step phase accounting on the training thread: cheap, allocation-light, never raises.

A step runs from the end of the previous step (or the first observed activity: a DataLoader fetch,
a backward, an optimizer step) to the end of the iteration's closing optimizer ``step()``
(:mod:`diag.hook.optimizers`). Timed regions
(data wait, backward, optimizer, checkpoint) may nest; each phase gets its *exclusive* time (an
inner region's time is taken out of the outer one), so the phases partition the step:

    data_wait_ns + forward_ns + backward_ns + optimizer_ns + checkpoint_ns + other_ns == duration_ns

``forward_ns`` is an approximation: the time outside any region between the end of the last data
fetch before the step's first backward (or the step start) and that backward's start. Everything
else outside regions is ``other_ns``.

``collective_wait_ns`` adds three kinds of blocking: (a) gradient synchronization inside
backward, measured as the time from "local gradients done" (an autograd engine callback queued
first) to the return of ``backward()`` (DDP/FSDP finalize and wait for their all-reduces there),
minus any Python-level collective time already counted inside that tail; (b) time inside
synchronous Python-level ``torch.distributed`` collectives; (c) time in ``Work.wait()`` on
asynchronous ones (``isend``/``irecv``, ``async_op=True``) outside any wrapped collective: a
pipeline stage blocked on its neighbour's activations or gradients is waiting, not computing. It
overlaps the phases; ``compute_ns`` is ``duration_ns - collective_wait_ns - data_wait_ns -
checkpoint_ns``.

The tracker emits plain tuples (see :data:`STEP_FIELDS`); the hook thread builds the events.
``on_begin(step)`` (optional) is called where a step begins: at the first activity for step 0, and
right after a step ends for the next one (after the new step's start time was taken, so work done
there, e.g. starting a profiler window, counts in the step that begins).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DATA, BACKWARD, OPTIMIZER, CHECKPOINT = 0, 1, 2, 3

#: Layout of the ``("step", ...)`` record the tracker emits (after the tag).
STEP_FIELDS = (
    "step",
    "start_perf_ns",
    "end_perf_ns",
    "data_wait_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "checkpoint_ns",
    "other_ns",
    "collective_wait_ns",
    "loss",
    "num_backward",
    "num_collectives",
    "cpu_wait_ns",
    "cpu_wait_data_ns",
)
#: top-level regions whose run-queue delay is theirs, not the step's compute's
_OUTSIDE_COMPUTE = (DATA, CHECKPOINT)


class StepTracker:
    """Accumulates one step's phases from region enter/exit calls made by the hook's wrappers.

    ``emit`` receives ``("start", perf_ns)`` once at the first activity and one
    ``("step", *STEP_FIELDS)`` tuple per finished step. ``clock`` is a monotonic ns clock.
    """

    def __init__(
        self,
        emit: Callable[[tuple[Any, ...]], None],
        clock: Callable[[], int] = time.perf_counter_ns,
        on_begin: Callable[[int], bool | None] | None = None,
        runqueue: Callable[[], int] | None = None,
    ) -> None:
        self._emit = emit
        self._clock = clock
        self.runqueue = runqueue  # the training thread's cumulative run-queue delay (ns)
        self._runq0 = 0
        self.on_begin = on_begin
        self.step = 0  # index of the step in progress
        self.started = False
        self._start = 0
        self._stack: list[list[int]] = []  # [phase, t0, child_ns, run-queue clock at t0 or -1]
        self._bw_waits: list[tuple[int, int]] | None = None  # in a backward: (end, duration)
        self._reset(0)

    def _reset(self, now: int) -> None:
        self._start = now
        self._acc = [0, 0, 0, 0]
        self._last_top_end = now
        self._fwd_gap = 0
        self._forward_ns = 0
        self._seen_backward = False
        self.py_coll_ns = 0  # time blocked in Python-level collectives and waits this step
        self._grad_sync_ns = 0
        self.runq_in_wait = 0  # run-queue delay inside collective waits (woken, awaiting a CPU)
        self.runq_own = 0  # run-queue delay during diag's own work (a profiler window's stop)
        self.runq_in_data = 0  # ... while waiting for a batch or writing a checkpoint
        self._loss: Any = None
        self._num_backward = 0
        self._num_coll = 0
        self._stack.clear()

    def _begin(self, now: int) -> None:
        self.started = True
        self._reset(now)
        if self.runqueue is not None:
            self._runq0 = self.runqueue()
        self._emit(("start", now))
        self._call_on_begin()

    def _call_on_begin(self) -> None:
        """``on_begin`` returns True when it did diag's own work (started a profiler window): the
        run-queue delay that work met is not the step's, so the step's clock is read after it."""
        if self.on_begin is not None and self.on_begin(self.step) and self.runqueue is not None:
            self._runq0 = self.runqueue()

    def enter(self, phase: int, now: int) -> bool:
        """Open a region; False if untracked (no step started and this one cannot start it)."""
        if not self.started:
            if phase == CHECKPOINT:
                return False
            self._begin(now)
        stack = self._stack
        if not stack:
            if not self._seen_backward:
                self._fwd_gap += now - self._last_top_end
            if phase == BACKWARD and not self._seen_backward:
                self._seen_backward = True
                self._forward_ns = self._fwd_gap
        # the run-queue clock around a top-level data or checkpoint region (two reads, ~0.5 us):
        # delay met there is not the compute's
        runq = -1
        if not stack and phase in _OUTSIDE_COMPUTE and self.runqueue is not None:
            runq = self.runqueue()
        stack.append([phase, now, 0, runq])
        return True

    def exit(self, phase: int, now: int) -> None:
        """Close the innermost open ``phase`` region (unwinding any an exception left open)."""
        stack = self._stack
        while stack:
            region = stack.pop()
            dur = now - region[1]
            self._acc[region[0]] += dur - region[2]
            if region[3] >= 0 and self.runqueue is not None:
                self.runq_in_data += max(0, self.runqueue() - region[3])
            if stack:
                stack[-1][2] += dur
            else:
                self._last_top_end = now
                if region[0] == DATA and not self._seen_backward:
                    self._fwd_gap = 0
            if region[0] == phase:
                return

    def runqueue_now(self) -> int | None:
        """The training thread's cumulative run-queue delay (ns), ``None`` where unknown."""
        return None if self.runqueue is None else self.runqueue()

    def discount_runqueue(self, since: int) -> None:
        """diag's own work ran on the training thread since the run-queue clock read ``since``
        (a profiler window's stop: four ranks' disables at once on a small host queue for CPUs):
        the delay it met is left out of the step's ``cpu_wait_ns``, which says how long the
        job's own work waited for a CPU."""
        if self.runqueue is not None:
            self.runq_own += max(0, self.runqueue() - since)

    def add_backward(self, loss: Any, grad_sync_ns: int) -> None:
        """Record one finished backward: its loss (float, a device tensor or None) and sync wait."""
        self._num_backward += 1
        if loss is not None:
            self._loss = loss
        self._grad_sync_ns += max(0, grad_sync_ns)

    def add_collective(self, duration_ns: int, sync: bool, end_ns: int = 0) -> None:
        """Record one Python-level collective call of this step (sync ones count as wait),
        ``end_ns`` when it returned (for :meth:`backward_waits_after`)."""
        self._num_coll += 1
        if sync:
            self.py_coll_ns += duration_ns
            if self._bw_waits is not None:
                self._bw_waits.append((end_ns, duration_ns))

    def add_wait(self, duration_ns: int, end_ns: int = 0) -> None:
        """Record a ``Work.wait()`` on an asynchronous collective or p2p op (collective wait)."""
        self.py_coll_ns += duration_ns
        if self._bw_waits is not None:
            self._bw_waits.append((end_ns, duration_ns))

    def open_backward_waits(self) -> None:
        """A backward starts: note the Python-level waits in it (end, duration) until
        :meth:`backward_waits_after`."""
        self._bw_waits = []

    def backward_waits_after(self, mark_ns: int) -> int:
        """The time of the backward's Python-level waits after ``mark_ns`` (its "local gradients
        done" mark: what its final callbacks waited on a collective in, e.g. FSDP's
        reduce-scatter, counted as collective wait already), and stop noting them."""
        waits, self._bw_waits = self._bw_waits, None
        if not waits:
            return 0
        return sum(min(dur, end - mark_ns) for end, dur in waits if end > mark_ns)

    def end_step(self, now: int) -> None:
        """The step ended (its closing optimizer finished ``step()``): emit it, start the next."""
        if not self.started:
            self._begin(now)
        while self._stack:
            self.exit(self._stack[-1][0], now)
        duration = now - self._start
        data, backward, optimizer, checkpoint = self._acc
        forward = self._forward_ns
        other = duration - data - backward - optimizer - checkpoint - forward
        runq_now = self._runq0 if self.runqueue is None else self.runqueue()
        # Only the delay outside collective waits: a thread woken when an all-reduce completes
        # may wait for a CPU before it runs on, and that time is already counted as wait.
        runq = min(max(0, runq_now - self._runq0 - self.runq_in_wait - self.runq_own), duration)
        self._emit(
            (
                "step",
                self.step,
                self._start,
                now,
                data,
                forward,
                backward,
                optimizer,
                checkpoint,
                other,
                self.py_coll_ns + self._grad_sync_ns,
                self._loss,
                self._num_backward,
                self._num_coll,
                runq,
                min(self.runq_in_data, runq),
            )
        )
        self.step += 1
        self._reset(now)
        self._runq0 = runq_now
        if self.on_begin is not None and self.on_begin(self.step) and self.runqueue is not None:
            self._runq0 = self.runqueue()  # as _call_on_begin, inline: once a step
