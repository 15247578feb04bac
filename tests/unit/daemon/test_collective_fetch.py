"""Node-side summaries end to end: a real analyzer (``serve`` on 127.0.0.1:0), a real daemon in
summary mode and a fake hook. The analyzer stores one summary per rank, step and group for the
summed steps and the raw rows of the early ones; a fetch through the control board brings the
kept raw rows of the asked ranks and steps, once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.daemon import Daemon
from tests.fakes.daemon_doubles import (
    AnalyzerServer,
    FakeHook,
    RecordingAnalyzer,
    RunningDaemon,
    ServedAnalyzer,
    wait_for,
)
from tests.fakes.scrape import scrape

RAW_STEPS = 3
STEPS = 8
PER_STEP = 5  # collectives per rank and step


@pytest.fixture
def analyzer(tmp_path: Path) -> Iterator[ServedAnalyzer]:
    a = ServedAnalyzer(tmp_path / "run")
    yield a
    a.stop()


def _daemon(tmp_path: Path, target: str, mode: str, metrics_port: int = -1) -> RunningDaemon:
    """A real daemon of host node1 for the analyzer at ``target``, summing from RAW_STEPS."""
    cfg = DaemonConfig(
        listen_sock=str(tmp_path / "d.sock"),
        analyzer=target,
        spool_dir=str(tmp_path / "spool"),
        host="node1",
        gpu_backend="none",
        flush_interval_s=0.05,
        rpc_timeout_s=2.0,
        collectives=mode,
        collectives_raw_steps=RAW_STEPS,
        metrics_port=metrics_port,
    )
    return RunningDaemon(Daemon(cfg, final_flush_s=2.0))


def _rank_events(rank: int) -> list[schema.Event]:
    source = f"node1/rank{rank}/{100 + rank}"
    env = dict(host="node1", rank=rank, local_rank=rank, job_id="j", source=source)
    out: list[schema.Event] = [
        schema.RankInfo(ts_ns=1, seq=0, pid=100 + rank, world_size=2, **env)  # type: ignore[arg-type]
    ]
    for s in range(STEPS):
        for k in range(PER_STEP):
            n = s * PER_STEP + k
            out.append(
                schema.CollectiveEvent(
                    ts_ns=10 + n, seq=len(out), step=s, op="allreduce", pg_name="0", pg_size=2,
                    seq_id=n, num_bytes=1 << 20, enqueue_ns=1_000 * n + rank, duration_ns=500,
                    state="completed", **env,  # type: ignore[arg-type]
                )
            )  # fmt: skip
        out.append(
            schema.StepEvent(
                ts_ns=10 + s,
                seq=len(out),
                step=s,
                start_ns=0,
                end_ns=1,
                duration_ns=1,
                **env,  # type: ignore[arg-type]
            )
        )
    return out


def _frame(analyzer: ServedAnalyzer, kind: str) -> pd.DataFrame:
    analyzer.core.flush()
    store = analyzer.core.store
    return store.frame(kind) if kind in store.kinds() else pd.DataFrame()


def test_summary_mode_ships_summaries_and_a_fetch_brings_the_raw_rows_back(
    tmp_path: Path, analyzer: ServedAnalyzer
) -> None:
    running = _daemon(tmp_path, analyzer.target, "summary", metrics_port=0)
    # it sums only for an analyzer that said it reads summaries (its first reply)
    wait_for(lambda: running.daemon.client.analyzer_version != "", what="the analyzer's version")
    hook = FakeHook(tmp_path / "d.sock")
    for rank in (0, 1):
        hook.send(_rank_events(rank))
    summed = STEPS - RAW_STEPS
    wait_for(lambda: len(_frame(analyzer, "collective_summary")) == 2 * summed, what="summaries")
    wait_for(lambda: len(_frame(analyzer, "step")) == 2 * STEPS, what="steps")
    raw = _frame(analyzer, "collective")
    assert sorted(raw["step"].unique()) == list(range(RAW_STEPS))  # the early steps only
    assert len(raw) == 2 * RAW_STEPS * PER_STEP
    sums = _frame(analyzer, "collective_summary").sort_values(["rank", "step"])
    assert sums["step"].tolist() == list(range(RAW_STEPS, STEPS)) * 2
    assert set(sums["num_collectives"]) == {PER_STEP}
    assert set(sums["num_bytes"]) == {PER_STEP << 20}
    assert set(sums["duration_sum_ns"]) == {PER_STEP * 500}
    assert sums["source"].str.contains("/daemon/").all() and set(sums["job_id"]) == {"j"}

    analyzer.core.control.request_fetch(5, 6, ranks=[1])
    wait_for(lambda: len(_frame(analyzer, "collective")) == len(raw) + 2 * PER_STEP, what="fetch")
    got = _frame(analyzer, "collective")
    fetched = got[got["source"].str.contains("/daemon/")]
    assert sorted(set(zip(fetched["rank"], fetched["step"], strict=True))) == [(1, 5), (1, 6)]
    assert sorted(fetched["seq_id"]) == list(range(5 * PER_STEP, 7 * PER_STEP))

    analyzer.core.control.request_fetch(5, 7, ranks=[1])  # only step 7 is new
    wait_for(lambda: len(_frame(analyzer, "collective")) == len(raw) + 3 * PER_STEP, what="again")
    server = running.daemon.metrics_server
    assert server is not None
    samples = scrape(server.url)
    ours = {k: series for k, series in samples.items() if k.startswith("diag_daemon_")}
    assert all(series[0][0] == {"Hostname": "node1"} for series in ours.values())
    got = {k: v for k, [(_, v)] in ours.items()}
    assert 0 < got.pop("diag_daemon_collectives_retained_bytes") < 400 * 2 * summed * PER_STEP
    assert got == {
        "diag_daemon_collectives_summarizing": 1.0,
        "diag_daemon_collectives_retained": 2 * summed * PER_STEP,
        "diag_daemon_collectives_summarized_total": 2 * summed * PER_STEP,
        "diag_daemon_collective_summaries_total": 2 * summed,
        "diag_daemon_collectives_fetched_total": 3 * PER_STEP,
        "diag_daemon_collectives_evicted_total": 0.0,
    }
    hook.close()
    stats = running.stop()
    assert stats.num_collectives_summarized == 2 * summed * PER_STEP
    assert stats.num_collective_summaries == 2 * summed
    assert stats.num_collectives_fetched == 3 * PER_STEP and stats.num_collectives_evicted == 0


def test_an_analyzer_older_than_summaries_gets_raw_rows(tmp_path: Path) -> None:
    # says schema 1.16: an analyzer of that schema would refuse a summary as an unknown kind
    old = AnalyzerServer(RecordingAnalyzer(version="1.16"))
    try:
        running = _daemon(tmp_path, old.target, "summary")
        wait_for(lambda: running.daemon.client.analyzer_version == "1.16", what="its version")
        hook = FakeHook(tmp_path / "d.sock")
        hook.send(_rank_events(0))
        rec = old.servicer
        wait_for(lambda: len(rec.of_kind(schema.CollectiveEvent)) == STEPS * PER_STEP, what="rows")
        hook.close()
        stats = running.stop()
        assert rec.of_kind(schema.CollectiveSummary) == []
        assert stats.num_collectives_summarized == 0 and stats.num_batches_rejected == 0
    finally:
        old.stop()


def test_auto_mode_ships_a_small_job_raw(tmp_path: Path, analyzer: ServedAnalyzer) -> None:
    running = _daemon(tmp_path, analyzer.target, "auto")
    hook = FakeHook(tmp_path / "d.sock")
    hook.send(_rank_events(0))
    wait_for(lambda: len(_frame(analyzer, "collective")) == STEPS * PER_STEP, what="raw rows")
    hook.close()
    stats = running.stop()
    assert "collective_summary" not in analyzer.core.store.kinds()
    assert stats.num_collectives_summarized == 0
