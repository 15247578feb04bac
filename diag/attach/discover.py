"""The torchrun workers of one job on this node, read from ``/proc`` without their cooperation.

A worker is a process whose environment holds ``LOCAL_RANK`` and ``TORCHELASTIC_RUN_ID`` (torchrun
sets both) and whose parent is not itself a worker: a data-loader worker inherits the environment
of its rank but is not a rank. The job of a PID:

- a worker PID: every worker with its ``TORCHELASTIC_RUN_ID`` under the same torchrun agent (the
  nearest ancestor that is not a worker);
- any other PID (the torchrun agent): the workers among its descendants;
- ``--job RUN_ID``: every worker on this node with that run id.

``/proc`` is passed in (``proc_root``) so tests can point at a fake one; a process that vanishes
while it is read is simply not there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from diag.attach import AttachError

PROC = Path("/proc")


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """One torchrun worker: its pid, ranks, run id, and start time (``/proc/PID/stat`` field 22,
    clock ticks since boot: a reused pid has another one)."""

    pid: int
    rank: int
    local_rank: int
    run_id: str
    start_ticks: int


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    start_ticks: int
    env: dict[str, str]


def read_proc(pid: int, proc_root: Path = PROC) -> ProcInfo | None:
    """``/proc/PID``'s parent, start time and environment; None if the process is gone.

    Raises :class:`AttachError` when the environment exists but may not be read (permission).
    """
    base = proc_root / str(pid)
    try:
        stat = (base / "stat").read_text()
        raw = (base / "environ").read_bytes()
    except PermissionError:
        raise AttachError(f"pid {pid}: permission denied reading /proc/{pid}/environ") from None
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name may hold spaces and parentheses
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return ProcInfo(pid=pid, ppid=int(fields[1]), start_ticks=int(fields[19]), env=env)


def is_worker_env(env: dict[str, str]) -> bool:
    return "LOCAL_RANK" in env and "TORCHELASTIC_RUN_ID" in env


def _all_pids(proc_root: Path) -> Iterator[int]:
    try:
        names = os.listdir(proc_root)
    except OSError:
        return
    for name in names:
        if name.isdigit():
            yield int(name)


def _snapshot(proc_root: Path) -> dict[int, ProcInfo]:
    procs: dict[int, ProcInfo] = {}
    for pid in _all_pids(proc_root):
        try:
            info = read_proc(pid, proc_root)
        except AttachError:  # someone else's process: not ours to attach to anyway
            continue
        if info is not None:
            procs[pid] = info
    return procs


def _workers(procs: dict[int, ProcInfo], pids: set[int], run_id: str | None) -> list[Worker]:
    out: list[Worker] = []
    for pid in pids:
        info = procs[pid]
        if not is_worker_env(info.env):
            continue
        parent = procs.get(info.ppid)
        if parent is not None and is_worker_env(parent.env):
            continue  # a data-loader worker (or other child) of a rank
        if run_id is not None and info.env["TORCHELASTIC_RUN_ID"] != run_id:
            continue
        local_rank = int(info.env.get("LOCAL_RANK", "0") or 0)
        out.append(
            Worker(
                pid=pid,
                rank=int(info.env.get("RANK", str(local_rank)) or local_rank),
                local_rank=local_rank,
                run_id=info.env["TORCHELASTIC_RUN_ID"],
                start_ticks=info.start_ticks,
            )
        )
    return sorted(out, key=lambda w: (w.rank, w.pid))


def _descendants(procs: dict[int, ProcInfo], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for info in procs.values():
        children.setdefault(info.ppid, []).append(info.pid)
    seen: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def find_workers(
    pid: int | None = None, *, job: str | None = None, proc_root: Path = PROC
) -> list[Worker]:
    """The workers of the job of ``pid`` (or with run id ``job``); :class:`AttachError` with one
    line when there are none."""
    if (pid is None) == (job is None):
        raise AttachError("give either a PID or --job RUN_ID")
    if job is not None:
        procs = _snapshot(proc_root)
        found = _workers(procs, set(procs), job)
        if not found:
            raise AttachError(f"no torchrun worker of job {job!r} runs on this node")
        return found
    assert pid is not None
    target = read_proc(pid, proc_root)
    if target is None:
        raise AttachError(f"pid {pid}: no such process")
    procs = _snapshot(proc_root)
    procs[pid] = target
    run_id: str | None = None
    root = pid
    if is_worker_env(target.env):
        run_id = target.env["TORCHELASTIC_RUN_ID"]
        while root in procs and is_worker_env(procs[root].env) and procs[root].ppid in procs:
            root = procs[root].ppid  # up to the torchrun agent
        if is_worker_env(procs[root].env):  # no agent visible: the run id alone decides
            return _workers(procs, set(procs), run_id)
    found = _workers(procs, _descendants(procs, root), run_id)
    if not found:
        raise AttachError(
            f"pid {pid} is not a torchrun job: neither it nor its children have "
            "LOCAL_RANK and TORCHELASTIC_RUN_ID"
        )
    return found


def still_running(worker: Worker, proc_root: Path = PROC) -> bool:
    """The worker's process exists and is the same one (same start time)."""
    try:
        info = read_proc(worker.pid, proc_root)
    except AttachError:
        return True
    return info is not None and info.start_ticks == worker.start_ticks
