"""When the hook thread harvests the Flight Recorder: paced to the job's collectives, not a clock.

The Flight Recorder is a ring buffer of ``capacity`` entries (fixed when the first process group is
created: :data:`diag.hook.core.FR_BUFFER_DEFAULT` unless the job set its own); an entry
overwritten before a harvest saw it is lost. A full dump costs ~7-10 us per buffered entry while
holding the GIL, so a harvest is worth its cost when about half the ring is new: that keeps the
cost near 2 x 7-10 us per collective whatever the rate and the buffer size, and leaves the other
half as slack for a hook thread that wakes late (a busy host).

How much is new is measured, never assumed:

- a *probe* (:meth:`FrPacer.probe_total`, a dump without entries: ~3 us) reads every group's
  ``last_enqueued_collective``; its growth since the last harvest, times the learned ratio of FR
  entries per counted collective (:attr:`FrPacer.ratio`: below 1 where the backend counts ops it
  does not record, gloo's point-to-point ops), estimates the new entries;
- each harvest measures the job's rate (FR entries per second, its recent peak) and its
  collectives per step (entries per ended step, the recent peak), so :meth:`FrPacer.wait_s` can
  say when to look again: half of the time the job needs to fill what is left of the half-ring, at
  most the hook's flush interval, at least :data:`MIN_WAKE_S`.

A harvest is due when the estimate reaches half the ring, when ``longest_s`` passed since the last
one (the latency bound: steps are held until a harvest after their end), or at the final one.
Entries the ring overwrote before a dump saw them are counted (:meth:`FrPacer.harvested` returns
them); once, the pacer says the ring is too small for the job (:attr:`FrPacer.advice`): the entries
per step it measured and the ``TORCH_FR_BUFFER_SIZE`` that would hold four steps of them.

Pure bookkeeping, clock and dumps given by the caller (the hook thread).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

MIN_WAKE_S = 0.01  # the hook thread never looks more often than this
_PEAK_WINDOW = 8  # harvests the rate and per-step peaks are taken over


def probe_total(status: Mapping[str, Any] | None) -> int:
    """Sum over groups of ``last_enqueued_collective`` in a dump's ``pg_status`` (0 if none)."""
    total = 0
    for group in (status or {}).values():
        try:
            total += max(0, int(group.get("last_enqueued_collective", 0)))
        except (AttributeError, TypeError, ValueError):
            continue
    return total


class FrPacer:
    """Harvest pacing for one Flight Recorder ring (see the module docstring).

    ``capacity`` is the ring's size in entries (corrected upwards if a dump holds more);
    ``longest_s`` the longest pause between harvests; ``flush_s`` the hook thread's own cycle.
    """

    def __init__(self, capacity: int, *, longest_s: float, flush_s: float) -> None:
        self.capacity = max(1, capacity)
        self.longest_s = longest_s
        self.flush_s = flush_s
        self.ratio = 1.0  # FR entries per collective the probe counts (learned)
        self.top = -1  # highest record_id harvested
        self.last_s: float | None = None  # monotonic time of the last harvest
        self._probe_at_harvest = 0
        self._steps_at_harvest = 0
        self._rates: deque[float] = deque(maxlen=_PEAK_WINDOW)  # entries/s per harvest
        self._per_step: deque[float] = deque(maxlen=_PEAK_WINDOW)  # entries/step per harvest
        self.num_lost = 0
        self.advice = ""  # set once when entries were lost: what would have held them

    @property
    def half(self) -> int:
        return max(1, self.capacity // 2)

    @property
    def rate(self) -> float:
        """Recent peak of FR entries per second (0 before two harvests)."""
        return max(self._rates, default=0.0)

    @property
    def per_step(self) -> float:
        """Recent peak of FR entries per step (0 before a harvest spanned a step end)."""
        return max(self._per_step, default=0.0)

    def estimate(self, probe: int) -> float:
        """New FR entries since the last harvest, estimated from a probe's total."""
        return max(0, probe - self._probe_at_harvest) * self.ratio

    def due(self, now_s: float, probe: int | None) -> bool:
        """Whether to harvest now (``probe``: the latest probe total, None when not probed)."""
        if self.last_s is None or now_s - self.last_s >= self.longest_s:
            return True
        return probe is not None and self.estimate(probe) >= self.half

    def wait_s(self, now_s: float, probe: int | None) -> float:
        """How long the hook thread may sleep before it looks again."""
        if self.last_s is None:
            return MIN_WAKE_S
        until_longest = self.last_s + self.longest_s - now_s
        rate = self.rate
        if rate <= 0:
            return max(MIN_WAKE_S, min(self.flush_s, until_longest))
        left = self.half - (self.estimate(probe) if probe is not None else 0.0)
        return max(MIN_WAKE_S, min(self.flush_s, until_longest, left / rate / 2))

    def rebase(self, probe: int | None) -> None:
        """The probe counts something else from now on (the ring's entries instead of the
        groups' collectives: :mod:`diag.hook.fr_dump`'s reader): ``probe`` is its value now, and
        the ratio learned for the old count is forgotten."""
        self.ratio = 1.0
        if probe is not None:
            self._probe_at_harvest = probe

    def harvested(
        self, now_s: float, record_ids: Iterable[int], probe: int | None, steps_ended: int
    ) -> int:
        """Account for a harvest (every ``record_id`` in the dump, the probe total taken with it,
        the steps ended so far); returns the entries lost since the previous one."""
        ids = [i for i in record_ids if i >= 0]
        lost = 0
        if ids:
            low, top = min(ids), max(ids)
            self.capacity = max(self.capacity, len(ids))
            first = self.top < 0
            if not first and low > self.top + 1:
                lost = low - self.top - 1
            new = len(ids) if first else max(0, top - self.top)
            self.top = max(self.top, top)
        else:
            new = 0
        if probe is not None:
            counted = probe - self._probe_at_harvest
            if counted > 0 and self.last_s is not None:
                # smoothed, and never so low that a change in the job goes unseen for long
                self.ratio = min(1.0, max(0.05, 0.5 * self.ratio + 0.5 * new / counted))
            self._probe_at_harvest = probe
        if self.last_s is not None and now_s > self.last_s:
            self._rates.append(new / (now_s - self.last_s))
            if steps_ended > self._steps_at_harvest:
                self._per_step.append(new / (steps_ended - self._steps_at_harvest))
        self._steps_at_harvest = steps_ended
        self.last_s = now_s
        if lost:
            self.num_lost += lost
            if not self.advice:
                per_step = max(self.per_step, 1.0)
                self.advice = (
                    f"Flight Recorder ring of {self.capacity} entries overwrote {lost} entries "
                    f"before a harvest (this job: ~{per_step:.0f} per step, peak "
                    f"{self.rate:.0f}/s); TORCH_FR_BUFFER_SIZE={_four_steps(per_step)} "
                    "would hold four steps"
                )
        return lost


def _four_steps(per_step: float) -> int:
    """A ring size holding four steps of ``per_step`` entries, rounded up to a power of two."""
    need = max(64, int(4 * per_step))
    return 1 << (need - 1).bit_length()
