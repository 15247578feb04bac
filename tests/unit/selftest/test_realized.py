"""What an injected fault cost the job, read back from the run's own step events."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.store.run_store import RunStore


def _run(tmp_path: Path, durations_ms: dict[int, list[float]]) -> Path:
    """A run directory with one step event per rank and step (durations per step, per rank)."""
    store = RunStore.create(tmp_path / "run")
    events = []
    for step, per_rank in durations_ms.items():
        for rank, ms in enumerate(per_rank):
            ns = int(ms * 1e6)
            t0 = step * 10**9
            event = schema.StepEvent(
                ts_ns=t0, host="h", rank=rank, source=f"h/rank{rank}/1", seq=step, step=step,
                start_ns=t0, end_ns=t0 + ns, duration_ns=ns,
            )  # fmt: skip
            events.append(event)
    store.append(events)
    store.flush()
    return tmp_path / "run"


def test_cost_is_the_mean_step_after_the_onset_against_before(tmp_path: Path) -> None:
    """Steps of 40 ms before the onset, 50 ms after (one rank's own accounting off: the median
    of the ranks per step ignores it), a warm-up step of 500 ms left out: cost 1 - 40/50."""
    from diag.selftest.realized import achieved_cost, took

    steps = {s: [40.0, 40.0, 40.0, 5.0] for s in range(20)}
    steps[0] = [500.0] * 4
    steps.update({s: [50.0, 50.0, 50.0, 5.0] for s in range(20, 40)})
    run = _run(tmp_path, steps)
    cost = achieved_cost(run, 20)
    assert cost is not None and abs(cost - 0.2) < 1e-9
    assert took(cost, 0.3)  # a third of 30 % is 10 %: 20 % took
    assert not took(0.08, 0.3) and not took(0.04, 0.1)  # under a third; under 5 % anyway
    assert took(None, 0.3)  # not read: counted as taken


def test_bursts_count_through_the_mean(tmp_path: Path) -> None:
    """A rank stopped for 400 ms in one step of ten costs the job through that step: the
    mean sees it where a median would not."""
    from diag.selftest.realized import achieved_cost

    steps = {s: [40.0] * 4 for s in range(30)}
    steps.update({s: [440.0 if s % 10 == 0 else 40.0] * 4 for s in range(30, 60)})
    cost = achieved_cost(_run(tmp_path, steps), 30)
    assert cost is not None and 0.45 < cost < 0.55  # mean after 80 ms against 40 ms


def test_no_onset_no_store_or_too_few_steps_read_as_unknown(tmp_path: Path) -> None:
    from diag.selftest.realized import achieved_cost

    run = _run(tmp_path, {s: [40.0] * 2 for s in range(12)})
    assert achieved_cost(run, None) is None  # from the start: nothing before to compare
    assert achieved_cost(run, 6) is None  # 3 steps after the warm-up before the onset
    assert achieved_cost(run, 9) is None  # 3 steps from the onset on
    assert achieved_cost(tmp_path / "nowhere", 6) is None
