"""The hook thread never goes blind: an event it cannot send, or a failure of its own, costs that
event at most (counted in ``HookHealth``), and every later step is still sent. Should the thread
end all the same, its last health says why (and the daemon notices the silence that follows)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from tests.fakes.hook_sink import FrameSink, of_kind


def fast(sink: FrameSink) -> HookConfig:
    """A hook sending to ``sink``, cycling fast (a unit test waits for its cycles)."""
    return HookConfig(
        daemon_sock=sink.path,
        flush_interval_s=0.05,
        fr_poll_interval_s=0.1,
        reconnect_interval_s=0.05,
    )


STEPS = 6


@pytest.fixture
def sink() -> Iterator[FrameSink]:
    short = tempfile.mkdtemp(prefix="dh")  # AF_UNIX paths must stay short
    s = FrameSink(Path(short) / "d.sock")
    s.start()
    yield s
    s.close()
    shutil.rmtree(short, ignore_errors=True)


def wait_for(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def healths(sink: FrameSink) -> list[schema.HookHealth]:
    with sink._lock:
        return of_kind(list(sink.events), schema.HookHealth)


def train(steps: int, *, save_to: str = "", after_step: Any = None) -> None:
    """A plain DDP loop; saves a checkpoint to ``save_to`` after step 1, calls ``after_step(i)``."""
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1)).backward()
        dist.all_reduce(torch.ones(3))
        opt.step()
        if save_to and i == 1:
            torch.save(model.state_dict(), save_to)
        if after_step is not None:
            after_step(i)


def test_a_non_utf8_path_and_an_unencodable_event_cost_nothing_else(
    world: None, sink: FrameSink
) -> None:
    ckpt_dir = Path(tempfile.mkdtemp(prefix="dh"))
    ckpt = os.path.join(ckpt_dir, os.fsdecode(b"ck\xff.pt"))  # a non-UTF-8 file name
    h = hook.install(fast(sink))

    def bad_record(i: int) -> None:
        if i == 2:  # a record whose event the wire cannot hold (a size beyond int64)
            h.state.emit(("ckpt", 3, "save", "save", "/x.pt", 0, 1, True, 2**70))

    try:
        train(STEPS, save_to=ckpt, after_step=bad_record)
    finally:
        hook.uninstall()
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    events = sink.close()

    assert [s.step for s in of_kind(events, schema.StepEvent)] == list(range(STEPS))
    (saved,) = of_kind(events, schema.CheckpointEvent)
    assert saved.path == os.path.join(ckpt_dir, "ck\\xff.pt") and saved.num_bytes > 0
    final = of_kind(events, schema.HookHealth)[-1]
    assert final.final and final.num_errors == 0, final.last_error
    assert (final.num_dropped, final.num_unencodable, final.num_oversize) == (1, 1, 0)
    assert final.num_undelivered == final.num_queue_dropped == 0
    assert "checkpoint event (unencodable" in final.last_error


def test_a_failure_in_the_hook_threads_loop_is_counted_and_the_loop_goes_on(
    world: None, sink: FrameSink
) -> None:
    h = hook.install(fast(sink))
    wait_for(lambda: bool(healths(sink)), "the first cycle's health")
    sender = h.thread.sender
    flush = sender.flush
    failed: list[bool] = []

    def flaky_flush() -> None:  # a bug of diag's: one flush raises
        if not failed:
            failed.append(True)
            raise RuntimeError("diag bug in flush")
        flush()

    sender.flush = flaky_flush  # type: ignore[method-assign]
    try:
        wait_for(lambda: bool(failed), "the failing flush")
        train(STEPS)
    finally:
        hook.uninstall()
    events = sink.close()

    assert [s.step for s in of_kind(events, schema.StepEvent)] == list(range(STEPS))
    final = of_kind(events, schema.HookHealth)[-1]
    assert final.final and final.num_errors == 1 and final.num_dropped == 0
    assert final.last_error == "RuntimeError: diag bug in flush"


def test_a_hook_thread_that_ends_anyway_says_why_and_keeps_its_connection(
    world: None, sink: FrameSink
) -> None:
    h = hook.install(fast(sink))
    wait_for(lambda: bool(healths(sink)), "the first cycle's health")

    def fatal() -> list[schema.Event]:
        raise SystemExit("not an Exception: nothing in the loop catches it")

    h.thread.watchdog.check = fatal  # type: ignore[method-assign]
    try:
        wait_for(lambda: healths(sink)[-1].num_errors > 0, "the dying thread's health")
        h.thread.join(10)
        assert not h.thread.is_alive()
        assert not sink.peers_closed(timeout_s=0.2)  # open: the daemon sees a silent hook
    finally:
        hook.uninstall()
        h.thread.sender.close()
    events = sink.close()

    last = of_kind(events, schema.HookHealth)[-1]
    assert not last.final and last.num_errors == 1
    assert last.last_error == (
        "RuntimeError: hook thread ended: SystemExit: not an Exception: nothing in the loop "
        "catches it"
    )
    assert last.health_interval_ns == round(HookConfig().health_interval_s * 1e9)


def test_a_part_of_the_cycle_that_always_fails_costs_neither_the_heartbeat_nor_the_steps(
    world: None, sink: FrameSink
) -> None:
    cfg = dataclasses.replace(fast(sink), health_interval_s=0.1)
    h = hook.install(cfg)

    def broken() -> list[schema.Event]:  # a persistent bug in one part of every cycle
        raise RuntimeError("diag bug in the watchdog")

    h.thread.watchdog.check = broken  # type: ignore[method-assign]
    try:
        train(STEPS)
        wait_for(
            lambda: sum(x.num_errors > 0 for x in healths(sink)) >= 2, "health reports meanwhile"
        )
    finally:
        hook.uninstall()
    events = sink.close()

    assert [s.step for s in of_kind(events, schema.StepEvent)] == list(range(STEPS))
    final = of_kind(events, schema.HookHealth)[-1]
    assert final.final and final.num_dropped == 0
    assert final.last_error == "RuntimeError: diag bug in the watchdog"


def test_the_hook_threads_pauses_are_counted_in_its_health(world: None, sink: FrameSink) -> None:
    # A slice of a microsecond: every unit of work after the first of a cycle ends a slice, so
    # each cycle that has records to send pauses (within its budget; the final cycle never).
    cfg = dataclasses.replace(fast(sink), gil_share=0.25, gil_slice_s=1e-6)
    h = hook.install(cfg)
    try:
        train(STEPS)
        wait_for(lambda: len(of_kind(list(sink.events), schema.StepEvent)) == STEPS, "the steps")
        gil = h.thread.gil
    finally:
        hook.uninstall()
    events = sink.close()
    final = of_kind(events, schema.HookHealth)[-1]
    assert final.final and final.num_errors == 0, final.last_error
    assert final.num_gil_pauses == gil.num_pauses >= 1
    assert final.gil_paused_ns == round(gil.paused_s * 1e9) > 0
    assert final.num_dropped == 0


def test_the_hook_thread_alone_runs_at_a_lower_priority(world: None, sink: FrameSink) -> None:
    """``thread_nice`` lowers the hook thread's priority only: the training thread's is the
    process's as before, and the events flow as ever."""
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    h = hook.install(dataclasses.replace(fast(sink), thread_nice=3))
    try:
        tid = h.thread.native_id
        assert tid is not None
        wait_for(lambda: os.getpriority(os.PRIO_PROCESS, tid) == min(19, mine + 3), "the nice")
        assert os.getpriority(os.PRIO_PROCESS, 0) == mine
        train(STEPS)
    finally:
        hook.uninstall()
    assert h.num_errors == 0, h.last_error
    wait_for(lambda: len([e for e in sink.events if isinstance(e, schema.StepEvent)]) >= STEPS,
             "the steps")  # fmt: skip
