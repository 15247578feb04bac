"""A hook that stops reporting is noticed: its connection stays open, no HookHealth comes for
several of its intervals while its process runs, and the daemon ships one HookSilent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.daemon import Daemon
from diag.daemon.hook_watch import HookWatch
from tests.fakes.daemon_doubles import (
    AnalyzerServer,
    FakeHook,
    RecordingAnalyzer,
    RunningDaemon,
    wait_for,
)

S = 1_000_000_000
PID = 4242


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def set_state(proc: Path, pid: int, state: str) -> None:
    """A fake ``/proc/<pid>/stat`` (a command name with spaces and parentheses, as can be)."""
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "stat").write_text(f"{pid} (python (rank 1)) {state} 1 1 1 0 -1\n")


def health(
    *, pid: int = PID, seq: int = 3, final: bool = False, error: str = ""
) -> schema.HookHealth:
    return schema.HookHealth(
        ts_ns=time.time_ns(), host="node1", rank=1, local_rank=1, source=f"node1/rank1/{pid}",
        seq=seq, pid=pid, final=final, last_error=error, health_interval_ns=2 * S,
    )  # fmt: skip


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    set_state(root, PID, "S")
    return root


def test_a_silent_hook_is_reported_once_and_again_after_it_reported_and_fell_silent(
    proc: Path,
) -> None:
    clock = Clock()
    watch = HookWatch(intervals=4, min_silence_s=0, clock=clock, proc_root=proc)
    watch.health("conn", health(error="RuntimeError: hook thread ended: SystemExit: x"))
    clock.t += 7.9  # under 4 intervals of 2 s
    assert watch.check(5) == []
    clock.t += 0.2
    (silent,) = watch.check(5)
    assert (silent.ts_ns, silent.rank, silent.local_rank, silent.pid) == (5, 1, 1, PID)
    assert (silent.hook_source, silent.last_health_seq) == (f"node1/rank1/{PID}", 3)
    assert silent.silent_ns == round(8.1 * S) and silent.health_interval_ns == 2 * S
    assert silent.last_error == "RuntimeError: hook thread ended: SystemExit: x"
    clock.t += 100
    assert watch.check(6) == []  # once per silence

    watch.health("conn", health(seq=9))  # it reports again: a new silence is a new report
    clock.t += 8.1
    (again,) = watch.check(7)
    assert again.last_health_seq == 9 and watch.num_reported == 2


def test_a_floor_on_the_silence_for_short_intervals(proc: Path) -> None:
    clock = Clock()
    watch = HookWatch(intervals=4, min_silence_s=20, clock=clock, proc_root=proc)
    watch.health("conn", health())
    clock.t += 19
    assert watch.check(1) == []
    clock.t += 2
    assert len(watch.check(1)) == 1


def test_no_report_for_a_stopped_gone_or_exiting_process_nor_a_closed_or_final_hook(
    proc: Path,
) -> None:
    clock = Clock()
    watch = HookWatch(intervals=4, min_silence_s=0, clock=clock, proc_root=proc)
    for pid, state in ((1, "T"), (2, "Z")):
        set_state(proc, pid, state)
    watch.health("stopped", health(pid=1))
    watch.health("zombie", health(pid=2))
    watch.health("gone", health(pid=3))  # no /proc entry
    watch.health("closed", health())
    watch.closed("closed")
    watch.health("exited", health())
    watch.health("exited", health(final=True))  # its thread stopped on purpose
    clock.t += 60
    assert watch.check(1) == []

    set_state(proc, 1, "S")  # it runs again: its silence counts from then, not from before
    clock.t += 7
    assert watch.check(1) == []
    clock.t += 2
    (silent,) = watch.check(1)
    assert silent.pid == 1 and silent.silent_ns == 9 * S


@pytest.fixture
def analyzer() -> Iterator[AnalyzerServer]:
    server = AnalyzerServer(RecordingAnalyzer())
    yield server
    server.stop()


def test_the_daemon_ships_a_hook_silent_for_an_open_connection_without_health(
    tmp_path: Path, analyzer: AnalyzerServer, proc: Path
) -> None:
    clock = Clock()
    cfg = DaemonConfig(
        listen_sock=str(tmp_path / "d.sock"), analyzer=analyzer.target,
        spool_dir=str(tmp_path / "spool"), host="node1", job_id="job7", gpu_backend="none",
        flush_interval_s=0.05, control_poll_interval_s=0,
    )  # fmt: skip
    watch = HookWatch(intervals=4, min_silence_s=0, clock=clock, proc_root=proc)
    running = RunningDaemon(Daemon(cfg, hook_watch=watch))
    hook = FakeHook(tmp_path / "d.sock")
    try:
        hook.send([health(error="RuntimeError: hook thread ended: SystemExit: x")])
        wait_for(lambda: running.daemon.listener.num_events == 1, what="the hook's health")
        clock.t += 9  # more than 4 intervals of 2 s: the hook thread is dead or stuck
        wait_for(lambda: bool(analyzer.servicer.of_kind(schema.HookSilent)), what="HookSilent")
    finally:
        hook.close()
        running.stop()
    (silent,) = analyzer.servicer.of_kind(schema.HookSilent)
    assert silent.source == running.daemon.source and silent.host == "node1"
    assert (silent.rank, silent.pid, silent.hook_source) == (1, PID, f"node1/rank1/{PID}")
    assert silent.job_id == "job7" and silent.silent_ns == 9 * S
