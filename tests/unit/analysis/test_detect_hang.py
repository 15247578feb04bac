"""Hang and crash scenarios through a real RunStore, the hang detector and the whole registry."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from analysis_fixtures import MS, T0, Source

from diag import schema
from diag.diagnose.detectors import hang
from diag.diagnose.detectors.hang_evidence import breaks_pattern, rank_states, stack_cause
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.findings import Finding
from diag.store.run_store import RunStore

S = 1_000_000_000
STALL = T0 + 10 * S  # when the last progress was
SITE = "/venv/lib/python3.11/site-packages"
DATA_STACK = "\n".join([
    "/job/hang_job.py:41 Stuck.__getitem__",
    f"{SITE}/torch/utils/data/_utils/fetch.py:52 _MapDatasetFetcher.fetch",
    f"{SITE}/torch/utils/data/dataloader.py:789 _SingleProcessDataLoaderIter._next_data",
    "/repo/diag/hook/patches.py:120 wrapped_next",
    "/job/hang_job.py:90 main",
])  # fmt: skip
WAIT_STACK = "\n".join([
    f"{SITE}/torch/distributed/distributed_c10d.py:3252 all_reduce",
    "/job/hang_job.py:80 main",
])  # fmt: skip
SAVE_STACK = "\n".join([
    f"{SITE}/torch/serialization.py:964 _save",
    f"{SITE}/torch/serialization.py:651 save",
    "/job/train.py:12 checkpoint",
])  # fmt: skip


class Run:
    """A run of ``world`` ranks that did ``steps`` steps of [all_reduce [[1056]], barrier]."""

    def __init__(self, world: int = 2, steps: int = 6) -> None:
        self.ranks = [Source(rank=r, pid=100 + r) for r in range(world)]
        self.daemon = Source(pid=9)
        self.launcher = Source(pid=8)
        self.events: list[schema.Event] = []
        self.steps = steps
        for src in self.ranks:
            self.events.append(schema.RankInfo(**src.env(T0), pid=100 + src.rank, world_size=world))
            self.events += [src.step(s) for s in range(steps)]

    def tail(self, upto: int, *, last: tuple[str, str] | None = None) -> str:
        """The FR tail: seqs 1..upto done (odd: all_reduce, even: barrier), then ``last``."""
        out = [
            {"pg": "0", "seq": s, "op": "all_reduce" if s % 2 else "barrier",
             "sizes": [[1056]] if s % 2 else [], "dtype": "Float", "done": True,
             "enqueue_ns": T0 + s * MS}
            for s in range(1, upto + 1)
        ]  # fmt: skip
        if last is not None:
            out.append({"pg": "0", "seq": upto + 1, "op": last[0], "sizes": json.loads(last[1]),
                        "dtype": "", "done": False, "enqueue_ns": T0 + upto * MS})  # fmt: skip
        return json.dumps(out)

    def report(self, rank: int, *, done: int, in_flight: tuple[str, str] | None, at: int = 0):
        src = self.ranks[rank]
        fr = {
            "pg_status_json": json.dumps({"0": [done + (in_flight is not None), done]}),
            "fr_tail_json": self.tail(done, last=in_flight),
            "last_enqueued_seq": done + (in_flight is not None),
            "last_completed_seq": done,
        }
        if in_flight is not None:
            fr |= {"pg_name": "0", "seq_id": done + 1, "op": in_flight[0],
                   "input_sizes": in_flight[1]}  # fmt: skip
        self.events.append(schema.HangReport(
            **src.env(STALL + 5 * S + at, self.steps), pid=100 + rank, stalled_since_ns=STALL,
            stall_ns=5 * S + at, threshold_ns=5 * S, last_step=self.steps - 1, **fr,
        ))  # fmt: skip

    def stack(self, rank: int, frames: str, *, origin: str = "python", at: int = 0) -> None:
        src = self.ranks[rank] if origin == "python" else self.daemon
        env = src.env(STALL + 5 * S + at, self.steps) | {"rank": rank}
        self.events.append(schema.StackDump(**env, pid=100 + rank, reason="hang", origin=origin,
                                            is_main=True, frames=frames,
                                            num_frames=len(frames.splitlines())))  # fmt: skip

    def exception(self, rank: int, exc_type: str, message: str, *, at: int) -> None:
        self.events.append(schema.ExceptionEvent(
            **self.ranks[rank].env(at, self.steps), pid=100 + rank, exc_type=exc_type,
            message=message, frames="/job/hang_job.py:70 main",
        ))  # fmt: skip

    def exit(self, rank: int, *, observer: str, at: int, code: int | None = None,
             first: bool = False) -> None:  # fmt: skip
        src = self.launcher if observer == "launcher" else self.daemon
        self.events.append(schema.RankExit(
            **src.env(at) | {"rank": rank}, pid=100 + rank, observer=observer, exit_code=code,
            signal=-code if code is not None and code < 0 else 0, first_failure=first,
        ))  # fmt: skip

    def final_health(self, rank: int, *, at: int) -> None:
        self.events.append(schema.HookHealth(**self.ranks[rank].env(at), pid=100 + rank,
                                             final=True))  # fmt: skip

    def findings(self, tmp_path: Path) -> list[Finding]:
        store = RunStore.create(tmp_path / "run")
        store.append(self.events)
        store.flush()
        found = [f for f in run_all(Features.from_store(store)) if f.id in ("hang", "crash")]
        assert hang.detect(Features.from_store(store)) == found
        return found


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
