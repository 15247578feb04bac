"""The daemon's rank watch: vanished rank processes, and py-spy stacks on a hang (a real py-spy on
a real process: tests/integration/test_daemon_process.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from diag import schema
from diag.daemon.collectors.ranks import RankWatch, pyspy_threads


def _stat(root: Path, pid: int, *, state: str = "S", start: int = 500) -> None:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    rest = [state, *["0"] * 18, str(start), *["0"] * 10]
    (root / str(pid) / "stat").write_text(f"{pid} (py thon) " + " ".join(rest) + "\n")


PYSPY_JSON = json.dumps(
    [
        {
            "pid": 41, "thread_id": 1401, "thread_name": "MainThread", "os_thread_id": 41,
            "frames": [
                {"name": "pthread_cond_wait", "filename": "/lib/libc.so.6",
                 "module": "/lib/libc.so.6", "short_filename": "libc.so.6", "line": 0},
                {"name": "barrier", "filename": "/site/torch/distributed/distributed_c10d.py",
                 "module": None, "short_filename": "torch/distributed/distributed_c10d.py",
                 "line": 5356},
                {"name": "<module>", "filename": "/job/train.py", "module": None,
                 "short_filename": "train.py", "line": 21},
            ],
        },
        {"pid": 41, "thread_id": 1402, "thread_name": None, "os_thread_id": 43, "frames": []},
    ]
)  # fmt: skip


class FakeRun:
    def __init__(self, *results: tuple[int, str, str]) -> None:
        self.results = list(results)
        self.calls: list[list[str]] = []

    def __call__(self, cmd: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
        self.calls.append(list(cmd))
        return self.results.pop(0)


def test_pyspy_json_becomes_stack_payloads_innermost_first() -> None:
    main, other = pyspy_threads(PYSPY_JSON, 41)
    assert main["is_main"] and main["thread_name"] == "MainThread" and main["num_frames"] == 3
    assert main["frames"].splitlines() == [
        "libc.so.6:0 pthread_cond_wait",
        "/site/torch/distributed/distributed_c10d.py:5356 barrier",
        "/job/train.py:21 <module>",
    ]
    assert not other["is_main"] and other["thread_id"] == 43 and other["frames"] == ""


def test_a_vanished_or_zombie_rank_is_reported_once(tmp_path: Path) -> None:
    _stat(tmp_path, 41)
    _stat(tmp_path, 42)
    _stat(tmp_path, 43)
    watch = RankWatch(proc_root=tmp_path)
    for pid, rank in ((41, 0), (42, 1), (43, 2)):
        watch.track(pid, rank, rank)
    watch.track(99, 5, 5)  # already gone: not tracked
    assert list(watch.collect(1)) == [] and watch.tracked_pids == [41, 42, 43]
    (tmp_path / "41" / "stat").unlink()
    _stat(tmp_path, 42, state="Z")
    _stat(tmp_path, 43, start=900)  # the pid was reused by another process
    exits = list(watch.collect(2))
    assert [(e.rank, e.pid, e.observer, e.exit_code) for e in exits] == [
        (0, 41, "daemon", None), (1, 42, "daemon", None), (2, 43, "daemon", None),
    ]  # fmt: skip
    assert all(isinstance(e, schema.RankExit) and e.ts_ns == 2 for e in exits)
    assert list(watch.collect(3)) == []


def test_a_hang_dumps_every_rank_with_native_frames_once_per_cooldown(tmp_path: Path) -> None:
    _stat(tmp_path, 41)
    _stat(tmp_path, 42)
    run = FakeRun((0, PYSPY_JSON, ""), (1, "", "native unwinding unsupported"), (0, "[]", ""))
    watch = RankWatch(proc_root=tmp_path, stack_tool="/bin/py-spy", run=run, clock=lambda: 0.0)
    watch.track(41, 0, 0)
    watch.track(42, 1, 1)
    watch.on_hang(1)
    watch.close()  # waits for the background dumps
    watch.on_hang(0)  # within the cooldown: nothing more
    watch.close()
    assert run.calls == [
        ["/bin/py-spy", "dump", "--pid", "41", "--json", "--native"],
        ["/bin/py-spy", "dump", "--pid", "42", "--json", "--native"],
        ["/bin/py-spy", "dump", "--pid", "42", "--json"],  # fell back to Python frames
    ]
    stacks = list(watch.collect(5))
    assert [(s.rank, s.origin, s.reason, s.is_main) for s in stacks] == [
        (0, "py-spy", "hang", True), (0, "py-spy", "hang", False),
    ]  # fmt: skip


def test_without_py_spy_one_note_and_no_dumps(tmp_path: Path) -> None:
    _stat(tmp_path, 41)
    watch = RankWatch(proc_root=tmp_path, stack_tool=None, missing_note="py-spy not found")
    watch.track(41, 0, 0)
    watch.on_hang(0)
    watch.on_hang(0)
    notes = list(watch.collect(1))
    assert len(notes) == 1 and isinstance(notes[0], schema.CollectorError)
    assert notes[0].collector == "ranks" and not notes[0].unavailable


def test_a_failing_py_spy_is_one_note(tmp_path: Path) -> None:
    _stat(tmp_path, 41)
    run = FakeRun((1, "", "Permission denied"), (1, "", "Permission denied (os error 1)"))
    watch = RankWatch(proc_root=tmp_path, stack_tool="py-spy", run=run)
    watch.track(41, 0, 0)
    watch.dump_now([41])
    notes = list(watch.collect(1))
    assert len(notes) == 1 and "Permission denied" in notes[0].message  # type: ignore[attr-defined]
