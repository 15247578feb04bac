"""Profiler windows in the hook: periodic and on-demand (control frames), world-size-1 gloo."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook.events import EventFactory
from diag.hook.kernels import TraceFiles, WindowSummary, summarize, window_events
from diag.hook.profiler import ProfilerWindows, RequestFilter, WindowPlan
from diag.proto import diag_pb2 as pb
from diag.transport import framing as frames
from tests.fakes.hook_sink import FrameSink, of_kind
from tests.fakes.hook_trainer import BURN_ITERS, Trainer, wait_for

# Kineto's windows (diag's operator observer, which periodic CPU windows use when it is built,
# has its own tests: test_opstats.py)
FAST = {"flush_interval_s": 0.02, "fr_poll_interval_s": 0.1, "reconnect_interval_s": 0.05,
        "profile_aggregate": False}  # fmt: skip
NO_PERIODIC = {"profile_every_steps": 0}


class ControlSink(FrameSink):
    """The frame sink that can also write control frames back on the hook's connection."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.conns: list[socket.socket] = []
        self.connected = threading.Event()

    def _read(self, conn: socket.socket) -> None:
        self.conns.append(conn)
        self.connected.set()
        super()._read(conn)

    def send(self, payload: bytes) -> None:
        for conn in self.conns:
            conn.sendall(payload)


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    short = Path(tempfile.mkdtemp(prefix="dh"))  # AF_UNIX paths must stay short
    yield short
    shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def sink(tmp_short: Path) -> Iterator[ControlSink]:
    s = ControlSink(tmp_short / "d.sock")
    s.start()
    yield s
    s.close()


def by_window(events: list[schema.Event]) -> dict[str, schema.ProfileWindow]:
    return {w.window_id: w for w in of_kind(events, schema.ProfileWindow)}


def request(request_id: str, **fields: Any) -> bytes:
    msg = pb.ControlMessage(profile=pb.ProfileRequest(request_id=request_id, **fields))
    return frames.encode_frame(msg.SerializeToString())


def test_periodic_window_summaries_and_trace(
    world: None, sink: ControlSink, tmp_short: Path
) -> None:
    traces = tmp_short / "traces"
    cfg = HookConfig(daemon_sock=sink.path, profile_first_step=2, profile_every_steps=100,
                     trace_dir=str(traces), profile_record_shapes=True, **FAST)  # fmt: skip
    h = hook.install(cfg)
    Trainer().steps(5)
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error
    assert not h.profiler.device_work  # backward from CPU tensors: the job computes on the CPU

    (win,) = of_kind(events, schema.ProfileWindow)
    assert (win.window_id, win.trigger, win.step, win.num_steps) == ("p2", "periodic", 2, 1)
    assert win.ok and not win.late and win.device == "cpu" and win.num_kernels == 0
    assert not win.device_only
    assert win.duration_ns == win.end_ns - win.start_ns > 0
    (step2,) = [s for s in of_kind(events, schema.StepEvent) if s.step == 2]
    assert step2.start_ns <= win.start_ns < win.end_ns <= step2.end_ns

    rows = {k.name: k for k in of_kind(events, schema.KernelSummary)}
    assert all(k.window_id == "p2" and k.step == 2 for k in rows.values())
    mm, tanh = rows["aten::mm"], rows["aten::tanh"]
    assert mm.num_calls >= BURN_ITERS and tanh.num_calls >= BURN_ITERS
    assert mm.category == tanh.category == "cpu_op" and mm.device == "cpu"
    for k in (mm, tanh):
        assert 0 < k.median_ns <= k.max_ns <= k.total_ns
        assert k.step_share == pytest.approx(k.total_ns / win.duration_ns)
    assert mm.total_ns + tanh.total_ns <= win.duration_ns  # disjoint top-level work
    assert rows["gloo:all_reduce"].category == "collective"  # DDP's gradient all-reduce
    assert rows["c10d::allreduce_"].category == "collective"
    assert win.num_ops >= 4 * BURN_ITERS

    assert win.trace_path == "rank0/p2.json.gz"
    path = traces / win.trace_path
    assert win.trace_bytes == path.stat().st_size
    trace = json.loads(gzip.decompress(path.read_bytes()))
    base = trace["baseTimeNanoseconds"]
    mms = [e for e in trace["traceEvents"] if e.get("name") == "aten::mm" and e.get("ph") == "X"]
    assert len(mms) == mm.num_calls
    # the shapes of the heaviest call: on a quiet host the 64x64 burn, on a busy one whichever
    # call was preempted longest (a 1x4 by 4x16 product in CI)
    heaviest = max(mms, key=lambda e: e["dur"])
    assert mm.input_shapes == str(heaviest["args"]["Input Dims"]), heaviest
    assert "[[64, 64], [64, 64]]" in {str(e["args"]["Input Dims"]) for e in mms}
    for e in mms:  # ts (us) + baseTimeNanoseconds = wall-clock ns inside the window
        start = base + round(e["ts"] * 1000)
        assert win.start_ns - 1_000_000 <= start <= win.end_ns


def test_first_window_at_step_zero_and_trace_files_bounded(world: None, tmp_short: Path) -> None:
    traces = tmp_short / "traces"
    cfg = HookConfig(profile_first_step=0, profile_every_steps=2, trace_dir=str(traces),
                     max_traces_per_rank=2, **FAST)  # fmt: skip
    h = hook.install(cfg)
    trainer = Trainer()
    trainer.steps(9, settle=h)
    hook.uninstall()
    assert h.num_errors == 0, h.last_error
    assert [c[0] for c in h.thread.window_costs] == ["p0", "p2", "p4", "p6", "p8"]
    assert sorted(os.listdir(traces / "rank0")) == ["p6.json.gz", "p8.json.gz"]
    # periodic windows record no input shapes unless asked (~half the profiler's cost per op)
    trace = json.loads(gzip.decompress((traces / "rank0" / "p8.json.gz").read_bytes()))
    ops = [e for e in trace["traceEvents"] if e.get("name") == "aten::mm" and e.get("ph") == "X"]
    assert ops and not any("Input Dims" in e.get("args", {}) for e in ops)

    small = HookConfig(profile_first_step=0, profile_every_steps=2, trace_dir=str(tmp_short / "s"),
                       max_trace_bytes=10, **FAST)  # fmt: skip
    h = hook.install(small)
    Trainer().steps(1)
    hook.uninstall()
    assert not list((tmp_short / "s" / "rank0").iterdir())  # no trace, no temporary file left
    assert h.thread.window_costs[0][0] == "p0"


def test_on_demand_requests_from_control_frames(world: None, sink: ControlSink) -> None:
    h = hook.install(HookConfig(daemon_sock=sink.path, **NO_PERIODIC, **FAST))
    trainer = Trainer()
    trainer.steps(2)
    assert sink.connected.wait(10)
    cur = h.tracker.step  # this step has begun: at_step=cur is late
    sink.send(
        request("r1", at_step=cur + 3, num_steps=2)
        + request("r1", at_step=cur + 1)  # duplicate: ignored
        + request("old", at_step=cur + 1, expires_ns=time.time_ns() - 1)  # expired: ignored
        + request("other", at_step=cur + 1, ranks=[5])  # not for this rank
        + frames.encode_frame(b"\xff\xff\xff")  # malformed: counted, ignored
        + frames.encode_frame(b"")  # no body: counted, ignored
        + request("late", at_step=cur)
    )
    wait_for(lambda: len(h.profiler.inbox) == 2 and h.num_errors == 2)
    trainer.steps(6, settle=h)
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 2

    wins = by_window(events)
    assert set(wins) == {"d-r1", "d-late"}
    r1, late = wins["d-r1"], wins["d-late"]
    assert (r1.trigger, r1.request_id, r1.step, r1.num_steps, r1.late) == (
        "on_demand", "r1", cur + 3, 2, False)  # fmt: skip
    assert (late.step, late.num_steps, late.late, late.ok) == (cur + 1, 1, True, True)
    steps = {s.step: s for s in of_kind(events, schema.StepEvent)}
    assert steps[cur + 3].start_ns <= r1.start_ns < r1.end_ns <= steps[cur + 4].end_ns
    assert r1.end_ns > steps[cur + 3].end_ns  # two steps
    tanh = [k for k in of_kind(events, schema.KernelSummary)
            if k.window_id == "d-r1" and k.name == "aten::tanh"]  # fmt: skip
    assert tanh[0].num_calls >= 2 * BURN_ITERS and tanh[0].step == cur + 3
    assert tanh[0].input_shapes.startswith("[[")  # asked for: shapes, whatever the config says


def test_profiler_busy_window_is_reported_and_user_profile_intact(
    world: None, sink: ControlSink
) -> None:
    h = hook.install(HookConfig(daemon_sock=sink.path, profile_first_step=1,
                                profile_every_steps=100, **FAST))  # fmt: skip
    trainer = Trainer()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        trainer.steps(3)  # step 1 begins while the job's own profiler runs
    trainer.steps(1)
    hook.uninstall()
    events = sink.close()
    (win,) = of_kind(events, schema.ProfileWindow)
    assert (win.window_id, win.ok, win.error, win.step) == ("p1", False, "profiler busy", 1)
    assert not of_kind(events, schema.KernelSummary)
    assert any(e.key == "aten::tanh" for e in prof.key_averages())
    assert h.num_errors == 0, h.last_error


def test_periodic_schedule_skips_windows_that_would_overlap() -> None:
    cfg = HookConfig(profile_first_step=2, profile_every_steps=3, profile_num_steps=4)
    w = ProfilerWindows(cfg, torch, clock=time.perf_counter_ns, wall_offset_ns=0,
                        on_error=lambda exc: None)  # fmt: skip
    due = {s: p.window_id for s in range(20) if (p := w._due(s)) is not None}
    assert due == {2: "p2", 5: "p5", 8: "p8", 11: "p11", 14: "p14", 17: "p17"}
    w = ProfilerWindows(cfg, torch, clock=time.perf_counter_ns, wall_offset_ns=0,
                        on_error=lambda exc: None)  # fmt: skip
    w.step_begins(2)
    assert w.active is not None and w.stop_after == 5
    for s in range(2, 10):  # p5 falls inside p2's window and is skipped; p8 is taken
        w.step_ends(s)
        w.busy = False  # the hook thread took the result
        w.step_begins(s + 1)
    ids = [d.plan.window_id for d in w.done]
    assert ids == ["p2"] and w.active is not None and w.active.window_id == "p8"
    w.close()
    assert [d.plan.window_id for d in w.done] == ["p2", "p8"] and w.done[1].error


def test_a_window_is_stopped_only_once_its_result_is_handed_over() -> None:
    """A detach waits on another thread for the open window to stop, then runs the hook
    thread's final cycle: the result must be in ``done`` by the time ``active`` reads None (CI on
    a busy machine: ``active`` was cleared first, the final cycle ran while the training thread
    was still stopping the profiler, and the window's event was lost)."""
    release, entered = threading.Event(), threading.Event()

    def disable() -> object:
        entered.set()
        release.wait(10)
        return object()

    fake_profiler = type(
        "P",
        (),
        {
            "_disable_profiler": staticmethod(disable),
            "_run_on_profiler_stop": staticmethod(lambda: None),
        },
    )
    fake_torch = type("T", (), {"autograd": type("A", (), {"profiler": fake_profiler})})
    w = ProfilerWindows(HookConfig(), fake_torch, clock=time.perf_counter_ns, wall_offset_ns=0,
                        on_error=lambda exc: None)  # fmt: skip
    w.active, w.stop_after = WindowPlan("p1", "periodic", 1, 2), 2
    training = threading.Thread(target=w.step_ends, args=(2,))
    training.start()
    assert entered.wait(10)  # the training thread is inside the profiler's stop
    seen: list[int] = []
    detacher = threading.Thread(target=lambda: (w.close_at_boundary(10), seen.append(len(w.done))))
    detacher.start()
    time.sleep(0.05)
    assert not seen  # still waiting: the window has not stopped
    release.set()
    training.join(10)
    detacher.join(10)
    assert seen == [1] and w.active is None and w.done[0].plan.window_id == "p1"


def test_ranks_that_get_a_request_late_still_share_one_step() -> None:
    """Four ranks beside a busy loop once got a request for step 82 at steps 92-95, and each took
    its window at its next step: four steps, no rank comparable. Moved on by whole strides of
    the request's ``realign_steps`` (the analyzer's lead), they share one."""

    def plan(realign: int) -> WindowPlan:
        return WindowPlan("d-x", "on_demand", 82, 1, "x", realign=realign)

    for got_at, start in [(83, 102), (92, 102), (95, 102), (102, 102), (103, 122)]:
        p = plan(20)
        p.realign_after(got_at)
        assert (p.start_step, p.late) == (start, True), got_at
    for got_at in (60, 82):  # in time: as asked
        p = plan(20)
        p.realign_after(got_at)
        assert (p.start_step, p.late) == (82, False)
    p = plan(0)  # no stride (an older analyzer): the next boundary, as before
    p.realign_after(95)
    assert (p.start_step, p.late) == (82, False)
    # the request's stride reaches the plan, and the training thread realigns as it takes it in
    f = RequestFilter(default_num_steps=1)
    planned = f.plan(pb.ProfileRequest(request_id="x", at_step=82, realign_steps=20), rank=3)
    assert planned is not None and planned.realign == 20
    w = ProfilerWindows(HookConfig(profile_every_steps=0), torch, clock=time.perf_counter_ns,
                        wall_offset_ns=0, on_error=lambda exc: None)  # fmt: skip
    w.inbox.append(planned)
    w.busy = True  # the hook thread holds a result: no window starts at this boundary
    w.step_begins(95)
    assert [(q.start_step, q.late) for q in w.pending] == [(102, True)]
    assert w._due(101) is None and w._due(102) is planned


class _FakeCudaTorch:
    """The parts of torch a window's start and stop touch, on a rank whose CUDA is in use: what
    the profiler was asked to record, without a GPU (the activities and the shapes flag)."""

    def __init__(self) -> None:
        self.asked: list[tuple[set[str], bool]] = []
        fake = self

        class Activity:
            CPU, CUDA = "CPU", "CUDA"

        def enable(config: tuple, activities: set[str]) -> None:
            fake.asked.append((set(activities), config[1]))

        self.cuda = type("Cuda", (), {"is_available": staticmethod(lambda: True),
                                      "is_initialized": staticmethod(lambda: True),
                                      "current_device": staticmethod(lambda: 0),
                                      "synchronize": staticmethod(lambda: None)})  # fmt: skip
        self._C = type("C", (), {"_autograd": type("A", (), {
            "_profiler_enabled": staticmethod(lambda: False)})})  # fmt: skip
        profiler = type("P", (), {
            "ProfilerActivity": Activity,
            "ProfilerState": type("S", (), {"KINETO": "KINETO"}),
            "ProfilerConfig": staticmethod(lambda *a: a),
            "_ExperimentalConfig": staticmethod(lambda: None),
            "_prepare_profiler": staticmethod(lambda config, activities: None),
            "_run_on_profiler_start": staticmethod(lambda: None),
            "_enable_profiler": staticmethod(enable),
            "_disable_profiler": staticmethod(lambda: object()),
            "_run_on_profiler_stop": staticmethod(lambda: None),
        })  # fmt: skip
        self.autograd = type("AG", (), {"profiler": profiler})


def test_a_periodic_window_on_a_cuda_rank_records_the_device_only() -> None:
    """A periodic window on a rank computing on CUDA records kernels, not CPU operators (each
    costs the training thread ~0.5 us while recorded and ~1.3-2 us at the stop); an on-demand one
    records both, with shapes (diag replay); ``profile_cpu_ops_on_cuda`` puts them back; a rank
    with CUDA initialized but no backward from a CUDA tensor, and a CPU-only rank, record their
    operators. The window's event says which (``device_only``)."""
    ev = EventFactory(host="h", rank=0, local_rank=0, job_id="j")

    def window(
        cfg: HookConfig, plan: WindowPlan, fake: _FakeCudaTorch, *, work: bool = True
    ) -> tuple[set, bool, bool]:
        w = ProfilerWindows(cfg, fake, clock=time.perf_counter_ns, wall_offset_ns=0,
                            on_error=lambda exc: pytest.fail(repr(exc)))  # fmt: skip
        w.device_work = work  # a backward from a CUDA tensor was seen (the hook's own flag)
        w.pending.append(plan)
        assert w.step_begins(plan.start_step)
        w.step_ends(plan.start_step)
        done = w.done.popleft()
        (event,) = window_events(ev, done, WindowSummary())
        assert isinstance(event, schema.ProfileWindow) and event.device_only == done.device_only
        ((activities, shapes),) = fake.asked
        return activities, shapes, event.device_only

    periodic = WindowPlan("p20", "periodic", 20, 1)
    on_demand = WindowPlan("d-x", "on_demand", 20, 1, "x")
    cfg = HookConfig(profile_every_steps=0)
    assert window(cfg, periodic, _FakeCudaTorch()) == ({"CUDA"}, False, True)
    assert window(cfg, on_demand, _FakeCudaTorch()) == ({"CPU", "CUDA"}, True, False)
    opt_in = HookConfig(profile_every_steps=0, profile_cpu_ops_on_cuda=True)
    assert window(opt_in, periodic, _FakeCudaTorch()) == ({"CPU", "CUDA"}, False, False)
    # CUDA initialized with nothing computed there (a CPU job whose DataLoader pins memory): its
    # operators are all a window can see
    assert window(cfg, periodic, _FakeCudaTorch(), work=False) == ({"CPU", "CUDA"}, False, False)
    assert not torch.cuda.is_available()  # this machine: the real profiler, CPU operators
    w = ProfilerWindows(cfg, torch, clock=time.perf_counter_ns, wall_offset_ns=0,
                        on_error=lambda exc: pytest.fail(repr(exc)))  # fmt: skip
    w.pending.append(WindowPlan("p20", "periodic", 20, 1))
    assert w.step_begins(20)
    torch.ones(4).add_(1)
    w.step_ends(20)
    done = w.done.popleft()
    assert not done.device_only and done.result is not None
    summary = summarize(done.result.events(), max(1, done.end_ns - done.start_ns),
                        record_shapes=False)  # fmt: skip
    assert summary.num_ops > 0 and not window_events(ev, done, summary)[-1].device_only


def test_request_filter() -> None:
    f = RequestFilter(default_num_steps=3)
    req = pb.ProfileRequest(request_id="a", at_step=7)
    plan = f.plan(req, rank=0, now_ns=100)
    assert plan is not None and (plan.window_id, plan.start_step, plan.num_steps) == ("d-a", 7, 3)
    assert f.plan(req, rank=0, now_ns=100) is None  # duplicate
    assert f.plan(pb.ProfileRequest(request_id="b", expires_ns=99), rank=0, now_ns=100) is None
    assert f.plan(pb.ProfileRequest(request_id="c", ranks=[1, 2]), rank=0, now_ns=100) is None
    assert f.plan(pb.ProfileRequest(request_id="d", ranks=[0]), rank=0, now_ns=100) is not None
    with pytest.raises(ValueError):
        f.plan(pb.ProfileRequest(), rank=0)


@pytest.mark.parametrize("rid", ["../../x", "a/b", "..\\x", "x" * 65, "a b", "\x00", "é"])
def test_a_request_id_that_is_not_a_plain_token_never_names_a_file(
    rid: str, tmp_path: Path
) -> None:
    """The id becomes the trace file's name: '../' in it once wrote, and pruned, outside."""
    with pytest.raises(ValueError, match="not a plain token"):
        RequestFilter(default_num_steps=1).plan(pb.ProfileRequest(request_id=rid), rank=0)
    victim = tmp_path / "mine.json.gz"
    victim.write_bytes(b"user data")
    traces = TraceFiles(str(tmp_path / "traces"), max_files=1, max_bytes=1 << 20)
    with pytest.raises(ValueError, match="not a plain token"):
        traces.write(None, 0, f"d-{rid}", lambda: None)
    with pytest.raises(ValueError, match="not a plain token"):
        traces.write(None, 0, "../../mine", lambda: None)
    assert victim.read_bytes() == b"user data" and not (tmp_path / "traces").exists()


class FakeEvent:
    def __init__(self, name: str, activity: str, dur: int, device: str = "CPU") -> None:
        self._name, self._activity, self._dur, self._device = name, activity, dur, device

    def name(self) -> str:
        return self._name

    def activity_type(self) -> str:
        return self._activity

    def duration_ns(self) -> int:
        return self._dur

    def device_type(self) -> str:
        return self._device

    def device_index(self) -> int:
        return 0

    def shapes(self) -> list[list[int]]:
        return [[self._dur]]


def test_summarize_categories_top_n_and_collectives() -> None:
    events = [FakeEvent(f"op{i}", "cpu_op", 1000 + i) for i in range(5)]
    events += [FakeEvent("op4", "cpu_op", 10), FakeEvent("op4", "cpu_op", 7)]
    events += [FakeEvent("ncclDevKernel_AllReduce", "kernel", 5, "CUDA"),
               FakeEvent("sgemm", "kernel", 3000, "CUDA"),
               FakeEvent("Memcpy HtoD", "gpu_memcpy", 50, "CUDA"),
               FakeEvent("cudaLaunchKernel", "cuda_runtime", 9999),
               FakeEvent("my_region", "user_annotation", 9999)]  # fmt: skip
    out = summarize(events, 10_000, record_shapes=True, top_n=3, pause=lambda: None)
    rows = {(r.name, r.category, r.device): r for r in out.rows}
    assert set(rows) == {("sgemm", "kernel", "cuda:0"), ("op4", "cpu_op", "cpu"),
                         ("op3", "cpu_op", "cpu"),
                         ("ncclDevKernel_AllReduce", "collective", "cuda:0")}  # fmt: skip
    op4 = rows[("op4", "cpu_op", "cpu")]
    assert (op4.num_calls, op4.total_ns, op4.median_ns, op4.max_ns) == (3, 1021, 10, 1004)
    assert op4.step_share == pytest.approx(0.1021) and op4.input_shapes == "[[1004]]"
    assert (out.num_ops, out.num_kernels) == (7, 2)


def test_summarize_pauses_every_chunk_of_events() -> None:
    # the hook thread passes its GIL pacing's tick with a small chunk (a window of ~10k events
    # had run in 2,000-event pieces, each holding the GIL for ~6-10 ms)
    events = [FakeEvent(f"op{i % 3}", "cpu_op", 10 + i) for i in range(100)]
    pauses: list[int] = []
    fine = summarize(events, 10_000, record_shapes=False, pause=lambda: pauses.append(1), chunk=32)
    assert len(pauses) == 3  # after events 32, 64 and 96
    coarse = summarize(events, 10_000, record_shapes=False, pause=lambda: None)
    assert fine.rows == coarse.rows and fine.num_ops == coarse.num_ops == 100


class OldTorchEvent(FakeEvent):
    """A ``_KinetoEvent`` of torch < 2.12 (2.11 on an H200): no ``activity_type()``; whether it
    is a user annotation and its device say what it is."""

    activity_type = None  # type: ignore[assignment]

    def is_user_annotation(self) -> bool:
        return self._activity.endswith("user_annotation")


def test_summarize_without_activity_type_as_torch_before_2_12() -> None:
    # the same events as above, as an older torch hands them over: before, every window of a
    # CUDA job failed on the missing method (AttributeError) and left no summary at all
    events = [OldTorchEvent(f"op{i}", "cpu_op", 1000 + i) for i in range(5)]
    events += [OldTorchEvent("op4", "cpu_op", 10), OldTorchEvent("op4", "cpu_op", 7)]
    events += [OldTorchEvent("ncclDevKernel_AllReduce", "kernel", 5, "DeviceType.CUDA"),
               OldTorchEvent("sgemm", "kernel", 3000, "DeviceType.CUDA"),
               OldTorchEvent("Memcpy HtoD (Pageable -> Device)", "", 50, "DeviceType.CUDA"),
               OldTorchEvent("Memset (Device)", "", 40, "DeviceType.CUDA"),
               OldTorchEvent("cudaLaunchKernel", "", 9999, "DeviceType.CPU"),
               OldTorchEvent("cuLaunchKernel", "", 9999, "DeviceType.CPU"),
               OldTorchEvent("Activity Buffer Request", "", 9999, "DeviceType.CPU"),
               OldTorchEvent("my_region", "user_annotation", 9999),
               OldTorchEvent("nccl:all_reduce", "user_annotation", 80),
               OldTorchEvent("c10d::allreduce_", "", 70, "DeviceType.CPU")]  # fmt: skip
    out = summarize(events, 10_000, record_shapes=False, top_n=5, pause=lambda: None)
    rows = {(r.name, r.category, r.device) for r in out.rows}
    assert rows == {("sgemm", "kernel", "cuda:0"), ("op4", "cpu_op", "cpu"),
                    ("op3", "cpu_op", "cpu"), ("op2", "cpu_op", "cpu"), ("op1", "cpu_op", "cpu"),
                    ("ncclDevKernel_AllReduce", "collective", "cuda:0"),
                    ("nccl:all_reduce", "collective", "cpu"),
                    ("c10d::allreduce_", "collective", "cpu")}  # fmt: skip
    assert (out.num_ops, out.num_kernels) == (8, 2)


def _detach_from_another_thread(h: hook.Hook) -> threading.Thread:
    t = threading.Thread(target=h.detach, name="detacher")
    t.start()
    return t


def test_a_detach_from_another_thread_stops_the_window_on_the_training_thread(
    world: None, sink: ControlSink
) -> None:
    """Kineto's state belongs to the thread that enabled it: a detach (diag attach's watcher
    thread) must not disable it from its own thread (that left the training thread profiling
    for good, and crashed workers); the training thread stops it at its next step end."""
    cfg = HookConfig(daemon_sock=sink.path, profile_first_step=1, profile_every_steps=100,
                     profile_num_steps=50, **FAST)  # fmt: skip
    h = hook.install(cfg)
    trainer = Trainer()
    trainer.steps(3)
    assert h.profiler.active is not None and torch.autograd.profiler._is_profiler_enabled
    detacher = _detach_from_another_thread(h)
    while detacher.is_alive():
        trainer.steps(1)
    assert not torch._C._autograd._profiler_enabled()
    assert h.profiler.active is None and not h.active
    events = sink.close()
    (win,) = of_kind(events, schema.ProfileWindow)
    assert win.window_id == "p1" and not win.ok and "cut short" in win.error
    assert h.num_errors == 0, h.last_error


def test_a_window_left_open_by_a_detach_stops_at_the_next_optimizer_step(
    world: None, sink: ControlSink
) -> None:
    """No step ends while the detach waits (a stalled training thread): the hook is removed
    anyway, and one optimizer step hook left behind stops the window on the training thread at
    its next step, then removes itself."""
    cfg = HookConfig(daemon_sock=sink.path, profile_first_step=1, profile_every_steps=100,
                     profile_num_steps=50, **FAST)  # fmt: skip
    h = hook.install(cfg)
    trainer = Trainer()
    trainer.steps(3)
    assert h.profiler.active is not None
    _detach_from_another_thread(h).join(30)
    assert not h.active and h.profiler.active is not None  # still on: nobody stepped
    assert torch._C._autograd._profiler_enabled()
    hooks = importlib.import_module("torch.optim.optimizer")._global_optimizer_post_hooks
    before = len(hooks)
    trainer.steps(1)
    assert not torch._C._autograd._profiler_enabled() and h.profiler.active is None
    assert len(hooks) == before - 1
    trainer.steps(1)  # nothing left behind
    sink.close()
