"""The device timer (CUDA events for the compute/wait split) against a fake event backend: the
device clock, events that complete late, and never a synchronization on the training side."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook.device_timer import GRADS, OPT, START, CpuEvents, DeviceTimer
from tests.fakes.hook_sink import FrameSink, of_kind


class Device:
    """A fake GPU: a clock the test advances, events that complete when it says so."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.done_up_to = float("inf")  # events recorded at or before this time are complete
        self.syncs = 0
        self.created = 0

    def new_event(self) -> FakeEvent:
        self.created += 1
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, device: Device) -> None:
        self.device, self.t = device, -1.0

    def record(self) -> None:
        self.t = self.device.now_ms

    def query(self) -> bool:
        return 0 <= self.t <= self.device.done_up_to

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.query() and end.query()):  # as CUDA: both must have completed
            raise RuntimeError("cudaErrorNotReady")
        return end.t - self.t

    def synchronize(self) -> None:  # diag must never call it
        self.device.syncs += 1


class Backend:
    name = "fake"

    def __init__(self, device: Device) -> None:
        self.device = device

    def new_event(self) -> FakeEvent:
        return self.device.new_event()


def _step(timer: DeviceTimer, dev: Device, step: int, compute: float, wait: float, opt: float):
    dev.now_ms += compute
    timer.mark(GRADS)
    dev.now_ms += wait
    timer.mark(OPT)
    dev.now_ms += opt
    timer.end_step(step)


def test_the_split_is_the_devices_and_waits_for_completion() -> None:
    dev = Device()
    timer = DeviceTimer(Backend(dev))
    timer.mark(START)
    _step(timer, dev, 0, compute=30.0, wait=5.0, opt=2.0)
    dev.done_up_to = 36.0  # the device has not reached step 0's end yet
    assert timer.poll() == []
    _step(timer, dev, 1, compute=60.0, wait=1.0, opt=2.0)
    dev.done_up_to = 37.0
    (s0,) = timer.poll()
    assert (s0.step, s0.duration_ns, s0.compute_ns, s0.wait_ns) == (0, 37_000_000, 30_000_000,
                                                                     5_000_000)  # fmt: skip
    dev.done_up_to = float("inf")
    (s1,) = timer.poll()
    assert (s1.step, s1.compute_ns, s1.wait_ns, s1.duration_ns) == (1, 60_000_000, 1_000_000,
                                                                     63_000_000)  # fmt: skip
    assert dev.syncs == 0 and timer.num_pending == 0


def test_events_are_reused_and_the_backlog_is_bounded() -> None:
    dev = Device()
    timer = DeviceTimer(Backend(dev), max_pending=4)
    timer.mark(START)
    dev.done_up_to = -1.0  # a stuck device: nothing completes
    for s in range(10):
        _step(timer, dev, s, 1.0, 1.0, 1.0)
    assert timer.num_pending == 4 and timer.num_dropped == 6
    dev.done_up_to = float("inf")
    assert [d.step for d in timer.poll()] == [0, 1, 2, 3]
    created = dev.created
    for s in range(10, 30):
        _step(timer, dev, s, 1.0, 1.0, 1.0)
        timer.poll()
    assert dev.created == created  # the pool served every later step
    assert dev.syncs == 0


def test_a_step_without_backward_has_a_duration_only() -> None:
    timer = DeviceTimer(CpuEvents())
    timer.mark(START)
    timer.end_step(0)
    (s,) = timer.poll()
    assert s.compute_ns is None and s.wait_ns is None and s.duration_ns >= 0


def test_the_hook_times_a_cuda_job_on_the_device_without_synchronizing(
    world: None, sink: FrameSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the job "uses CUDA": torch.cuda.is_initialized() is true and its events are the fake's;
    # the device clock advances as the CPU issues work, a few ms behind
    dev = _fake_cuda(monkeypatch)
    model = nn.Linear(8, 1)
    # no profiler window in these steps: a window ends with one deliberate synchronize (as
    # torch.profiler does, so its kernels are in its trace); every other step has none
    h = hook.install(HookConfig(daemon_sock=sink.path, flush_interval_s=0.05,
                                fr_poll_interval_s=0.1, profile_first_step=10**6))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(12):
        dev.now_ms += 1.0  # data and forward
        loss = model(torch.randn(4, 8)).pow(2).mean()
        dev.now_ms += 20.0 + (10.0 if i >= 6 else 0.0)  # backward: slower from step 6
        loss.backward()
        dev.now_ms += 4.0  # the all-reduce the optimizer waits for
        opt.step()
        opt.zero_grad()
    hook.uninstall()
    steps = sorted(of_kind(sink.close(), schema.StepEvent), key=lambda s: s.step)
    assert h.num_errors == 0, h.last_error
    assert dev.syncs == 0
    timed = [s for s in steps if s.device_compute_ns is not None]
    assert len(timed) >= 8, [(s.step, s.device_compute_ns) for s in steps]
    for s in timed:
        slow = s.step >= 6
        # marks: GRADS after backward's 20 (30) ms; OPT right after the 4 ms wait
        assert s.device_compute_ns == pytest.approx((31.0 if slow else 21.0) * 1e6), s
        assert s.device_wait_ns == pytest.approx(4.0e6), s
        assert s.device_duration_ns == pytest.approx((35.0 if slow else 25.0) * 1e6), s


def test_a_job_that_initializes_cuda_late_is_timed_on_the_device_from_a_later_step(
    world: None, sink: FrameSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPU job is asked whether CUDA is initialized at its first steps and then every 16th
    (not every step: a Python call saved); one that initializes it at step 6 is timed on the
    device from the next asked step on."""
    _fake_cuda(monkeypatch)
    asked: list[int] = []
    cuda_on = [False]
    h = hook.install(HookConfig(daemon_sock=sink.path, flush_interval_s=0.05,
                                fr_poll_interval_s=0.1, profile_first_step=10**6))  # fmt: skip

    def is_initialized() -> bool:
        if threading.current_thread() is threading.main_thread():  # the steps' own question
            asked.append(h.tracker.step)
        return cuda_on[0]

    monkeypatch.setattr(torch.cuda, "is_initialized", is_initialized)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(40):
        cuda_on[0] = i >= 6
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    hook.uninstall()
    steps = sorted(of_kind(sink.close(), schema.StepEvent), key=lambda s: s.step)
    assert h.num_errors == 0, h.last_error
    assert asked == [0, 1, 2, 3, 16]
    assert h.device is not None
    timed = [s.step for s in steps if s.device_duration_ns is not None]
    assert timed and min(timed) >= 17 and max(timed) == 39


def test_fast_steps_keep_their_device_times_between_harvests(
    world: None, sink: FrameSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On an H200 a 300-step job of 2 ms steps kept device times for its first 64 steps only: the
    # hook read the events back only when it released steps (at its Flight Recorder harvests,
    # seconds apart) and the timer held at most 64 steps in flight. Steps here take well under a
    # millisecond of CPU, many per hook cycle, and harvests are far apart.
    dev = _fake_cuda(monkeypatch)
    model = nn.Linear(8, 1)
    h = hook.install(HookConfig(daemon_sock=sink.path, flush_interval_s=0.05,
                                fr_poll_interval_s=30.0, profile_first_step=10**6))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    for _ in range(300):
        dev.now_ms += 2.0
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    hook.uninstall()
    steps = of_kind(sink.close(), schema.StepEvent)
    assert h.num_errors == 0, h.last_error
    assert len(steps) == 300
    timed = [s for s in steps if s.device_duration_ns is not None]
    assert len(timed) >= 298, f"{len(timed)} of 300 steps with device times"


def _fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Device:
    """The job "uses CUDA": ``torch.cuda.is_initialized()`` is true and its events are a fake
    device's (which counts synchronizations)."""
    dev = Device()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: FakeEvent(dev))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: _count(dev))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    props = type("Props", (), {"uuid": "GPU-fake", "name": "Fake"})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    return dev


def _count(dev: Device) -> Any:
    dev.syncs += 1
