"""A diag run that hung: its own stored Flight Recorder entries stand in for dumps."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.cli.render.html import render
from diag.cli.render.triage_html import report_data
from diag.diagnose.triage import triage_run_dir
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source


def _collective(src: Source, seq: int, state: str) -> schema.CollectiveEvent:
    return schema.CollectiveEvent(
        **src.env(T0 + seq * MS, step=seq),
        op="allreduce",
        pg_name="0",
        pg_desc="default_pg",
        pg_size=2,
        seq_id=seq,
        num_bytes=4096,
        dtype="Float",
        enqueue_ns=T0 + seq * MS,
        state=state,
        origin="fr",
    )


def test_hung_run_names_the_rank_that_never_issued_the_collective(tmp_path: Path) -> None:
    r0, r1 = Source(rank=0), Source(rank=1)
    events = [ev for s in range(1, 5) for ev in (r0.step(s), r1.step(s))]
    events += [_collective(src, s, "completed") for s in range(1, 5) for src in (r0, r1)]
    events.append(_collective(r0, 5, "scheduled"))  # rank 1 never issued seq 5
    # the daemon kept sampling the host for a minute after the last step: the job hung there
    daemon = Source(pid=7)
    events += [schema.HostSample(**daemon.env(T0 + i * 1000 * MS), num_cpus=2) for i in range(60)]
    store = RunStore.create(tmp_path)
    store.append(events)
    store.flush()
    result, report = triage_run_dir(tmp_path)
    assert report is not None
    hang = next(f for f in result.findings if f.symptom == "hang")
    assert hang.ranks == (1,) and "never issued allreduce seq 5" in hang.summary
    out = result.to_json()
    assert out["run"]["remains"]["num_dumps"] == 2 and "problems" in out
    page = render(report_data(tmp_path, result, report))
    assert "rank 1 (culprit)" in page and "<svg" in page
