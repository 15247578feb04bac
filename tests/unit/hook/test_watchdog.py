"""The hang watchdog: the stall rule on an injected clock, the report it builds, the excepthooks,
and the real hook reporting a training thread blocked in this process."""

from __future__ import annotations

import json
import sys
import threading
import time

import torch
import torch.distributed as dist

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook.events import EventFactory
from diag.hook.stacks import ExceptHooks, ExceptionInfo, thread_stacks
from diag.hook.watchdog import HangWatchdog, StallWatch, completed_total, fr_facts
from tests.fakes.hook_sink import FrameSink, of_kind

S = 1_000_000_000


def test_no_stall_before_the_first_progress() -> None:
    watch = StallWatch(min_s=5, factor=3)
    assert watch.observe((0, 0), 0) is None
    assert watch.observe((0, 0), 100 * S) is None  # still starting up: never armed


def test_a_watch_started_mid_run_arms_at_once() -> None:
    watch = StallWatch(min_s=5, factor=3)
    assert watch.observe((7, 3), 1 * S, started=True) is None
    assert watch.observe((7, 3), 6 * S) is not None


def test_fires_once_per_stall_and_rearms_on_progress() -> None:
    watch = StallWatch(min_s=5, factor=3)
    watch.observe(0, 0)
    assert watch.observe(1, 1 * S) is None  # progress at t=1
    assert watch.observe(1, 5 * S) is None  # 4 s
    stall = watch.observe(1, 6 * S)
    assert stall is not None and (stall.since_ns, stall.stall_ns, stall.threshold_ns) == (
        1 * S, 5 * S, 5 * S)  # fmt: skip
    assert watch.observe(1, 60 * S) is None  # once per stall
    assert watch.observe(2, 61 * S) is None  # progress re-arms
    assert watch.observe(2, 66 * S) is not None
    assert watch.num_stalls == 2


def test_threshold_is_factor_times_p99_of_steps_or_the_minimum() -> None:
    watch = StallWatch(min_s=5, factor=3)
    assert watch.threshold_ns() == 5 * S
    for _ in range(98):
        watch.step_time(1 * S)
    watch.step_time(4 * S)
    watch.step_time(4 * S)  # the 99th of 100 is the p99
    assert watch.threshold_ns() == 12 * S
    for _ in range(100):
        watch.step_time(S // 10)  # the window keeps the newest: fast steps again
    assert watch.threshold_ns() == 5 * S


def test_disabled_by_a_zero_minimum() -> None:
    watch = StallWatch(min_s=0, factor=3)
    watch.observe(0, 0)
    watch.observe(1, 1)
    assert watch.observe(1, 10**6 * S) is None


def test_arm_measures_from_that_moment_without_any_progress() -> None:
    watch = StallWatch(min_s=5, factor=3)
    assert watch.observe((0, 0), 0) is None  # starting up: not armed
    watch.arm((0, 0), 10 * S)
    assert watch.observe((0, 0), 14 * S) is None
    stall = watch.observe((0, 0), 15 * S)
    assert stall is not None and (stall.since_ns, stall.stall_ns) == (10 * S, 5 * S)


def test_watchdog_arm_from_another_thread_is_applied_at_the_next_check() -> None:
    clock = [0]
    dog = HangWatchdog(
        StallWatch(min_s=5, factor=3), EventFactory(host="h", rank=0, local_rank=0, job_id=""),
        progress=lambda: ((0, 0, 0), False), fr_dump=lambda: None, last_step=lambda: -1,
        current_step=lambda: -1, on_error=lambda exc: None, clock=lambda: clock[0],
    )  # fmt: skip
    assert dog.check() == []
    clock[0] = 100 * S
    assert dog.check() == []  # never any progress: never armed
    clock[0] = 101 * S
    arming = threading.Thread(target=dog.arm)  # e.g. the attach, on the job's main thread
    arming.start()
    arming.join()
    clock[0] = 102 * S
    assert dog.check() == []
    clock[0] = 106 * S
    (report, *_stacks) = dog.check()
    assert isinstance(report, schema.HangReport) and report.stall_ns == 5 * S
    assert not report.fr_ok
    clock[0] = 200 * S
    assert dog.check() == []  # once per stall: the same arm request is not applied again


def _entry(rid: int, seq: int, op: str, *, retired: bool, pg: str = "0", sizes=None) -> dict:
    return {
        "record_id": rid, "process_group": (pg, "default_pg"), "collective_seq_id": seq,
        "profiling_name": f"gloo:{op}", "time_created_ns": 1000 + rid, "retired": retired,
        "state": "scheduled", "input_sizes": sizes if sizes is not None else [[10]],
        "input_dtypes": ["Float"],
    }  # fmt: skip


def test_fr_facts_names_the_oldest_collective_in_flight() -> None:
    dump = {
        "entries": [
            _entry(0, 1, "all_reduce", retired=True),
            _entry(1, 2, "barrier", retired=True, sizes=[]),
            _entry(2, 3, "all_reduce", retired=False, sizes=[[1056]]),
            _entry(3, 1, "broadcast", retired=True, pg="1"),
        ],
        "pg_status": {
            "0": {"last_enqueued_collective": 3, "last_completed_collective": 2},
            "1": {"last_enqueued_collective": 1, "last_completed_collective": 1},
        },
    }
    facts = fr_facts(dump)
    assert (facts["pg_name"], facts["seq_id"], facts["op"]) == ("0", 3, "all_reduce")
    assert facts["input_sizes"] == "[[1056]]" and facts["dtype"] == "Float"
    assert (facts["last_enqueued_seq"], facts["last_completed_seq"]) == (3, 2)
    tail = json.loads(facts["fr_tail_json"])
    assert [(t["pg"], t["seq"], t["op"], t["done"]) for t in tail] == [
        ("0", 1, "all_reduce", True), ("0", 2, "barrier", True),
        ("0", 3, "all_reduce", False), ("1", 1, "broadcast", True),
    ]  # fmt: skip
    assert json.loads(facts["pg_status_json"]) == {"0": [3, 2], "1": [1, 1]}
    assert completed_total(dump) == 3


def test_fr_facts_of_a_rank_in_no_collective_give_the_default_groups_counters() -> None:
    dump = {
        "entries": [_entry(0, 4, "all_reduce", retired=True)],
        "pg_status": {"0": {"last_enqueued_collective": 4, "last_completed_collective": 4}},
    }
    facts = fr_facts(dump)
    assert "seq_id" not in facts and facts["last_enqueued_seq"] == 4


def test_report_has_the_fr_facts_and_every_other_threads_stack() -> None:
    ev = EventFactory(host="h", rank=3, local_rank=1, job_id="j")
    clock = [10 * S]
    token = [7]
    errors: list[BaseException] = []
    dog = HangWatchdog(
        StallWatch(min_s=5, factor=3),
        ev,
        progress=lambda: (token[0], False),
        fr_dump=lambda: {"entries": [_entry(0, 9, "all_reduce", retired=False)], "pg_status": {}},
        last_step=lambda: 41,
        current_step=lambda: 42,
        on_error=errors.append,
        clock=lambda: clock[0],
        wall_clock=lambda: 1_000 * S,
    )
    assert dog.check() == []  # first look
    clock[0], token[0] = 11 * S, 8
    assert dog.check() == []  # progress at 11 s
    clock[0] = 17 * S
    out: list[schema.Event] = []
    worker = threading.Thread(target=lambda: out.extend(dog.check()), name="checker")
    worker.start()
    worker.join()
    report, *stacks = out
    assert isinstance(report, schema.HangReport) and not errors
    assert (report.rank, report.step, report.last_step) == (3, 42, 41)
    assert report.stall_ns == 6 * S and report.threshold_ns == 5 * S
    assert report.stalled_since_ns == 1_000 * S - 6 * S
    assert (report.pg_name, report.seq_id, report.op, report.fr_ok) == ("0", 9, "all_reduce", True)
    main = [s for s in stacks if isinstance(s, schema.StackDump) and s.is_main]
    assert len(main) == 1 and main[0].origin == "python" and main[0].reason == "hang"
    assert "test_report_has_the_fr_facts" in main[0].frames  # this test, blocked in join()
    assert not any(s.thread_name == "checker" for s in stacks)  # not the watchdog's own thread


def test_a_failing_dump_still_reports_without_the_flight_recorder() -> None:
    errors: list[BaseException] = []

    def broken() -> None:
        raise RuntimeError("no dump")

    clock = [0]
    dog = HangWatchdog(
        StallWatch(min_s=1, factor=3), EventFactory(host="h", rank=0, local_rank=0, job_id=""),
        progress=lambda: (clock[0] > 0, False), fr_dump=broken, last_step=lambda: -1,
        current_step=lambda: 0, on_error=errors.append, clock=lambda: clock[0],
    )  # fmt: skip
    dog.check()
    clock[0] = 1
    dog.check()
    clock[0] = 2 * S
    report = dog.check()[0]
    assert isinstance(report, schema.HangReport) and not report.fr_ok and report.seq_id == -1
    assert len(errors) == 1


def test_thread_stacks_are_innermost_first() -> None:
    stacks = thread_stacks()
    me = next(s for s in stacks if s.thread_id == threading.get_native_id())
    first = me.frames.splitlines()[0]
    assert first.endswith(" thread_stacks") and "diag/hook/stacks.py:" in first


def test_excepthooks_report_then_call_the_previous_hook() -> None:
    seen: list[ExceptionInfo] = []
    previous: list[str] = []
    old_thread = threading.excepthook
    threading.excepthook = lambda args: previous.append(str(args.exc_value))
    hooks = ExceptHooks(seen.append)
    hooks.install()
    try:

        def boom() -> None:
            raise ValueError("bad value")

        t = threading.Thread(target=boom, name="worker")
        t.start()
        t.join()
        assert previous == ["bad value"]
        assert seen[0].exc_type == "ValueError" and seen[0].message == "bad value"
        assert seen[0].thread_name == "worker" and not seen[0].is_main
        assert seen[0].frames.splitlines()[0].endswith(" boom")
        # sys.excepthook likewise (called by hand: pytest catches real uncaught exceptions)
        calls: list[type] = []
        hooks._prev_sys = lambda t, e, tb: calls.append(t)
        try:
            raise KeyError("k")
        except KeyError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        assert calls == [KeyError] and seen[1].exc_type == "KeyError"
    finally:
        hooks.uninstall()
        assert threading.excepthook is not hooks._thread_hook
        threading.excepthook = old_thread


def test_a_failing_callback_never_hides_the_jobs_error() -> None:
    def broken(info: ExceptionInfo) -> None:
        raise RuntimeError("diag bug")

    previous: list[str] = []
    hooks = ExceptHooks(broken)
    hooks._prev_sys = lambda t, e, tb: previous.append(str(e))
    hooks.active = True
    hooks._sys_hook(ValueError, ValueError("job error"), None)
    assert previous == ["job error"]


def test_real_hook_reports_a_blocked_training_thread(world: None, sink: FrameSink) -> None:
    cfg = HookConfig(
        daemon_sock=sink.path, flush_interval_s=0.05, fr_poll_interval_s=0.1,
        reconnect_interval_s=0.05, hang_min_s=0.6,
    )  # fmt: skip
    h = hook.install(cfg)
    try:
        time.sleep(0.3)  # the hook thread's first look precedes the progress
        for _ in range(3):
            dist.all_reduce(torch.ones(4))  # progress: the watch arms
        time.sleep(1.5)  # "blocked": no step, no collective
        events = list(sink.events)
    finally:
        hook.uninstall()
    reports = of_kind(events, schema.HangReport)
    assert len(reports) == 1, reports
    report = reports[0]
    assert report.fr_ok and report.seq_id == -1  # blocked outside any collective
    assert report.last_enqueued_seq == report.last_completed_seq >= 3
    assert 0.6e9 <= report.stall_ns < 1.5e9
    stacks = of_kind(events, schema.StackDump)
    main = [s for s in stacks if s.is_main]
    assert len(main) == 1 and "test_real_hook_reports_a_blocked_training_thread" in main[0].frames
    assert h.num_errors == 0
