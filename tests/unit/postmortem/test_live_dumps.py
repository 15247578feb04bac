"""A live job's dumps are not a hang: collectives in flight need evidence that progress stopped
(the job failed, its watchdog timed out, its steps stopped) before they are called a hang."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.diagnose.triage import triage_run_dir
from diag.postmortem.analyze import analyze
from diag.postmortem.discover import collect
from diag.postmortem.progress import NO_PROGRESS
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source
from tests.fakes.fr_dumps import dump, entry, write_pickle

GROUPS = {"0": [0, 1, 2, 3]}
S = 1_000_000_000


def _live_dumps(root: Path) -> Path:
    """Dumps of a running 4-rank job, taken rank after rank: every rank has its newest
    all-reduce in flight, rank 3 (dumped first) one behind the others."""
    root.mkdir(parents=True, exist_ok=True)
    for r in range(4):
        last = 40 if r == 3 else 41
        entries = [entry("0", s) for s in range(last - 5, last)]
        write_pickle(
            root / f"_dump_{r}", dump(GROUPS, [*entries, entry("0", last, state="scheduled")])
        )
    return root


def test_dumps_of_a_running_job_are_not_a_hang(tmp_path: Path) -> None:
    report = analyze(collect(_live_dumps(tmp_path)), expect_failure=False)
    assert not [f for f in report.findings if f.symptom == "hang"]
    assert any("in flight on ranks 0, 1, 2, 3" in m for m in report.missing)


def test_the_same_dumps_with_a_watchdog_timeout_are_a_hang(tmp_path: Path) -> None:
    root = _live_dumps(tmp_path)
    (root / "worker.log").write_text(
        "[rank0]:[E1121 10:12:11.512847125 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0"
        "(default_pg) Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, "
        "OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600021 "
        "milliseconds before timing out.\n"
    )
    (hang,) = [f for f in analyze(collect(root), expect_failure=False).findings]
    assert hang.symptom == "hang" and hang.ranks == (3,)
    (stop,) = [e for e in hang.evidence if e.metric == NO_PROGRESS]
    assert "watchdog" in stop.note


def test_remains_of_a_failed_run_still_are(tmp_path: Path) -> None:
    (hang,) = analyze(collect(_live_dumps(tmp_path))).findings  # remains: the run failed
    assert hang.symptom == "hang" and hang.ranks == (3,)
    assert any(e.metric == NO_PROGRESS and "failed" in e.note for e in hang.evidence)


def _run_dir(tmp_path: Path, *, steps_until_s: float, exit_code: int | None) -> Path:
    """A diag run of 2 ranks, stepping every 0.2 s until ``steps_until_s``, the daemon sampling
    the host every second for 70 s; each rank's newest all-reduce in flight at the end."""
    r0, r1, daemon = Source(rank=0), Source(rank=1), Source(pid=7)
    events: list[schema.Event] = []
    num_steps = int(steps_until_s / 0.2)
    for s in range(num_steps):
        for src in (r0, r1):
            ev = src.step(s)
            events.append(ev)
            state = "scheduled" if s == num_steps - 1 else "completed"
            events.append(
                schema.CollectiveEvent(
                    **src.env(ev.start_ns + 90 * MS, step=s),
                    op="allreduce",
                    pg_name="0",
                    pg_size=2,
                    seq_id=s,
                    num_bytes=4096,
                    enqueue_ns=ev.start_ns + 90 * MS,
                    state=state,
                    origin="fr",
                )
            )
    events += [schema.HostSample(**daemon.env(T0 + i * S), num_cpus=2) for i in range(70)]
    if exit_code is not None:
        events.append(schema.RunEvent(**daemon.env(T0 + 70 * S), phase="end", exit_code=exit_code))
    store = RunStore.create(tmp_path)
    store.append(events)
    store.flush()
    return tmp_path


def test_a_detached_healthy_job_is_not_a_hang(tmp_path: Path) -> None:
    # diag attach: the job's end is unknown and it stepped until the recording ended
    result, _ = triage_run_dir(_run_dir(tmp_path, steps_until_s=69.8, exit_code=None))
    assert not [f for f in result.findings if f.symptom == "hang"]


def test_steps_that_stopped_long_before_the_end_are_a_hang(tmp_path: Path) -> None:
    result, _ = triage_run_dir(_run_dir(tmp_path, steps_until_s=20, exit_code=None))
    (hang,) = [f for f in result.findings if f.symptom == "hang"]
    (stop,) = [e for e in hang.evidence if e.metric == NO_PROGRESS]
    assert stop.unit == "s" and stop.value > 45 and "no rank finished a step" in stop.note


def test_a_job_that_exited_non_zero_is(tmp_path: Path) -> None:
    result, _ = triage_run_dir(_run_dir(tmp_path, steps_until_s=69.8, exit_code=1))
    assert [f for f in result.findings if f.symptom == "hang"]


def _gloo(e: dict, retired: bool) -> dict:
    """gloo records no CUDA events: its entries say "scheduled" to the end, and only
    ``retired`` tells a finished collective from one in flight."""
    return e | {"state": "scheduled", "time_discovered_completed_ns": None, "retired": retired}


def test_a_gloo_dumps_retired_collectives_are_completed(tmp_path: Path) -> None:
    from diag.flight_recorder import entry_to_collective

    root = tmp_path / "dumps"
    root.mkdir()
    for r in range(4):
        entries = [_gloo(entry("0", s), True) for s in range(30, 35)]
        write_pickle(root / f"_dump_{r}", dump(GROUPS, [*entries, _gloo(entry("0", 35), False)]))
    (d0, *_) = sorted(collect(root).dumps, key=lambda d: d.rank)
    assert [e.state for e in d0.entries] == ["completed"] * 5 + ["scheduled"]
    assert [e.pending for e in d0.entries] == [False] * 5 + [True]
    # the hook's own records of the same entries (what diag's triage page draws for a diag run)
    states = [entry_to_collective(_gloo(entry("0", 30), r), {})["state"] for r in (True, False)]
    assert states == ["completed", "scheduled"]
