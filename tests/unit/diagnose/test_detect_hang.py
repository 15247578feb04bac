"""Hang and crash scenarios through a real RunStore, the hang detector and the whole registry."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from diag import schema
from diag.diagnose.detectors.hang_evidence import breaks_pattern, rank_states, stack_cause
from diag.store.run_store import RunStore
from tests.fakes.events import MS
from tests.fakes.hang_runs import DATA_STACK, SAVE_STACK, STALL, WAIT_STACK, Run, S


def test_rank_stuck_in_its_data_loader(tmp_path: Path) -> None:
    run = Run()
    run.report(0, done=11, in_flight=("all_reduce", "[[1056]]"))
    run.report(1, done=11, in_flight=None, at=100 * MS)
    run.stack(0, WAIT_STACK)
    run.stack(1, DATA_STACK)
    (f,) = run.findings(tmp_path)
    assert (f.symptom, f.cause, f.ranks, f.onset_step) == ("hang", "data", (1,), 6)
    assert "rank 1 never joined all_reduce (group 0, seq 12) that rank 0 waits in" in f.summary
    assert "stuck in data loading at hang_job.py:41 Stuck.__getitem__" in f.summary
    assert f.confidence == 0.9 and f.severity == "critical"
    seqs = {e.subject: (e.value, e.reference) for e in f.evidence if e.metric == "last_seq"}
    assert seqs == {"rank 0": (12, 12), "rank 1": (11, 12)}
    (stack,) = [e for e in f.evidence if e.metric == "stack"]
    assert stack.subject == "rank 1 main thread (python)" and "diag/hook/" not in stack.note
    assert "<- torch/utils/data/_utils/fetch.py:52 _MapDatasetFetcher.fetch <-" in stack.note


def test_a_rank_that_skipped_a_collective_breaks_its_own_pattern(tmp_path: Path) -> None:
    run = Run()
    run.report(0, done=9, in_flight=("barrier", "[]"))  # seq 10: the barrier rank 1 skipped
    run.report(1, done=9, in_flight=("all_reduce", "[[1056]]"))  # next step's all-reduce
    (f,) = run.findings(tmp_path)
    assert (f.symptom, f.cause, f.ranks) == ("hang", "program", (1,))
    assert "at group 0 seq 10: rank 1 is in all_reduce [[1056]] while rank 0 is in barrier" in (
        f.summary
    )
    assert "rank 1 broke its own per-step pattern: it skipped a collective" in f.summary
    assert f.confidence == 0.8


def test_mismatch_with_a_majority_names_the_minority(tmp_path: Path) -> None:
    run = Run(world=3)
    run.report(0, done=10, in_flight=("barrier", "[]"))
    run.report(1, done=10, in_flight=("all_reduce", "[[1056]]"))
    run.report(2, done=10, in_flight=("barrier", "[]"))
    (f,) = run.findings(tmp_path)
    assert (f.cause, f.ranks, f.confidence) == ("program", (1,), 0.9)


def test_every_rank_in_the_same_collective_is_a_link(tmp_path: Path) -> None:
    run = Run(world=3)
    for r in range(3):
        run.report(r, done=11, in_flight=("all_reduce", "[[1056]]"))
    (f,) = run.findings(tmp_path)
    assert (f.cause, f.ranks, f.confidence) == ("link", (0, 1, 2), 0.6)
    assert "all 3 ranks are inside all_reduce (group 0, seq 12)" in f.summary


def test_rank_stuck_saving_a_checkpoint_seen_by_py_spy(tmp_path: Path) -> None:
    run = Run()
    run.report(0, done=11, in_flight=("all_reduce", "[[1056]]"))
    run.report(1, done=11, in_flight=None)
    run.stack(1, "libc.so.6:0 write\n" + SAVE_STACK, origin="py-spy")
    (f,) = run.findings(tmp_path)
    assert (f.symptom, f.cause, f.ranks) == ("hang", "checkpoint", (1,))
    assert "checkpoint save or load at train.py:12 checkpoint" in f.summary


def test_a_stall_that_resolved_or_ended_cleanly_is_no_finding(tmp_path: Path) -> None:
    run = Run()
    run.report(0, done=11, in_flight=("all_reduce", "[[1056]]"))
    run.report(1, done=11, in_flight=None)
    run.events.append(dataclasses.replace(run.ranks[0].step(50), end_ns=STALL + 20 * S))
    run.final_health(1, at=STALL + 30 * S)
    assert run.findings(tmp_path) == []


def test_a_raised_exception_is_the_crash_and_the_peers_errors_its_echo(tmp_path: Path) -> None:
    run = Run()
    run.exception(1, "RuntimeError", "injected failure at step 6", at=STALL)
    run.exception(0, "RuntimeError", "[pair.cc:553] Connection closed by peer [127.0.0.1]:6061",
                  at=STALL + 20 * MS)  # fmt: skip
    run.exit(1, observer="daemon", at=STALL + 300 * MS)
    run.exit(0, observer="launcher", at=STALL + S, code=1, first=True)
    run.exit(1, observer="launcher", at=STALL + S, code=1)
    (f,) = run.findings(tmp_path)
    assert (f.symptom, f.cause, f.ranks, f.onset_step) == ("crash", "program", (1,), 6)
    assert f.summary.startswith("rank 1 raised RuntimeError: injected failure at step 6 at ")
    assert "hang_job.py:70 main" in f.summary and "1 other rank(s) failed after it" in f.summary
    notes = [e.note for e in f.evidence if e.metric == "exception"]
    assert any(n.startswith("echo of a peer's failure") for n in notes)


def test_a_killed_rank_is_a_node_crash(tmp_path: Path) -> None:
    run = Run()
    run.exception(0, "RuntimeError", "Connection closed by peer [127.0.0.1]:6061", at=STALL)
    run.final_health(0, at=STALL + 50 * MS)
    run.exit(1, observer="daemon", at=STALL + 200 * MS)
    run.exit(0, observer="daemon", at=STALL + 400 * MS)
    assert [(f.cause, f.ranks) for f in run.findings(tmp_path / "live")] == [("node", (1,))]
    run.exit(1, observer="launcher", at=STALL + S, code=-9, first=True)
    run.exit(0, observer="launcher", at=STALL + S, code=1)
    (f,) = run.findings(tmp_path / "final")
    assert (f.symptom, f.cause, f.ranks, f.confidence) == ("crash", "node", (1,), 0.9)
    assert f.summary.startswith("rank 1 (pid 101) was killed by SIGKILL without a Python exc")
    assert f.onset_step == 6 and "in step 6" in f.summary


def test_the_teardown_after_a_hang_keeps_the_hang(tmp_path: Path) -> None:
    run = Run()
    run.report(0, done=11, in_flight=("all_reduce", "[[1056]]"))
    run.report(1, done=11, in_flight=None)
    run.stack(1, DATA_STACK)
    timeout = STALL + 40 * S
    run.exception(0, "RuntimeError", "Timed out waiting 40000ms for recv operation", at=timeout)
    run.final_health(0, at=timeout + 10 * MS)
    run.exit(1, observer="daemon", at=timeout + 200 * MS)
    run.exit(0, observer="launcher", at=timeout + S, code=1, first=True)
    run.exit(1, observer="launcher", at=timeout + S, code=-15)
    (f,) = run.findings(tmp_path)
    assert (f.symptom, f.cause, f.ranks) == ("hang", "data", (1,))
    exits = {e.subject: e.note for e in f.evidence if e.metric == "exit_code"}
    assert exits == {
        "rank 0": "torchrun: exit code 1",
        "rank 1": "torchrun: exit code -15 (SIGTERM)",
    }


def test_stack_causes_and_patterns() -> None:
    assert stack_cause(DATA_STACK.splitlines())[0] == "data"
    assert stack_cause(WAIT_STACK.splitlines())[0] == "collective"
    assert stack_cause(["libtorch_cpu.so:0 c10d::Reducer::finalize_backward"])[0] == "collective"
    assert stack_cause(["/job/x.py:3 spin"]) == ("compute", "/job/x.py:3 spin")
    run = Run()
    run.report(0, done=9, in_flight=("barrier", "[]"))
    run.report(1, done=9, in_flight=("all_reduce", "[[1056]]"))
    store = RunStore.create(Path("/nonexistent-never-written"))
    store.append([e for e in run.events if isinstance(e, schema.HangReport)])
    states = rank_states(store.frame("hang"))
    assert [breaks_pattern(states[r]) for r in (0, 1)] == [False, True]


def test_ranks_gone_from_a_job_that_did_not_fail_are_no_crash(tmp_path: Path) -> None:
    run = Run()
    run.exit(0, observer="daemon", at=STALL)  # final reports lost, no error anywhere
    run.exit(1, observer="daemon", at=STALL)
    assert run.findings(tmp_path) == []


def test_start_up_collectives_do_not_hide_the_pattern() -> None:
    run = Run()
    run.report(1, done=9, in_flight=("all_reduce", "[[1056]]"))
    report = run.events[-1]
    assert isinstance(report, schema.HangReport)
    tail = json.loads(report.fr_tail_json)
    tail[0] |= {"op": "broadcast", "sizes": [[32, 32]]}  # DDP's initial sync
    run.events[-1] = dataclasses.replace(report, fr_tail_json=json.dumps(tail))
    store = RunStore.create(Path("/nonexistent-never-written"))
    store.append([run.events[-1]])
    assert breaks_pattern(rank_states(store.frame("hang"))[1]) is True


def test_a_rank_whose_report_is_on_its_way_is_not_named_silent(tmp_path: Path) -> None:
    """Live triage right after rank 0's report: rank 1 (alive) has not reported yet, as happens
    when reports arrive a second apart. No verdict until the others had time to report; then, if
    rank 1 stays silent, it is named (cause unknown: no stack)."""
    run = Run()
    run.report(0, done=13, in_flight=("barrier", "[]"))
    assert run.findings(tmp_path / "a") == []  # nothing newer than the first report: wait
    run.events.append(
        schema.HookHealth(**run.ranks[0].env(STALL + 10 * S), pid=100, final=False)
    )  # 5 s later, still no report from rank 1
    (f,) = run.findings(tmp_path / "b")
    assert (f.ranks, f.cause) == ((1,), "unknown") and "sent no stall report" in f.summary
    run = Run()
    run.report(0, done=13, in_flight=("barrier", "[]"))
    run.report(1, done=13, in_flight=("all_reduce", "[[1056]]"), at=S // 2)
    (f,) = run.findings(tmp_path / "c")  # both in: decided at once
    assert (f.ranks, f.cause) == ((1,), "program") and "mismatched" in f.summary


def _window(run: Run, rank: int, unsettled: int) -> schema.ProfileWindow:
    t = STALL - 2 * S
    return schema.ProfileWindow(**run.ranks[rank].env(t, 5), window_id="p5", trigger="periodic",
                                start_ns=t, end_ns=t + 10 * MS, duration_ns=10 * MS,
                                settle_ns=100 * MS if unsettled else 0,
                                unsettled=unsettled)  # fmt: skip


def test_a_native_abort_after_an_unsettled_window_names_the_window(tmp_path: Path) -> None:
    """Torch's profiler race (diag.hook.c10d_workers): a window that stopped while a gloo
    worker still held a record is a known cause of the heap corruption that aborts a rank."""
    for unsettled in (1, 0):
        run = Run()
        run.events += [_window(run, 0, 0), _window(run, 1, unsettled)]
        run.exception(0, "RuntimeError", "Connection closed by peer [127.0.0.1]:6061", at=STALL)
        run.exit(1, observer="launcher", at=STALL + S, code=-6, first=True)
        run.exit(0, observer="launcher", at=STALL + S, code=1)
        (f,) = run.findings(tmp_path / str(unsettled))
        assert (f.symptom, f.cause, f.ranks) == ("crash", "program", (1,))
        named = [e for e in f.evidence if e.metric == "profile_window_unsettled"]
        if unsettled:
            (e,) = named
            assert e.subject == "rank 1 window p5" and "torch's profiler race" in e.note
        else:
            assert named == []
