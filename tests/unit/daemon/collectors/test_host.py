"""HostCollector against the checked-in fake /proc (see tests/data/proc_fake/README) and /proc."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from diag import schema
from diag.daemon.collectors.host import HostCollector
from tests.fakes.paths import DATA

PROC_FAKE = DATA / "proc_fake"


class FakeClock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    shutil.copytree(PROC_FAKE / "t0", root)
    return root


def _advance(proc: Path, clock: FakeClock) -> None:
    shutil.copytree(PROC_FAKE / "t1", proc, dirs_exist_ok=True)
    shutil.rmtree(proc / "5151")
    clock.ns += 2_000_000_000


def test_first_cycle_primes_then_rates_over_the_interval(proc: Path) -> None:
    clock = FakeClock()
    c = HostCollector(proc, clock, clock_ticks_per_s=100)
    assert list(c.collect(111)) == []
    _advance(proc, clock)
    (host,) = [e for e in c.collect(222) if isinstance(e, schema.HostSample)]
    assert host.ts_ns == 222
    assert host.rank == -1 and host.seq == -1 and host.source == ""  # the daemon stamps these
    assert host.interval_ns == 2_000_000_000
    assert host.num_cpus == 2
    assert host.cpu_busy_pct == pytest.approx(60.0)
    assert host.cpu_iowait_pct == pytest.approx(10.0)
    assert host.load_1m == 2.25
    assert host.mem_total_bytes == 16384000 * 1024
    assert host.mem_available_bytes == 4096000 * 1024
    # Whole disks only: partitions, loop and dm devices moved by far more and must not count.
    assert host.disk_read_bytes_per_s == pytest.approx(1024 * 1024)
    assert host.disk_write_bytes_per_s == pytest.approx(2 * 1024 * 1024)
    # Every interface but lo.
    assert host.net_rx_bytes_per_s == pytest.approx(1_000_000)
    assert host.net_tx_bytes_per_s == pytest.approx(2_000_000)
    assert host.num_procs_running == 5


def test_rank_processes_sampled_and_gone_ones_dropped_quietly(proc: Path) -> None:
    clock = FakeClock()
    c = HostCollector(proc, clock, clock_ticks_per_s=100)
    c.track(4242, rank=3, local_rank=1)
    c.track(5151, rank=4, local_rank=2)  # exits before the second cycle
    c.track(6161, rank=5, local_rank=3)  # its pid is reused by another process
    c.track(9999, rank=6, local_rank=4)  # never existed
    c.collect(1)
    assert c.tracked_pids == [4242, 5151, 6161]
    _advance(proc, clock)
    events = list(c.collect(2))
    procs = [e for e in events if isinstance(e, schema.ProcSample)]
    assert len(procs) == 1
    p = procs[0]
    assert (p.pid, p.rank, p.local_rank) == (4242, 3, 1)
    assert p.cpu_pct == pytest.approx(200.0)  # 400 ticks at 100/s over 2 s
    assert p.rss_bytes == 3072000 * 1024
    assert p.num_threads == 14
    assert p.read_bytes_per_s == pytest.approx(1_000_000)
    assert p.write_bytes_per_s == pytest.approx(2_000_000)
    assert p.num_ctx_switches_involuntary == 77
    assert p.last_cpu == 1
    assert c.tracked_pids == [4242]


def _rank_4242_primed(proc: Path) -> HostCollector:
    """A collector tracking rank 4242, its first cycle done and /proc advanced to t1."""
    clock = FakeClock()
    c = HostCollector(proc, clock, clock_ticks_per_s=100)
    c.track(4242, rank=3, local_rank=1)
    c.collect(1)
    _advance(proc, clock)
    return c


def _host_processes(c: HostCollector) -> list[schema.HostProcess]:
    return [e for e in c.collect(2) if isinstance(e, schema.HostProcess)]


def test_the_busiest_processes_that_are_not_the_job(proc: Path) -> None:
    others = _host_processes(_rank_4242_primed(proc))
    # 7070 a hog on CPU 1 (95%), 9090 a kernel thread (15%); not the rank 4242 nor its data
    # worker 4343 (100%), not sshd 8080 (2%: under 10%), not 5151 (gone) nor 6161 (pid reused)
    assert [(e.pid, e.last_cpu) for e in others] == [(7070, 1), (9090, 1)]
    hog, kworker = others
    assert hog.cpu_pct == pytest.approx(95.0) and hog.interval_ns == 2_000_000_000
    assert hog.cmd == "python3 -c while True: pass" and hog.rank == -1 and hog.ts_ns == 2
    assert kworker.cmd == "[kworker/1:1]" and kworker.cpu_pct == pytest.approx(15.0)


def test_real_proc_smoke() -> None:
    clock = FakeClock()
    c = HostCollector(Path("/proc"), clock)
    import os

    c.track(os.getpid(), rank=0, local_rank=0)
    c.collect(1)
    clock.ns += 1_000_000_000
    events = list(c.collect(2))
    host = next(e for e in events if isinstance(e, schema.HostSample))
    assert host.num_cpus >= 1 and host.mem_total_bytes > 0
    assert 0.0 <= host.cpu_busy_pct <= 100.0
    me = next(e for e in events if isinstance(e, schema.ProcSample))
    assert me.pid == os.getpid() and me.rss_bytes > 0 and me.num_threads >= 1
    assert me.run_delay_ns is not None and me.run_delay_ns >= 0  # schedstat is readable here


def _threads(proc: Path, pid: int, delays: dict[int, int]) -> None:
    """Give ``pid`` in the fake tree exactly these threads, each with its run-queue delay."""
    task = proc / str(pid) / "task"
    shutil.rmtree(task, ignore_errors=True)
    for tid, wait_ns in delays.items():
        (task / str(tid)).mkdir(parents=True)
        (task / str(tid) / "schedstat").write_text(f"123456 {wait_ns} 42\n")


def test_the_run_queue_delay_of_every_thread_of_a_rank(proc: Path) -> None:
    # the training thread waited 2 ms more, gloo's 5 ms; a loader thread started since waited
    # 1 ms in its life; a thread that exited since counts nothing
    clock = FakeClock()
    c = HostCollector(proc, clock, clock_ticks_per_s=100)
    c.track(4242, rank=3, local_rank=1)
    _threads(proc, 4242, {4242: 10_000_000, 4243: 50_000_000, 4244: 7_000_000})
    c.collect(1)
    _advance(proc, clock)
    _threads(proc, 4242, {4242: 12_000_000, 4243: 55_000_000, 4250: 1_000_000})
    (p,) = [e for e in c.collect(2) if isinstance(e, schema.ProcSample)]
    assert p.run_delay_ns == 2_000_000 + 5_000_000 + 1_000_000
    # its task list unreadable: unknown, not zero
    shutil.rmtree(proc / "4242" / "task")
    clock.ns += 2_000_000_000
    (p,) = [e for e in c.collect(3) if isinstance(e, schema.ProcSample)]
    assert p.run_delay_ns is None


def test_a_process_started_since_the_last_cycle_is_reported_over_its_life(proc: Path) -> None:
    # A hog started 0.5 s before the second cycle (a short job: the next cycle would come after
    # its end). Its share is its CPU ticks over its age (start time vs /proc/uptime).
    c = _rank_4242_primed(proc)
    (proc / "uptime").write_text("1000.00 1900.00\n")
    new = proc / "7171"
    new.mkdir()
    # started at 999.50 s (99950 ticks), 45 ticks of CPU since: 90% of a core over 0.5 s
    hog_line = (PROC_FAKE / "t1" / "7070" / "stat").read_text().split()
    hog_line[0], hog_line[13], hog_line[21] = "7171", "45", "99950"  # pid, utime, start time
    (new / "stat").write_text(" ".join(hog_line) + "\n")
    (new / "cmdline").write_bytes(b"python3\0hog.py\0")
    others = _host_processes(c)
    (hog,) = [e for e in others if e.pid == 7171]
    assert hog.cpu_pct == pytest.approx(90.0) and hog.interval_ns == 500_000_000
    assert hog.cmd == "python3 hog.py" and hog.last_cpu == 1
    # the reused pid 6161 (started long ago by this clock, 20 ticks) stays under the floor
    assert 6161 not in {e.pid for e in others}


def _set_state(proc: Path, pid: int, state: str) -> None:
    stat = proc / str(pid) / "stat"
    text = stat.read_text()
    close = text.rfind(")")
    stat.write_text(text[: close + 2] + state + text[close + 3 :])


def test_a_rank_found_stopped_or_in_io_wait_between_samples(proc: Path) -> None:
    """The state of a rank's main thread is read every state interval; the next full sample
    counts how often it was stopped (T, t) or in uninterruptible I/O wait (D)."""
    clock = FakeClock()
    c = HostCollector(proc, clock, interval_s=1.0, state_interval_s=0.25, clock_ticks_per_s=100)
    assert c.interval_s == 0.25  # called this often
    c.track(4242, rank=3, local_rank=1)
    c.collect(1)  # primes
    _advance(proc, clock)
    clock.ns -= 2_000_000_000  # back to the first sample's time: the calls below are 0.25 s
    states = ["T", "S", "t", "D"]  # three calls between the full samples, and the full one
    events: list[schema.Event] = []
    for i, state in enumerate(states):
        clock.ns += 250_000_000
        _set_state(proc, 4242, state)
        events = list(c.collect(2 + i))
        if i < 3:
            assert events == []  # between full samples: states only
    (p,) = [e for e in events if isinstance(e, schema.ProcSample)]
    assert (p.num_state_samples, p.num_stopped, p.num_disk_wait) == (4, 2, 1)
    for i, state in enumerate(["R", "S", "R", "T"]):  # counts start again after a full sample
        clock.ns += 250_000_000
        _set_state(proc, 4242, state)
        events = list(c.collect(10 + i))
    (p,) = [e for e in events if isinstance(e, schema.ProcSample)]
    assert (p.num_state_samples, p.num_stopped, p.num_disk_wait) == (4, 1, 0)
