"""CollectiveWorkers: where gloo's worker threads wait when idle, and the bounded wait at a
window's stop until they are all there. A task directory of real files stands in for
/proc/self/task; the threads' places change when the wait sleeps, as a scheduler would move them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from diag.hook.c10d_workers import (
    RUNNING,
    SURE_EVERY,
    SURE_SAMPLES,
    CollectiveWorkers,
    Place,
    Settle,
    parse_runs,
    parse_syscall,
)

HOME = "202 0x55d0c0de0e48 0x80 0x0 0x0 0x0 0x0 0x7f10aa7fdb50 0x7f10c3e9a2ad"
ELSEWHERE = "202 0x7f10c40010a0 0x80 0x2 0x0 0x0 0x0 0x7f10aa7fd6e0 0x7f10c3e9a2ad"  # deeper
SHALLOW = "202 0x55d0c0de0e90 0x81 0x2 0x0 0x0 0x0 0x7f10aa7fdc10 0x7f10c3e9a3e1"  # the loop's lock
NETWORK = "7 0x7f10a0000b70 0x1 0xffffffff 0x0 0x0 0x0 0x7f10aa7fd810 0x7f10c3f1d3cf"  # poll


class Tasks:
    """A fake /proc/self (its ``comm``: "python") and its ``task`` directory:
    ``set(tid, comm, syscall, runs)`` writes a thread's files."""

    def __init__(self, proc: Path) -> None:
        self.root = proc / "task"
        self.root.mkdir(parents=True, exist_ok=True)
        (proc / "comm").write_text("python\n")

    def set(self, tid: int, *, comm: str = "pt_gloo_runloop", syscall: str = HOME,
            runs: int = 10) -> None:  # fmt: skip
        d = self.root / str(tid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "comm").write_text(comm + "\n")
        (d / "syscall").write_text(syscall + "\n")
        (d / "schedstat").write_text(f"123456 7890 {runs}\n")

    def remove(self, tid: int) -> None:
        for f in (self.root / str(tid)).iterdir():
            f.unlink()
        (self.root / str(tid)).rmdir()


class Clock:
    def __init__(self) -> None:
        self.ns = 0
        self.on_sleep: list[Callable[[int], None]] = []
        self.sleeps = 0

    def __call__(self) -> int:
        return self.ns

    def sleep(self, s: float) -> None:
        self.ns += int(s * 1e9)
        self.sleeps += 1
        for f in self.on_sleep:
            f(self.sleeps)


def workers(tmp_path: Path, clock: Clock) -> CollectiveWorkers:
    return CollectiveWorkers(task_dir=str(tmp_path / "task"), machine="x86_64", clock=clock,
                             sleep=clock.sleep)  # fmt: skip


def at_home(tmp_path: Path, *tids: int) -> tuple[Tasks, Clock, CollectiveWorkers]:
    """Workers ``tids`` idle at HOME and sampled there twice: their home is known."""
    tasks, clock = Tasks(tmp_path), Clock()
    for tid in tids:
        tasks.set(tid)
    w = workers(tmp_path, clock)
    w.observe()
    w.observe()
    return tasks, clock, w


def test_parse_syscall_forms() -> None:
    assert parse_syscall("running\n") is RUNNING
    assert parse_syscall(HOME) == Place(202, 0x7F10AA7FDB50, 0x7F10C3E9A2AD)
    assert parse_syscall("-1 0x7ffd1c0 0x7f10c3e9a2ad") == Place(-1, 0x7FFD1C0, 0x7F10C3E9A2AD)
    assert parse_syscall("") is None and parse_syscall("garbage here") is None
    assert parse_runs("1 2 3\n") == 3 and parse_runs("1 2") is None


def test_workers_are_found_by_name_and_a_late_name_is_seen(tmp_path: Path) -> None:
    tasks, clock = Tasks(tmp_path), Clock()
    tasks.set(100, comm="python")
    tasks.set(101)
    tasks.set(102, comm="gloo_tcp_loop")
    tasks.set(103, comm="python")  # a worker that has not named itself yet
    w = workers(tmp_path, clock)
    assert w.workers() == [101]
    tasks.set(102, comm="pt_gloo_runloop")  # a thread named otherwise is not looked at again
    tasks.set(103)  # one with the process's own name is: it names itself as a worker now
    assert sorted(w.workers()) == [101, 103]
    tasks.remove(101)
    assert sorted(w.workers()) == [103]


def test_home_is_the_shallowest_wait_once_seen_twice(tmp_path: Path) -> None:
    tasks, clock = Tasks(tmp_path), Clock()
    tasks.set(101, syscall=ELSEWHERE)
    w = workers(tmp_path, clock)
    w.observe()
    assert w.home(101) is None  # once is not a home
    w.observe()
    assert w.home(101) == parse_syscall(ELSEWHERE)  # the only wait seen twice, for now
    tasks.set(101, syscall=HOME)
    w.observe()
    assert w.home(101) == parse_syscall(ELSEWHERE)
    w.observe()
    assert w.home(101) == parse_syscall(HOME)  # shallower (a higher stack pointer)
    for syscall in ("running", NETWORK, "running", NETWORK):
        tasks.set(101, syscall=syscall)
        w.observe()  # running, or a wait that is not a futex's, is no home
    assert w.home(101) == parse_syscall(HOME)


def test_a_rank_waiting_for_a_slow_peer_most_of_the_time_still_knows_its_home(
    tmp_path: Path,
) -> None:
    """A 4-rank job with one rank 30 ms late: a fast rank's worker was in the collective's
    receive wait (a futex wait, deeper) in ~35 % of samples, and beside a busy loop it led; the
    home was that wait, the idle worker read as away and a window's stop ran out its bound with a
    worker counted unsettled (CI, test_profile_windows). The home is the shallowest wait."""
    tasks, clock = Tasks(tmp_path), Clock()
    w = workers(tmp_path, clock)
    for i in range(30):
        tasks.set(101, syscall=HOME if i % 3 == 0 else ELSEWHERE, runs=10 + i)
        w.observe()
    assert w.home(101) == parse_syscall(HOME)
    tasks.set(101, syscall=HOME, runs=100)  # the collective is done: idle
    assert w.settle(0.1) == Settle(0, 1, 0) and clock.sleeps == 0
    tasks.set(101, syscall=ELSEWHERE, runs=101)  # ... and while it still waits for the peer
    assert w.settle(0.01).unsettled == 1


def test_a_rare_shallower_wait_is_no_home_but_counts_as_settled(tmp_path: Path) -> None:
    """A lock taken in the worker's loop itself (shallower than its idle wait, after the
    collective's record ended): seen in under HOME_SHARE of the samples it is not the home; a
    worker found there is settled all the same."""
    tasks, clock = Tasks(tmp_path), Clock()
    w = workers(tmp_path, clock)
    for i in range(200):
        tasks.set(101, syscall=SHALLOW if i in (7, 150) else HOME)
        w.observe()
    assert w.home(101) == parse_syscall(HOME)
    tasks.set(101, syscall=SHALLOW, runs=20)
    assert w.settle(0.1).unsettled == 0 and clock.sleeps == 0


def test_settle_returns_at_once_when_every_worker_is_home(tmp_path: Path) -> None:
    _, clock, w = at_home(tmp_path, 101, 102)
    assert w.settle(0.1) == Settle(0, 2, 0) and clock.sleeps == 0


def test_settle_waits_for_a_worker_finishing_a_collective(tmp_path: Path) -> None:
    tasks, clock, w = at_home(tmp_path, 101, 102)
    # 102 still ends its collective: runnable, then blocked on the GIL, then home (poll 5)
    tasks.set(102, syscall="running", runs=11)
    steps = {2: dict(syscall=ELSEWHERE, runs=12), 5: dict(syscall=HOME, runs=13)}
    clock.on_sleep.append(lambda n: tasks.set(102, **steps[n]) if n in steps else None)
    s = w.settle(0.1)
    assert s.unsettled == 0 and s.workers == 2
    assert clock.sleeps == 5 and s.waited_ns == clock.ns


def test_settle_gives_up_at_the_timeout_on_a_worker_that_keeps_running(tmp_path: Path) -> None:
    tasks, _, w = at_home(tmp_path, 101)
    tasks.set(101, syscall="running")
    s = w.settle(0.01)
    assert s.unsettled == 1 and 0.01e9 <= s.waited_ns < 0.012e9


def test_settle_waits_out_a_worker_in_a_long_wait_and_says_so(tmp_path: Path) -> None:
    """Blocked elsewhere the whole time (a collective in flight on the network, or a slow
    callback): the stop goes ahead at the timeout and counts the worker as unsettled."""
    tasks, _, w = at_home(tmp_path, 101)
    tasks.set(101, syscall=NETWORK, runs=50)
    s = w.settle(0.03)
    assert s.unsettled == 1 and 0.03e9 <= s.waited_ns < 0.032e9


def test_home_unknown_a_futex_wait_without_runs_across_a_pause_counts_as_settled(
    tmp_path: Path,
) -> None:
    tasks, clock = Tasks(tmp_path), Clock()
    tasks.set(101, syscall=ELSEWHERE, runs=5)
    w = workers(tmp_path, clock)  # no sample yet: no home
    assert w.settle(0.1) == Settle(clock.ns, 1, 0) and clock.sleeps == 1
    # ... but not while the scheduler keeps running it (it is doing something)
    clock2 = Clock()
    w2 = workers(tmp_path, clock2)
    clock2.on_sleep.append(lambda n: tasks.set(101, syscall=ELSEWHERE, runs=5 + n))
    assert w2.settle(0.005).unsettled == 1


def test_no_proc_no_wait(tmp_path: Path) -> None:
    clock = Clock()
    w = workers(tmp_path / "absent", clock)
    w.observe()
    assert w.settle(0.1) == Settle(0, 0, 0)


def test_a_thread_that_ends_during_the_wait_is_not_waited_for(tmp_path: Path) -> None:
    tasks, clock, w = at_home(tmp_path, 101)
    tasks.set(101, syscall="running")
    clock.on_sleep.append(lambda n: tasks.remove(101) if n == 2 else None)
    assert w.settle(0.1).unsettled == 0


def test_idle_samples_thin_out_once_every_home_is_sure_and_resume_for_a_new_worker(
    tmp_path: Path,
) -> None:
    # The hook thread's per-cycle sample cost ~330 us beside a busy training thread (a quarter of
    # its CPU at a ~50 ms step): every cycle until each home was seen SURE_SAMPLES times, then
    # every SURE_EVERY-th; a new worker (a new process group) is sampled every cycle again.
    tasks, clock = Tasks(tmp_path / "a"), Clock()
    tasks.set(101)
    w = workers(tmp_path / "a", clock)
    assert all(w.idle_sample() for _ in range(SURE_SAMPLES))
    assert w.home(101) == parse_syscall(HOME)
    assert sum(w.idle_sample() for _ in range(3 * SURE_EVERY)) == 3
    tasks.set(102, syscall=ELSEWHERE)  # a new worker: found at the next sample ...
    assert any(w.idle_sample() for _ in range(SURE_EVERY))
    # ... then sampled every cycle until its home is sure too, then every SURE_EVERY-th again
    assert all(w.idle_sample() for _ in range(SURE_SAMPLES - 1))
    assert w.home(102) == parse_syscall(ELSEWHERE)
    assert sum(w.idle_sample() for _ in range(2 * SURE_EVERY)) == 2
    # a worker never seen idle (running, or in a poll) has no home: every cycle samples
    flip = CollectiveWorkers(task_dir=str(tmp_path / "b" / "task"), machine="x86_64",
                             clock=clock, sleep=clock.sleep)  # fmt: skip
    tasks = Tasks(tmp_path / "b")
    for i in range(4 * SURE_EVERY):
        tasks.set(201, syscall=NETWORK if i % 2 else "running")
        assert flip.idle_sample()
