"""The state the job's threads share with the hook thread: the bounded queue, the counters."""

from __future__ import annotations

from diag.hook.state import ErrorLog, HookState, measure_wall_offset_ns


def test_emit_queues_up_to_the_bound_then_counts_drops() -> None:
    state = HookState(queue_max_events=2)
    for i in range(5):
        state.emit(("rec", i))
    assert list(state.queue) == [("rec", 0), ("rec", 1)] and state.num_queue_dropped == 3
    state.num_fr_dropped += 4  # the hook thread's own counter
    assert state.num_dropped == 7


def test_errors_of_both_sides_add_up_and_the_latest_is_last() -> None:
    now = [0]
    state = HookState(
        queue_max_events=1,
        job_errors=ErrorLog(lambda: now[0]),
        thread_errors=ErrorLog(lambda: now[0]),
    )
    assert (state.num_errors, state.last_error) == (0, "")
    now[0] = 1
    state.job_errors.record(ValueError("bad\nsecond line"))
    assert state.last_error == "ValueError: bad"
    now[0] = 2
    state.thread_errors.record(RuntimeError("x" * 400))
    assert state.last_error == "RuntimeError: " + "x" * 286  # one line, 300 characters at most
    now[0] = 3
    state.job_errors.record(KeyError("k"))
    assert state.num_errors == 3 and state.last_error == "KeyError: 'k'"


def test_wall_offset_takes_the_tightest_reading() -> None:
    ticks = iter([0, 100, 1000, 1004])  # a 100 ns bracket, then a 4 ns one
    walls = iter([5_000, 9_000])
    offset = measure_wall_offset_ns(lambda: next(ticks), lambda: next(walls), samples=2)
    assert offset == 9_000 - 1002
