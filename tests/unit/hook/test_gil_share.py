"""The hook thread's GIL slices: when it pauses, how long, and never beyond a burst's budget."""

from __future__ import annotations

import pytest

from diag.hook.gil_share import GilShare


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _share(share: float = 0.25, slice_s: float = 0.001) -> tuple[GilShare, _Clock]:
    clock = _Clock()
    return GilShare(share, slice_s, clock=clock, sleep=clock.sleep), clock


def test_a_slice_of_work_is_followed_by_a_pause_that_keeps_the_share() -> None:
    gil, clock = _share(share=0.25)
    gil.burst(1.0)
    clock.now += 0.0004
    gil.tick()  # under a slice: no pause
    assert clock.sleeps == []
    clock.now += 0.0008  # 1.2 ms worked
    gil.tick()
    assert clock.sleeps == [pytest.approx(0.0036)]  # 3 x the work at share 0.25
    clock.now += 0.0002
    gil.tick()  # a new slice started after the pause
    assert len(clock.sleeps) == 1
    assert gil.num_pauses == 1 and gil.paused_s == clock.sleeps[0]


def test_pauses_stop_when_the_burst_budget_is_spent() -> None:
    gil, clock = _share(share=0.5)
    gil.burst(0.0025)
    for _ in range(10):
        clock.now += 0.001
        gil.tick()
    assert sum(clock.sleeps) == pytest.approx(0.0025)  # 1 + 1 + 0.5, then none
    assert len(clock.sleeps) == 3
    gil.burst(0.0)  # the final cycle: unpaced
    clock.now += 0.01
    gil.tick()
    assert len(clock.sleeps) == 3


def test_a_share_outside_zero_one_never_pauses() -> None:
    for share in (0.0, 1.0, -1.0):
        gil, clock = _share(share=share)
        gil.burst(1.0)
        clock.now += 0.1
        gil.tick()
        assert clock.sleeps == [] and not gil.enabled
