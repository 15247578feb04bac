"""Flight Recorder harvest pacing (:class:`FrPacer`) and held entries (:class:`FrState`), on
scripted dumps: a harvest is due when half the ring is new by the probe's estimate, the pacer
wakes in time for the measured rate, lost entries are counted and explained, and an entry one
harvest saw survives the ring overwriting it before the next."""

from __future__ import annotations

from typing import Any

import pytest

from diag.hook.fr_pacing import MIN_WAKE_S, FrPacer, probe_total
from diag.hook.fr_state import FrState, StepWindows

T0 = 1_800_000_000_000_000_000


def status(*counts: int) -> dict[str, dict[str, int]]:
    return {str(i): {"last_enqueued_collective": c} for i, c in enumerate(counts)}


def test_probe_total_sums_groups_and_ignores_junk() -> None:
    assert probe_total(status(3, 4)) == 7
    assert probe_total({"0": {"last_enqueued_collective": -1}, "1": "x", "2": {}}) == 0
    assert probe_total(None) == 0


def test_due_at_half_the_ring_by_the_probe_or_at_the_longest_pause() -> None:
    p = FrPacer(512, longest_s=2.0, flush_s=0.2)
    assert p.due(0.0, None)  # never harvested
    p.harvested(0.0, range(10), probe=10, steps_ended=0)
    assert not p.due(0.5, 10 + 255)
    assert p.due(0.5, 10 + 256)
    assert not p.due(1.9, None) and p.due(2.0, None)


def test_ratio_learns_what_the_probe_counts_but_the_ring_does_not_record() -> None:
    # gloo counts point-to-point ops in pg_status but does not record them: 1 entry per 3 counted
    p = FrPacer(512, longest_s=2.0, flush_s=0.2)
    p.harvested(0.0, range(0, 100), probe=300, steps_ended=0)
    for k in range(1, 8):
        p.harvested(k * 1.0, range(0, 100 + 100 * k), probe=300 + 300 * k, steps_ended=10 * k)
    assert p.ratio == pytest.approx(1 / 3, rel=0.05)
    assert not p.due(8.5, 300 + 300 * 7 + 700)  # ~233 entries estimated: not yet
    assert p.per_step == pytest.approx(10.0) and p.rate == pytest.approx(100.0)


def test_wakes_in_time_for_the_measured_rate() -> None:
    p = FrPacer(512, longest_s=2.0, flush_s=0.2)
    p.harvested(0.0, range(0, 10), probe=10, steps_ended=0)
    assert p.wait_s(0.0, 10) == 0.2  # no rate yet: the flush cycle
    p.harvested(0.1, range(0, 210), probe=210, steps_ended=5)  # 2000 entries/s
    # 256 to go at 2000/s: half of 128 ms
    assert p.wait_s(0.1, 210) == pytest.approx(0.064)
    assert p.wait_s(0.1, 210 + 250) == MIN_WAKE_S


def test_lost_entries_are_counted_and_explained_once() -> None:
    p = FrPacer(128, longest_s=2.0, flush_s=0.2)
    assert p.harvested(0.0, range(0, 100), probe=100, steps_ended=0) == 0
    assert p.harvested(0.5, range(150, 278), probe=278, steps_ended=2) == 50  # 100..149 lost
    assert p.num_lost == 50
    assert "overwrote 50 entries" in p.advice and "TORCH_FR_BUFFER_SIZE=512" in p.advice
    advice = p.advice
    p.harvested(1.0, range(400, 528), probe=528, steps_ended=4)
    assert p.advice == advice and p.num_lost == 50 + 122


def test_a_bigger_ring_than_assumed_is_learned_from_the_dump() -> None:
    p = FrPacer(128, longest_s=2.0, flush_s=0.2)
    p.harvested(0.0, range(0, 2000), probe=2000, steps_ended=0)
    assert p.capacity == 2000 and p.half == 1000


def entry(rid: int, *, done: bool = True) -> dict[str, Any]:
    return {
        "record_id": rid,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": rid + 1,
        "p2p_seq_id": 0,
        "profiling_name": "gloo:all_reduce",
        "time_created_ns": T0 + rid * 1000,
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "output_sizes": [[4]],
        "output_dtypes": ["Float"],
        "state": "scheduled",
        "retired": done,
        "is_p2p": False,
        "thread_id": "1",
    }


def dump(ids: range, *, not_done: tuple[int, ...] = ()) -> dict[str, Any]:
    return {"entries": [entry(i, done=i not in not_done) for i in ids], "pg_status": {}}


def test_held_entries_overwritten_before_the_next_harvest_are_still_emitted() -> None:
    windows = StepWindows()
    windows.start(T0)
    fr = FrState(windows)
    assert fr.process(dump(range(0, 8)), 1.0) == []  # seen once: held one harvest
    # the ring (8 entries) moved on by 6 before the next harvest: 0..5 left it unseen again
    out = fr.process(dump(range(6, 14)), 2.0)
    assert [p["seq_id"] for _, p in out] == [1, 2, 3, 4, 5, 6, 7, 8]
    out = fr.process(dump(range(6, 14)), 3.0)
    assert [p["seq_id"] for _, p in out] == [9, 10, 11, 12, 13, 14]


def test_an_entry_in_flight_when_overwritten_is_emitted_as_last_seen() -> None:
    windows = StepWindows()
    windows.start(T0)
    fr = FrState(windows)
    fr.process(dump(range(0, 4), not_done=(3,)), 1.0)
    fr.process(dump(range(0, 4), not_done=(3,)), 2.0)  # 0..2 emitted, 3 still in flight
    out = fr.process(dump(range(10, 14)), 3.0)
    assert [(p["seq_id"], p["state"]) for _, p in out] == [(4, "scheduled")]


def test_a_rebased_probe_forgets_the_ratio_of_the_old_count() -> None:
    pacer = FrPacer(512, longest_s=2.0, flush_s=0.2)
    pacer.harvested(0.0, range(100), probe=1000, steps_ended=10)
    pacer.harvested(1.0, range(100, 150), probe=1200, steps_ended=20)  # 50 entries, 200 counted
    assert pacer.ratio < 1.0
    pacer.rebase(150)  # the ring's next record id: it counts entries now
    assert pacer.ratio == 1.0 and pacer.estimate(250) == 100
    pacer.rebase(None)
    assert pacer.estimate(250) == 100
