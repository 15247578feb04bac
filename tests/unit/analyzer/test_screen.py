"""The live triage's screen: a full pass when the new steps show something the last one did not
know, the last findings kept otherwise."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from diag import schema
from diag.analyzer.core import AnalyzerCore
from diag.analyzer.screen import ScreenConfig, StepScreen, _step_rows
from diag.store.run_store import RunStore
from diag.transport import codec
from tests.fakes.scenarios import Scenario

FIELDS = ("rank", "step", "duration_ns", "compute_ns", "cpu_wait_ns", "data_wait_ns",
          "checkpoint_ns", "collective_wait_ns")  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def columns(events: Sequence[schema.Event]) -> dict[str, list]:
    steps = [e for e in events if isinstance(e, schema.StepEvent)]
    return {name: [getattr(e, name) for e in steps] for name in FIELDS}


def job(
    ranks: int = 16,
    steps: range = range(0, 40),
    *,
    slow: dict[int, float] | None = None,
    every: float = 1.0,
    seed: int = 0,
) -> list[dict[str, list]]:
    """Per step, the StepEvent columns of a data-parallel job: 20 ms compute (3% noise), the
    ranks waiting for the slowest; ``slow``: rank -> compute factor; ``every``: all ranks'."""
    rng = np.random.default_rng(seed + steps.start)
    out = []
    for step in steps:
        compute = 20e6 * every * (1 + 0.03 * rng.standard_normal(ranks))
        for rank, factor in (slow or {}).items():
            compute[rank] *= factor
        busy = compute + 2e6
        wait = busy.max() - busy + 1e6
        out.append(
            {
                "rank": list(range(ranks)),
                "step": [step] * ranks,
                "duration_ns": (busy + wait).astype(int).tolist(),
                "compute_ns": compute.astype(int).tolist(),
                "cpu_wait_ns": [100_000] * ranks,
                "data_wait_ns": [2_000_000] * ranks,
                "checkpoint_ns": [0] * ranks,
                "collective_wait_ns": wait.astype(int).tolist(),
            }
        )
    return out


def feed(screen: StepScreen, batches: list[dict[str, list]]) -> None:
    for cols in batches:
        screen.observe("step", cols)


def based(cfg: ScreenConfig | None = None, cost_s: float = 5.0) -> tuple[StepScreen, Clock]:
    """A screen that saw 40 clean steps and a full pass of ``cost_s`` over them."""
    clock = Clock()
    screen = StepScreen(cfg, clock)
    feed(screen, job())
    screen.mark(screen.take())
    screen.rebase(cost_s, (), None)
    return screen, clock


def test_a_small_job_has_every_pass_full() -> None:
    screen, _ = based(cost_s=0.05)
    feed(screen, job(steps=range(40, 60)))
    verdict = screen.decide(screen.take())
    assert verdict.full and "no screen" in verdict.reason


def test_no_full_pass_yet_is_a_full_pass() -> None:
    screen = StepScreen(None, Clock())
    feed(screen, job())
    assert screen.decide(screen.take()).full


def test_steady_steps_keep_the_findings() -> None:
    screen, clock = based()
    for start in range(40, 200, 20):  # eight passes, 20 steps each, 3 s apart (24 s < 30 s)
        clock.now += 3
        feed(screen, job(steps=range(start, start + 20)))
        verdict = screen.decide(screen.take())
        assert not verdict.full, verdict.reason


def test_a_rank_that_slows_down_makes_the_next_pass_full_and_names_it() -> None:
    screen, clock = based()
    feed(screen, job(steps=range(40, 50)))
    assert not screen.decide(screen.take()).full
    clock.now += 5
    feed(screen, job(steps=range(50, 60), slow={5: 1.3}))
    verdict = screen.decide(screen.take())
    assert verdict.full and verdict.reason == "ranks newly outlying: 5"


def test_a_rank_the_last_full_pass_named_stays_slow_without_a_full_pass() -> None:
    clock = Clock()
    screen = StepScreen(None, clock)
    feed(screen, job(slow={5: 1.3}))
    screen.mark(screen.take())
    screen.rebase(5.0, (5,), None)
    clock.now += 5
    feed(screen, job(steps=range(40, 60), slow={5: 1.3}))
    assert not screen.decide(screen.take()).full
    # ... but another one is news
    clock.now += 5
    feed(screen, job(steps=range(60, 80), slow={5: 1.3, 9: 1.3}))
    assert screen.decide(screen.take()).reason == "ranks newly outlying: 9"


def test_the_whole_job_slower_is_news_though_no_rank_stands_out() -> None:
    screen, clock = based()
    clock.now += 5
    feed(screen, job(steps=range(40, 60), every=1.25))
    verdict = screen.decide(screen.take())
    assert verdict.full and verdict.reason.startswith("job step")


def test_an_event_that_is_not_telemetry_makes_a_full_pass() -> None:
    screen, _ = based()
    feed(screen, job(steps=range(40, 50)))
    screen.observe("gpu", {"rank": [0]})  # telemetry: no news
    assert not screen.decide(screen.take()).full
    screen.observe("hang", {"rank": [3]})
    verdict = screen.decide(screen.take())
    assert verdict.full and verdict.reason == "new events: hang"
    screen.rebase(5.0, (), None)
    assert not screen.decide(screen.take()).full  # the full pass read it


def test_a_full_pass_at_least_every_so_often() -> None:
    screen, clock = based(cost_s=10.0)  # 10 s of CPU at 20% of a core: every 40 s at most
    clock.now += 39
    assert not screen.decide(screen.take()).full
    clock.now += 2
    verdict = screen.decide(screen.take())
    assert verdict.full and "last full pass 41 s ago" in verdict.reason


def test_a_rank_that_stops_reporting_makes_a_full_pass() -> None:
    screen, clock = based()
    clock.now += 5
    batches = job(steps=range(40, 50))
    for cols in batches:  # rank 15 stops
        for name in cols:
            cols[name] = cols[name][:15]
    feed(screen, batches)
    assert not screen.decide(screen.take()).full  # its rows may still come
    clock.now += 11  # the steps it never reported close after close_after_s
    verdict = screen.decide(screen.take())
    assert verdict.full and verdict.reason == "ranks stopped reporting: 15"


def test_a_hosts_rows_that_come_a_pass_later_join_their_step() -> None:
    # daemons ship at their own pace: half of the ranks' rows of steps 40-49 come first
    screen, clock = based()
    batches = job(steps=range(40, 50), slow={12: 1.3})
    first = [{k: v[:8] for k, v in b.items()} for b in batches]
    second = [{k: v[8:] for k, v in b.items()} for b in batches]
    feed(screen, first)
    clock.now += 2
    assert not screen.decide(screen.take()).full  # incomplete steps wait for their rows
    feed(screen, second + job(steps=range(50, 51), slow={12: 1.3}))
    clock.now += 2
    assert screen.decide(screen.take()).reason == "ranks newly outlying: 12"


def test_ranks_are_compared_within_their_work_class() -> None:
    # a pipeline: ranks 8-15 (the last stage) compute 30% longer, by layout
    clock = Clock()
    screen = StepScreen(None, clock)
    layout = {r: int(r >= 8) for r in range(16)}
    slow = {r: 1.3 for r in range(8, 16)}
    feed(screen, job(slow=slow))
    screen.mark(screen.take())
    screen.rebase(5.0, (), layout)
    clock.now += 5
    feed(screen, job(steps=range(40, 60), slow=slow))
    assert not screen.decide(screen.take()).full
    clock.now += 5
    feed(screen, job(steps=range(60, 80), slow={**slow, 3: 1.3}))
    assert screen.decide(screen.take()).reason == "ranks newly outlying: 3"


def test_rows_beyond_the_bound_are_dropped_counted_and_make_a_full_pass() -> None:
    screen, _ = based(ScreenConfig(max_pending_rows=100))
    before = screen.num_dropped_rows
    feed(screen, job(steps=range(40, 60)))  # 320 rows
    assert screen.num_dropped_rows - before == 224
    verdict = screen.decide(screen.take())
    assert verdict.full and "dropped" in verdict.reason


def test_rows_it_cannot_read_leave_the_decision_to_a_full_pass() -> None:
    screen, _ = based()
    screen.observe("step", {"rank": [0, 1], "step": ["x", None]})  # never raises
    screen.observe("step", {"rank": [0]})  # columns missing
    assert screen.decide(screen.take()).full


def _ingest(core: AnalyzerCore, events: list[schema.Event]) -> None:
    core.ingest(codec.batch_to_proto(events, sender="test", sent_ns=1))


def test_the_analyzers_live_pass_keeps_its_findings_until_a_rank_slows(tmp_path: Path) -> None:
    events = Scenario(slow_ranks=(2,), onset_step=60, severity=0.3, steps=100).events()

    def upto(lo: int, hi: int) -> list[schema.Event]:
        return [e for e in events if lo <= e.step < hi]

    core = AnalyzerCore(RunStore.create(tmp_path / "run"), screen=ScreenConfig(screen_above_s=0))
    try:
        _ingest(core, upto(-(1 << 30), 40))
        first = core.live_triage()
        assert core.num_triage_passes == 1 and not first.findings
        _ingest(core, upto(40, 56))
        assert core.live_triage() is first  # nothing new: the same result, no detector run
        assert (core.num_triage_passes, core.num_screened_passes) == (1, 1)
        _ingest(core, upto(56, 100))
        later = core.live_triage()
        assert core.last_verdict is not None and core.last_verdict.reason == (
            "ranks newly outlying: 2"
        )
        assert core.num_triage_passes == 2
        assert [(f.cause, f.ranks) for f in later.findings] == [("node", (2,))]
    finally:
        core.close()


def test_the_steps_left_open_keep_their_rows_and_nothing_else() -> None:
    """A pass absorbs every pending row; the newest step stays open, and what the screen keeps
    of it is that step's rows, not the batches they came in (a 131,072-rank window's chunk of
    the newest step was a view of every pending row: 128 MB held until the next pass)."""
    screen = StepScreen(ScreenConfig(), Clock())
    ranks = 64
    batches = job(ranks=ranks, steps=range(0, 40))
    # one batch holding every step, as a daemon's batch can span several
    merged = {name: [v for cols in batches for v in cols[name]] for name in FIELDS}
    feed(screen, [merged])
    screen.mark(screen.take())
    assert list(screen._open) == [39]  # the newest step waits for a later one
    held = screen._open[39]
    assert sum(len(c) for c in held) == ranks
    for chunk in held:
        owner = chunk if chunk.base is None else chunk.base
        assert owner.nbytes == chunk.nbytes  # not a window onto all 40 steps' rows


def test_the_delay_met_making_a_batch_is_not_taken_off_compute() -> None:
    # schema 1.18: of a step's 30 ms of run-queue delay, 20 ms came while its batch was made
    # (in data_wait_ns, not in compute_ns): compute is 40 - 10 ms, not 40 - 30; a sender before
    # 1.18 (no column) takes it all off, as before
    cols = {"rank": [0], "step": [3], "duration_ns": [80_000_000], "compute_ns": [40_000_000],
            "cpu_wait_ns": [30_000_000], "data_wait_ns": [25_000_000], "checkpoint_ns": [0],
            "collective_wait_ns": [15_000_000]}  # fmt: skip
    (row,) = _step_rows(cols | {"cpu_wait_data_ns": [20_000_000]})
    assert (row[2], row[3]) == (30.0, 30.0)  # compute_ms, cpu_wait_ms
    (old,) = _step_rows(cols)
    assert old[2] == 10.0
    (clipped,) = _step_rows(cols | {"cpu_wait_data_ns": [90_000_000]})  # at most the whole delay
    assert clipped[2] == 40.0
