"""How the hook thread shares the GIL with the training thread: short slices, paced.

The training thread gives the GIL up inside every torch operator and wants it back when the
operator returns. While the hook thread runs Python code it keeps the GIL until CPython's switch
interval (5 ms) forces a hand-off, so a harvest of ~25 ms of Python work (a few hundred Flight
Recorder entries turned into events, a batch of events encoded) delays the training thread's
step by about all of it: the steady-state tail of ``bench/overhead.py``. The work itself is
needed; holding the GIL in one piece is not.

:class:`GilShare` cuts the hook thread's work into slices: the work calls :meth:`GilShare.tick`
between small units (an entry, a record, an event); once a slice has run ``slice_s``, the hook
thread sleeps, releasing the GIL, so that its share of the time while it is busy stays near
``share`` (a slice of 1 ms then a pause of 3 ms at a share of 0.25). The training thread then
waits at most about one slice for the GIL, and a burst of hook work is spread over several of its
steps instead of landing on one.

The pauses never cost data: each burst of work (:meth:`GilShare.burst`) gets a budget of pause
time (what the Flight Recorder's ring or the flush interval leaves as slack, see the callers in
:mod:`diag.hook.thread`); once it is spent, or for the final cycle (``budget_s=0``), the work runs
unpaced, as before. What cannot be sliced stays whole: one call into C holds the GIL for its
duration (torch's own Flight Recorder dump; diag's native one lets go of it:
:mod:`diag.hook.fr_dump`).

Clock and sleep are injected: pure bookkeeping, tested without threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class GilShare:
    """Slices of at most ``slice_s`` of work, each followed by a pause that keeps the hook
    thread's share of a busy period near ``share`` (``share`` <= 0 or >= 1: never pause)."""

    def __init__(
        self,
        share: float,
        slice_s: float,
        *,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.share = share
        self.slice_s = max(0.0, slice_s)
        self._clock = clock
        self._sleep = sleep
        self._since = clock()
        self._budget_s = 0.0
        self.paused_s = 0.0  # pause time in all, since the start (for the bench and health)
        self.num_pauses = 0

    @property
    def enabled(self) -> bool:
        return 0.0 < self.share < 1.0 and self.slice_s > 0.0

    def burst(self, budget_s: float) -> None:
        """A burst of work starts now; it may pause ``budget_s`` in all (0: run it unpaced)."""
        self._budget_s = max(0.0, budget_s) if self.enabled else 0.0
        self._since = self._clock()

    def tick(self) -> None:
        """Between two units of work: pause if this slice has run its length and the burst's
        budget allows (the pause is cut to what is left of it)."""
        if self._budget_s <= 0.0:
            return
        now = self._clock()
        worked = now - self._since
        if worked < self.slice_s:
            return
        pause = min(worked * (1.0 - self.share) / self.share, self._budget_s)
        self._budget_s -= pause
        self._sleep(pause)
        self.paused_s += pause
        self.num_pauses += 1
        self._since = self._clock()
