"""Step phase accounting with an injected clock: nesting, partition, forward window."""

from __future__ import annotations

from typing import Any

from diag.hook.phases import BACKWARD, CHECKPOINT, DATA, OPTIMIZER, STEP_FIELDS, StepTracker


def run(script: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    out: list[tuple[Any, ...]] = []
    t = StepTracker(out.append, clock=lambda: 0)
    for action, phase, now in script:
        if action == "enter":
            t.enter(phase, now)
        elif action == "exit":
            t.exit(phase, now)
        elif action == "end":
            t.end_step(now)
    return [dict(zip(STEP_FIELDS, rec[1:], strict=True)) for rec in out if rec[0] == "step"]


def test_phases_partition_the_step_with_nesting() -> None:
    (s0, s1) = run([
        ("enter", CHECKPOINT, 0),  # before any activity: not a step
        ("exit", CHECKPOINT, 5),
        ("enter", DATA, 10), ("exit", DATA, 30),  # step 0 starts at 10
        ("enter", BACKWARD, 70),  # forward = 30..70
        ("exit", BACKWARD, 120),
        ("enter", OPTIMIZER, 125),
        ("enter", CHECKPOINT, 130), ("exit", CHECKPOINT, 140),  # nested: 10 to checkpoint
        ("exit", OPTIMIZER, 150), ("end", 0, 150),
        ("enter", DATA, 160), ("exit", DATA, 170),
        ("enter", DATA, 180), ("exit", DATA, 190),  # forward counts from the last fetch
        ("enter", BACKWARD, 200), ("exit", BACKWARD, 220),
        ("enter", OPTIMIZER, 230), ("exit", OPTIMIZER, 240), ("end", 0, 250),
    ])  # fmt: skip
    assert (s0["step"], s0["start_perf_ns"], s0["end_perf_ns"]) == (0, 10, 150)
    assert (s0["data_wait_ns"], s0["forward_ns"], s0["backward_ns"]) == (20, 40, 50)
    assert (s0["optimizer_ns"], s0["checkpoint_ns"], s0["other_ns"]) == (15, 10, 5)
    assert (s1["step"], s1["data_wait_ns"], s1["forward_ns"]) == (1, 20, 10)
    for s in (s0, s1):
        parts = ("data_wait_ns", "forward_ns", "backward_ns", "optimizer_ns", "checkpoint_ns",
                 "other_ns")  # fmt: skip
        assert sum(s[k] for k in parts) == s["end_perf_ns"] - s["start_perf_ns"]


def test_wait_loss_and_counts() -> None:
    out: list[tuple[Any, ...]] = []
    t = StepTracker(out.append)
    t.enter(BACKWARD, 0)
    t.exit(BACKWARD, 100)
    t.add_backward(1.5, grad_sync_ns=30)
    t.add_collective(20, sync=True)
    t.add_collective(99, sync=False)  # async: issued, not waited on here
    t.exit(OPTIMIZER, 100)  # unmatched exit is ignored
    t.end_step(110)
    step = dict(zip(STEP_FIELDS, out[-1][1:], strict=True))
    assert step["collective_wait_ns"] == 50 and step["loss"] == 1.5
    assert step["num_backward"] == 1 and step["num_collectives"] == 2


def test_run_queue_delay_per_step_from_the_injected_clock() -> None:
    runq = [100]  # cumulative run-queue ns
    out: list[tuple[Any, ...]] = []
    t = StepTracker(out.append, clock=lambda: 0, runqueue=lambda: runq[0])
    t.enter(DATA, 0)  # step 0 begins (reads 100)
    t.exit(DATA, 10)
    runq[0] = 130
    t.end_step(1000)  # reads 130: the end of step 0 and the start of step 1
    runq[0] = 500
    t.end_step(1100)  # reads 500: 370 ns, more than the 100 ns step: clamped to the step
    steps = [dict(zip(STEP_FIELDS, rec[1:], strict=True)) for rec in out if rec[0] == "step"]
    assert [s["cpu_wait_ns"] for s in steps] == [30, 100]
    assert [s["cpu_wait_data_ns"] for s in steps] == [0, 0]


def test_run_queue_delay_met_while_waiting_for_data_is_told_apart() -> None:
    # A competitor that holds the thread up while it makes its batch (or writes a checkpoint):
    # part of the step's run-queue delay, but not of its compute, which a reader takes it from
    runq = [0]
    out: list[tuple[Any, ...]] = []
    t = StepTracker(out.append, clock=lambda: 0, runqueue=lambda: runq[0])
    t.enter(DATA, 0)
    runq[0] += 400  # waiting for a CPU while it makes the batch
    t.exit(DATA, 500)
    t.enter(BACKWARD, 500)
    runq[0] += 100  # ... and in its compute
    t.exit(BACKWARD, 900)
    t.enter(CHECKPOINT, 900)
    t.enter(DATA, 910)  # nested: the checkpoint's region counts it already
    runq[0] += 30
    t.exit(DATA, 920)
    t.exit(CHECKPOINT, 950)
    t.end_step(1000)
    (step,) = [dict(zip(STEP_FIELDS, rec[1:], strict=True)) for rec in out if rec[0] == "step"]
    assert (step["cpu_wait_ns"], step["cpu_wait_data_ns"]) == (530, 430)


def test_run_queue_clock_reads_this_threads_schedstat(tmp_path: Any) -> None:
    from diag.hook.sched import runqueue_clock

    clock = runqueue_clock()
    if clock is not None:  # Linux with schedstats: cumulative, never decreasing
        first = clock()
        sum(i * i for i in range(200_000))
        assert clock() >= first >= 0
    assert runqueue_clock(str(tmp_path / "missing")) is None
    bad = tmp_path / "schedstat"
    bad.write_text("garbage\n")
    assert runqueue_clock(str(bad)) is None


def test_run_queue_delay_inside_a_collective_wait_is_not_counted_twice() -> None:
    runq = [0]
    out: list[tuple[Any, ...]] = []
    t = StepTracker(out.append, clock=lambda: 0, runqueue=lambda: runq[0])
    t.enter(DATA, 0)
    t.exit(DATA, 10)
    runq[0] = 900
    t.runq_in_wait += 600  # woken by the all-reduce, it waited 600 ns for a CPU: already wait
    t.end_step(5000)
    steps = [dict(zip(STEP_FIELDS, rec[1:], strict=True)) for rec in out if rec[0] == "step"]
    assert steps[0]["cpu_wait_ns"] == 300


def test_run_queue_delay_during_diags_own_work_is_not_the_steps() -> None:
    # A window's disable on four ranks at once on two cores queues each training thread for a
    # CPU: diag's own cost, not contention on the job. Neither the stop (discounted by the hook
    # core) nor a window's start (``on_begin`` returns True) counts in ``cpu_wait_ns``.
    runq = [0]
    starts: list[int] = []

    def on_begin(step: int) -> bool:
        starts.append(step)
        if step == 1:  # a window starts here: it waits 400 ns for a CPU
            runq[0] += 400
            return True
        return False

    out: list[tuple[Any, ...]] = []
    t = StepTracker(out.append, clock=lambda: 0, runqueue=lambda: runq[0], on_begin=on_begin)
    t.enter(DATA, 0)  # step 0 begins
    runq[0] += 50  # the job's own delay in step 0
    t.end_step(1000)  # step 1 begins: the window's start waits 400 ns
    runq[0] += 70  # the job's own delay in step 1
    since = t.runqueue_now()
    assert since is not None
    runq[0] += 900  # the window's stop, at step 1's end: 900 ns in the run queue
    t.discount_runqueue(since)
    t.end_step(3000)
    runq[0] += 20
    t.end_step(4000)  # the next step counts its own delay only
    steps = [dict(zip(STEP_FIELDS, rec[1:], strict=True)) for rec in out if rec[0] == "step"]
    assert [s["cpu_wait_ns"] for s in steps] == [50, 70, 20]
    assert starts == [0, 1, 2, 3]
