"""Node-side collective summaries (diag.daemon.collsum): what ships raw, what is summed and how,
what the node keeps for a fetch and what it loses."""

from __future__ import annotations

import pytest

from diag import schema
from diag.daemon.collsum import (
    CollectiveSummarizer,
    SummaryConfig,
    as_shipped,
    summarize,
    summed_here,
)
from diag.errors import ConfigError

SOURCE = "n1/rank{r}/10{r}"


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def coll(rank: int, step: int, n: int, **kw: object) -> schema.CollectiveEvent:
    """Rank ``rank``'s collective number ``n`` (its seq and seq_id), in ``step``."""
    base: dict[str, object] = dict(
        ts_ns=1_000 + n,
        host="n1",
        rank=rank,
        local_rank=rank,
        job_id="j",
        source=SOURCE.format(r=rank),
        seq=n,
        step=step,
        op="allreduce",
        pg_name="0",
        pg_size=4,
        seq_id=n,
        num_bytes=100,
        enqueue_ns=1_000_000 * step + 10 * n,
        state="completed",
    )
    base.update(kw)
    return schema.CollectiveEvent(**base)  # type: ignore[arg-type]


def step(rank: int, index: int) -> schema.StepEvent:
    return schema.StepEvent(
        ts_ns=2_000,
        host="n1",
        rank=rank,
        local_rank=rank,
        source=SOURCE.format(r=rank),
        seq=10_000 + index,
        step=index,
        start_ns=0,
        end_ns=1,
        duration_ns=1,
    )


def info(world: int) -> schema.RankInfo:
    return schema.RankInfo(
        ts_ns=1, host="n1", rank=0, source=SOURCE.format(r=0), seq=0, pid=100, world_size=world
    )


def test_a_summary_sums_collectives_and_p2p_apart_per_rank_step_and_group() -> None:
    rows = [
        coll(0, 12, 1, duration_ns=40),
        coll(0, 12, 2, duration_ns=60, num_bytes=300),
        coll(0, 12, 3, start_ns=5, end_ns=25),  # a duration from its times
        coll(0, 12, 0, is_p2p=True, p2p_seq_id=4, num_bytes=7, seq_id=-1),
        coll(0, 12, 9, pg_name="1", num_bytes=50),
        coll(0, 13, 4),
    ]
    out = summarize(rows)
    assert [(s.rank, s.step, s.pg_name) for s in out] == [(0, 12, "0"), (0, 12, "1"), (0, 13, "0")]
    s = out[0]
    assert (s.num_collectives, s.num_bytes, s.num_p2p, s.p2p_bytes) == (3, 500, 1, 7)
    assert (s.num_timed, s.duration_sum_ns, s.duration_max_ns) == (3, 120, 60)
    assert (s.first_seq_id, s.last_seq_id) == (1, 3)
    enq = [12_000_000 + 10, 12_000_000 + 20, 12_000_000 + 30]
    assert (s.first_enqueue_ns, s.last_enqueue_ns, s.mean_enqueue_ns) == (
        enq[0],
        enq[2],
        sum(enq) // 3,
    )
    assert (s.host, s.job_id, s.local_rank, s.ts_ns) == ("n1", "j", 0, 1_003)
    assert out[2].num_timed == 0 and out[2].duration_sum_ns == 0  # gloo: no durations


def test_collectives_wait_for_their_step_and_early_steps_ship_raw() -> None:
    sm = CollectiveSummarizer(SummaryConfig(mode="summary", raw_steps=2), clock=Clock())
    batch: list[schema.Event] = [coll(0, 1, 1), coll(0, 2, 2), coll(0, 2, 3), coll(0, 3, 4)]
    held, due = sm.take(batch)
    assert held == [1, 2, 3] and due == []  # step 1 < raw_steps ships raw
    held, due = sm.take([step(0, 2)])
    assert held == [] and [(s.step, s.num_collectives) for s in due] == [(2, 2)]
    held, due = sm.take([coll(0, 4, 5), step(0, 4)])  # a later step ends: 3 and 4 are due
    assert held == [0] and [(s.step, s.num_collectives) for s in due] == [(3, 1), (4, 1)]
    assert sm.stats().num_summarized == 4 and sm.stats().num_summaries == 3


def test_not_completed_collectives_always_ship_raw() -> None:
    sm = CollectiveSummarizer(SummaryConfig(mode="summary", raw_steps=0), clock=Clock())
    held, _ = sm.take(
        [coll(0, 5, 1, state="scheduled"), coll(0, 5, 2, state="started"), coll(0, 5, 3)]
    )
    assert held == [2]


def test_auto_summarizes_only_a_large_job_and_raw_ships_everything() -> None:
    auto = CollectiveSummarizer(SummaryConfig(mode="auto", min_world=8, raw_steps=0), clock=Clock())
    assert auto.take([info(4), coll(0, 5, 1)])[0] == []
    assert not auto.active
    assert auto.take([info(8), coll(0, 5, 2)])[0] == [1]
    assert auto.active
    raw = CollectiveSummarizer(SummaryConfig(mode="raw", raw_steps=0), clock=Clock())
    assert raw.take([info(100_000), coll(0, 5, 1), step(0, 5)]) == ([], [])


def test_rows_whose_step_never_ends_are_summed_after_the_wait_and_at_stop() -> None:
    clock = Clock()
    sm = CollectiveSummarizer(SummaryConfig(mode="summary", raw_steps=0, max_pending_s=5), clock)
    sm.take([coll(0, 7, 1)])
    clock.t = 2.0
    sm.take([coll(1, 7, 1)])
    assert sm.expire() == []
    clock.t = 5.5
    assert [s.rank for s in sm.expire()] == [0]
    assert [s.rank for s in sm.expire(everything=True)] == [1]
    assert sm.expire(everything=True) == []


def _three_steps(sm: CollectiveSummarizer) -> None:
    for s in range(3):
        sm.take([coll(0, s, 2 * s), coll(1, s, 2 * s + 1), step(0, s), step(1, s)])


def test_a_fetch_returns_kept_rows_once_and_eviction_is_counted() -> None:
    clock = Clock()
    roomy = CollectiveSummarizer(SummaryConfig(mode="summary", raw_steps=0), clock)
    _three_steps(roomy)
    assert roomy.stats().num_retained == 6 and roomy.stats().num_evicted == 0
    full = roomy.stats().retained_bytes
    assert 6 * 50 < full < 6 * 400  # encoded: a few hundred bytes a row at most
    # one byte short of holding all six: the oldest (rank 0, step 0) leaves, unfetched
    cfg = SummaryConfig(mode="summary", raw_steps=0, retain_s=100, retain_max_bytes=full - 1)
    sm = CollectiveSummarizer(cfg, clock)
    _three_steps(sm)
    assert sm.stats().num_retained == 5 and sm.stats().num_evicted == 1
    got = sm.fetch([1], 1, 2)
    assert [(e.rank, e.step) for e in got] == [(1, 1), (1, 2)]
    assert got == [coll(1, 1, 3), coll(1, 2, 5)]  # exactly as the hook sent them
    assert sm.fetch([1], 1, 2) == []  # nothing twice
    assert [(e.rank, e.step) for e in sm.fetch([], 0, 2)] == [(1, 0), (0, 1), (0, 2)]
    clock.t = 200.0  # past retain_s: the rest ages out; the fetched ones count as no loss
    sm.expire()
    assert sm.stats().num_retained == 0 and sm.stats().retained_bytes == 0
    assert sm.stats().num_evicted == 1 and sm.stats().num_fetched == 5


@pytest.mark.parametrize(
    "kw",
    [
        {"mode": "sometimes"},
        {"min_world": 0},
        {"raw_steps": -1},
        {"retain_s": -1.0},
        {"max_pending_s": 0.0},
        {"retain_max_bytes": -5},
    ],
)
def test_bad_settings_are_one_line_errors(kw: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        SummaryConfig(**kw)  # type: ignore[arg-type]


def test_as_shipped_sums_what_a_daemon_sums_and_numbers_each_hosts_summaries() -> None:
    other = coll(1, 12, 3, host="n2", source="n2/rank1/101")
    events: list[schema.Event] = [
        coll(0, 9, 1),  # an early step: raw
        coll(0, 12, 2),
        coll(0, 12, 4, state="started"),  # in flight: raw
        other,
        step(0, 12),
    ]
    shipped = as_shipped(events, raw_steps=10)
    assert [type(e).__name__ for e in shipped] == [
        "CollectiveEvent", "CollectiveEvent", "StepEvent", "CollectiveSummary", "CollectiveSummary",
    ]  # fmt: skip
    sums = [e for e in shipped if isinstance(e, schema.CollectiveSummary)]
    assert [(s.source, s.seq, s.rank) for s in sums] == [
        ("n1/daemon/1", 0, 0),
        ("n2/daemon/1", 0, 1),
    ]
    assert summed_here(events[1], 10) and not summed_here(events[0], 10)
    assert not summed_here(events[2], 10) and not summed_here(events[4], 10)
