"""Device-side step timing: events recorded on the training thread, read on the hook thread.

On a GPU the CPU runs ahead of the device: the autograd callback that marks "local gradients
done" fires when backward was *issued*, so compute still running on the device would be counted
as collective wait. The device's own clock says where the step's time went. The training side
records one event per mark on the current stream (:meth:`DeviceTimer.mark`, a few microseconds,
never a synchronization) and closes each step with :meth:`DeviceTimer.end_step`; the hook thread
calls :meth:`DeviceTimer.poll`, which returns the steps whose last event has completed
(``query()``, never ``synchronize()``), oldest first, with the device time between marks
(:class:`DeviceStep`):

- ``compute_ns``: step start -> local gradients done (the last backward's autograd callback);
- ``wait_ns``: local gradients done -> optimizer start (the gradient all-reduce the optimizer
  waited for, as the device saw it);
- ``duration_ns``: step start -> step end.

A step without a mark (no backward: ``None`` there) still gets its duration. Bounded: at most
``max_pending`` steps in flight (a device far behind, or stuck); a step beyond that is dropped
and counted (``num_dropped``). The bound covers the hook thread's pace, not only the device's:
the hook polls every cycle (0.2 s), and a job of 1 ms steps issues 200 steps in one (on an
H200, a bound of 64 lost 236 of a 300-step job's 2 ms steps while the hook polled only at its
Flight Recorder harvests). Events are pooled and reused.

The seam (:class:`EventBackend`): ``new_event()`` gives an object with ``record()``,
``query() -> bool`` and ``elapsed_time(end) -> ms``. :class:`CudaEvents` is
``torch.cuda.Event(enable_timing=True)``; :class:`CpuEvents` timestamps on ``record()`` (the CPU
is its own device: parity in tests and on CPU jobs, where the hook does not use it). Tests use a
fake backend that counts synchronizations.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any, Protocol

START, GRADS, OPT, END = 0, 1, 2, 3
_MARKS = 4


class DeviceEvent(Protocol):
    def record(self) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end: Any) -> float: ...


class EventBackend(Protocol):
    name: str

    def new_event(self) -> DeviceEvent: ...


class CudaEvents:
    """CUDA events on the current stream of the calling thread (timing enabled)."""

    name = "cuda"

    def __init__(self, torch: Any) -> None:
        self._event = torch.cuda.Event

    def new_event(self) -> DeviceEvent:
        return self._event(enable_timing=True)


class _CpuEvent:
    __slots__ = ("t",)

    def __init__(self) -> None:
        self.t = 0

    def record(self) -> None:
        self.t = time.perf_counter_ns()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: Any) -> float:
        return (end.t - self.t) / 1e6


class CpuEvents:
    """The CPU as its own device: an event is the moment it was recorded."""

    name = "cpu"

    def new_event(self) -> DeviceEvent:
        return _CpuEvent()


@dataclass(frozen=True, slots=True)
class DeviceStep:
    """One step as the device saw it (ns; ``None`` where the step had no such mark)."""

    step: int
    duration_ns: int
    compute_ns: int | None
    wait_ns: int | None


def _ns(a: Any, b: Any) -> int | None:
    if a is None or b is None:
        return None
    return max(0, round(a.elapsed_time(b) * 1e6))


class DeviceTimer:
    """Marks on the training side, results on the hook thread (see the module docstring)."""

    def __init__(self, backend: EventBackend, max_pending: int = 2048) -> None:
        self.backend = backend
        self.max_pending = max_pending
        self._pool: collections.deque[DeviceEvent] = collections.deque()
        self._open: list[DeviceEvent | None] = [None] * _MARKS
        self._pending: collections.deque[tuple[int, list[DeviceEvent | None]]] = collections.deque()
        self.num_dropped = 0
        self.num_steps = 0

    def _event(self) -> DeviceEvent:
        try:
            return self._pool.pop()
        except IndexError:
            return self.backend.new_event()

    def mark(self, which: int) -> None:
        """Record mark ``which`` (START, GRADS, OPT) of the open step on the current stream; a
        mark made twice keeps the later one (the last backward of an accumulation)."""
        ev = self._event()
        ev.record()
        old, self._open[which] = self._open[which], ev
        if old is not None:
            self._pool.append(old)

    def end_step(self, step: int) -> None:
        """Close step ``step`` (its END mark) and open the next one (its START is this END)."""
        if self._open[START] is None:  # no start seen (installed mid-step): not timed
            self._recycle(self._open)
            self._open = [None] * _MARKS
            self.mark(START)
            return
        self.mark(END)
        marks, self._open = self._open, [None] * _MARKS
        if len(self._pending) >= self.max_pending:
            self.num_dropped += 1
            self._recycle(marks)
        else:
            self._pending.append((step, marks))
        # the next step starts where this one ended (one event less per step)
        nxt = self._event()
        nxt.record()
        self._open[START] = nxt

    def poll(self) -> list[DeviceStep]:
        """The steps whose END completed, oldest first (hook thread; never synchronizes)."""
        out: list[DeviceStep] = []
        while self._pending:
            step, marks = self._pending[0]
            end = marks[END]
            # the END first (the stream's last event); the others may sit on another stream (the
            # autograd engine's device thread records GRADS on its own current stream)
            if end is None or not end.query() or not all(e.query() for e in marks if e):
                break
            self._pending.popleft()
            start, grads, opt = marks[START], marks[GRADS], marks[OPT]
            out.append(
                DeviceStep(
                    step=step,
                    duration_ns=_ns(start, end) or 0,
                    compute_ns=_ns(start, grads),
                    wait_ns=_ns(grads, opt if opt is not None else end),
                )
            )
            self.num_steps += 1
            self._recycle(marks)
        return out

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def _recycle(self, marks: list[DeviceEvent | None]) -> None:
        for ev in marks:
            if ev is not None:
                self._pool.append(ev)
