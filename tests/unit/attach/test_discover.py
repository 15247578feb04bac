"""Worker discovery over a fake ``/proc``: agent, ranks, a data-loader child, strangers."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.attach import AttachError
from diag.attach.discover import find_workers, still_running


def _proc(root: Path, pid: int, ppid: int, env: dict[str, str], state: str = "S") -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    rest = [state, str(ppid)] + ["0"] * 17 + [str(1000 + pid)] + ["0"] * 5
    (d / "stat").write_text(f"{pid} (python (x)) {' '.join(rest)}\n")
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


def _worker_env(rank: int, run: str = "job-a") -> dict[str, str]:
    return {"RANK": str(rank), "LOCAL_RANK": str(rank), "TORCHELASTIC_RUN_ID": run, "X": "a=b"}


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    _proc(tmp_path, 1, 0, {})
    _proc(tmp_path, 100, 1, {"PATH": "/bin"})  # the torchrun agent
    _proc(tmp_path, 101, 100, _worker_env(1))
    _proc(tmp_path, 102, 100, _worker_env(0))
    _proc(tmp_path, 103, 101, _worker_env(1))  # rank 1's data-loader worker
    _proc(tmp_path, 200, 1, {"PATH": "/bin"})  # another job's agent
    _proc(tmp_path, 201, 200, _worker_env(0, "job-b"))
    _proc(tmp_path, 300, 1, {"HOME": "/root"})  # not a torchrun job
    return tmp_path


def test_agent_pid_finds_its_ranks_not_their_children(proc: Path) -> None:
    workers = find_workers(100, proc_root=proc)
    assert [(w.pid, w.rank, w.local_rank, w.run_id) for w in workers] == [
        (102, 0, 0, "job-a"),
        (101, 1, 1, "job-a"),
    ]
    assert workers[0].start_ticks == 1102


def test_worker_pid_finds_its_siblings(proc: Path) -> None:
    assert [w.pid for w in find_workers(101, proc_root=proc)] == [102, 101]
    assert [w.pid for w in find_workers(201, proc_root=proc)] == [201]


def test_job_id_finds_every_worker_of_that_run(proc: Path) -> None:
    assert [w.pid for w in find_workers(job="job-b", proc_root=proc)] == [201]
    with pytest.raises(AttachError, match="no torchrun worker of job 'nope'"):
        find_workers(job="nope", proc_root=proc)


def test_not_a_torchrun_job_and_missing_pid(proc: Path) -> None:
    with pytest.raises(AttachError, match="pid 300 is not a torchrun job"):
        find_workers(300, proc_root=proc)
    with pytest.raises(AttachError, match="pid 999: no such process"):
        find_workers(999, proc_root=proc)
    with pytest.raises(AttachError, match="either a PID or --job"):
        find_workers(proc_root=proc)


def test_a_zombie_or_reused_pid_is_not_running(proc: Path) -> None:
    w = find_workers(100, proc_root=proc)[0]
    assert still_running(w, proc)
    stat = proc / str(w.pid) / "stat"
    stat.write_text(stat.read_text().replace(" S ", " Z "))
    assert not still_running(w, proc)
