"""diag's operator observer (:mod:`diag.hook.opstats`): the same rows as Kineto's for a real DDP
step, records that end on another thread or after the stop, its bound, what it refuses to load,
and the periodic windows that use it in the hook."""

from __future__ import annotations

import collections
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from diag import schema
from diag.config import HookConfig
from diag.flight_recorder import load_fr_dump
from diag.hook import core as hook
from diag.hook import opstats
from diag.hook.kernels import summarize, summarize_totals
from diag.hook.opstats import OpRow, OpTotals
from diag.hook.profiler import PERIODIC, WindowPlan, on_demand_id, records_aggregated
from diag.kernel_category import kernel_category
from tests.fakes.hook_sink import FrameSink, of_kind
from tests.fakes.hook_trainer import BURN_ITERS, Trainer, wait_for

FAST = {"flush_interval_s": 0.02, "fr_poll_interval_s": 0.1, "reconnect_interval_s": 0.05}


def _kineto_counts(trainer: Trainer, steps: int) -> collections.Counter[tuple[str, str]]:
    ap = torch.autograd.profiler
    config = ap.ProfilerConfig(ap.ProfilerState.KINETO, False, False, False, False, False,
                               ap._ExperimentalConfig(), "")  # fmt: skip
    activities = {ap.ProfilerActivity.CPU}
    ap._prepare_profiler(config, activities)
    ap._enable_profiler(config, activities)
    trainer.steps(steps)
    time.sleep(0.2)  # gloo's worker ends its collective's record
    result = ap._disable_profiler()
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for e in result.events():
        category = kernel_category(e.name(), e.activity_type())
        if category is not None:
            counts[(e.name(), category)] += 1
    return counts


def test_the_observer_counts_what_kineto_records(world: None, observer: Any) -> None:
    trainer = Trainer()
    trainer.steps(3)
    kineto = _kineto_counts(trainer, 2)
    assert observer.start()
    assert not observer.start()  # already on
    trainer.steps(2)
    time.sleep(0.2)
    totals = observer.stop()
    assert not observer.running() and totals.dropped == 0
    ours: collections.Counter[tuple[str, str]] = collections.Counter()
    for row in totals.rows:
        activity = "user_annotation" if row.scope == "user" else "cpu_op"
        category = kernel_category(row.name, activity)
        if category is not None:
            ours[(row.name, category)] += row.calls
        assert 0 <= row.median_ns <= row.max_ns <= row.total_ns
    # every operator, autograd node and collective annotation, as often as Kineto saw it
    assert ours == kineto
    assert ours[("aten::mm", "cpu_op")] >= 2 * BURN_ITERS
    assert ours[("gloo:all_reduce", "collective")] == 2  # ended on gloo's worker thread
    scopes = {r.name: r.scope for r in totals.rows}
    assert scopes["aten::mm"] == "function" and scopes["gloo:all_reduce"] == "user"
    assert scopes["AddmmBackward0"] == "backward"


def test_only_records_begun_while_on_are_counted_wherever_they_end(observer: Any) -> None:
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit
    before = enter("diag.test.before", None)  # begun before the start: not seen
    assert observer.start()
    inside = enter("diag.test.inside", None)
    late = enter("diag.test.late", None)
    ended = threading.Thread(target=leave, args=(inside,))  # ended on another thread
    ended.start()
    ended.join()
    leave(before)
    first = observer.stop()
    leave(late)  # ends after the stop: dropped, no harm
    assert {r.name: r.calls for r in first.rows} == {"diag.test.inside": 1}
    assert observer.start()
    again = enter("diag.test.again", None)
    leave(again)
    second = observer.stop()
    assert {r.name for r in second.rows} == {"diag.test.again"}  # nothing of the last window


def test_calls_beyond_the_bound_are_counted_as_dropped(observer: Any) -> None:
    a = torch.ones(4)
    assert observer.start(max_calls=10)
    for _ in range(30):
        a = a + 1
    totals = observer.stop()
    assert sum(r.calls for r in totals.rows) == 10
    assert totals.dropped >= 20


def test_a_library_is_loaded_only_from_a_private_place_and_for_this_torch(
    observer: Any, tmp_path: Path
) -> None:
    lib = Path(observer.path)
    assert opstats.load(str(lib))[0] is not None
    found, why = opstats.load(str(tmp_path / "diag_opstats_0000.so"))
    assert found is None and "not the observer built for this torch" in why
    found, why = opstats.load(str(tmp_path / lib.name))
    assert found is None and why.startswith("not built for this torch") and "\n" not in why
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(lib, shared / lib.name)
    os.chmod(shared, 0o777)  # anyone could have put it there: it would run inside the job
    found, why = opstats.load(str(shared / lib.name))
    assert found is None and why == f"not loaded: {shared} is writable by others"


def test_a_build_prunes_the_libraries_it_made_stale(tmp_path: Path) -> None:
    """Beside a new library: one built for this same torch installation (an older source) and
    one for a torch since removed go; one for another torch still installed, and one without a
    record of its torch, stay."""
    cache = tmp_path / "opstats"
    cache.mkdir()
    here = opstats._torch_dir()
    other_torch = tmp_path / "venv2" / "torch"
    other_torch.mkdir(parents=True)

    def lib(key: str, torch_dir: str | None) -> Path:
        path = cache / f"diag_opstats_{key}.so"
        path.write_bytes(b"\x7fELF")
        if torch_dir is not None:
            path.with_suffix(opstats.OWNER_SUFFIX).write_text(torch_dir + "\n")
        return path

    new = lib("aaaa", here)
    same = lib("bbbb", here)
    gone = lib("cccc", str(tmp_path / "removed-venv" / "torch"))
    other = lib("dddd", str(other_torch))
    unknown = lib("eeee", None)
    blank = lib("ffff", "")  # a record that names no torch: left alone too
    removed = opstats.prune(new)
    assert sorted(p.name for p in removed) == sorted(
        [same.name, gone.name, same.with_suffix(".torch").name, gone.with_suffix(".torch").name]
    )
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [new.name, new.with_suffix(".torch").name, other.name, other.with_suffix(".torch").name,
         unknown.name, blank.name, blank.with_suffix(".torch").name]
    )  # fmt: skip


def test_totals_become_the_rows_kineto_events_would_give() -> None:
    totals = OpTotals(
        (
            OpRow("aten::mm", "function", 4, 4000, 900, 1500),
            OpRow("aten::tanh", "function", 4, 400, 100, 120),
            OpRow("gloo:all_reduce", "user", 1, 50, 50, 50),
            OpRow("Optimizer.step#SGD.step", "user", 1, 300, 300, 300),  # not summarized
            OpRow("MmBackward0", "backward", 2, 800, 400, 410),
        )
    )
    summary = summarize_totals(totals, 10_000, top_n=2)
    rows = {r.name: r for r in summary.rows}
    # the two heaviest, and every collective however light
    assert set(rows) == {"aten::mm", "MmBackward0", "gloo:all_reduce"}
    assert rows["gloo:all_reduce"].category == "collective"
    assert rows["aten::mm"].category == "cpu_op" and rows["aten::mm"].device == "cpu"
    assert rows["aten::mm"].step_share == pytest.approx(0.4)
    assert (rows["aten::mm"].median_ns, rows["aten::mm"].max_ns) == (900, 1500)
    assert summary.num_ops == 4 + 4 + 2 and summary.num_kernels == 0
    assert summarize([], 10_000, record_shapes=False).rows == []


def test_which_windows_the_observer_takes() -> None:
    cfg = HookConfig()
    periodic = WindowPlan("p20", PERIODIC, 20, 1)
    asked = WindowPlan(on_demand_id("r"), "on_demand", 20, 1, "r")
    assert records_aggregated(periodic, cfg, cpu_ops=True, cuda_work=False)
    assert not records_aggregated(asked, cfg, cpu_ops=True, cuda_work=False)  # evidence: Kineto
    assert not records_aggregated(periodic, cfg, cpu_ops=True, cuda_work=True)  # kernels too
    assert not records_aggregated(periodic, cfg, cpu_ops=False, cuda_work=True)
    shapes = HookConfig(profile_record_shapes=True)
    assert not records_aggregated(periodic, shapes, cpu_ops=True, cuda_work=False)
    off = HookConfig(profile_aggregate=False)
    assert not records_aggregated(periodic, off, cpu_ops=True, cuda_work=False)


def test_periodic_windows_of_a_cpu_rank_use_the_observer(
    world: None, observer: Any, tmp_path: Path
) -> None:
    sink = FrameSink(Path(os.environ["TMPDIR"]) / f"o{os.getpid()}.sock")
    sink.start()
    traces = tmp_path / "traces"
    cfg = HookConfig(daemon_sock=str(sink.path), profile_first_step=3, profile_every_steps=100,
                     trace_dir=str(traces), **FAST)  # fmt: skip
    h = hook.install(cfg)
    wait_for(lambda: h.profiler.opstats is not None)  # the hook thread loads it at its start
    trainer = Trainer()
    # the job profiles itself meanwhile: the observer runs beside torch's profiler
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        trainer.steps(6)
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error
    (win,) = of_kind(events, schema.ProfileWindow)
    assert (win.window_id, win.step, win.ok, win.error) == ("p3", 3, True, "")
    assert win.aggregated and not win.device_only
    assert (win.trace_path, win.trace_bytes) == ("", 0) and not traces.exists()
    rows = {k.name: k for k in of_kind(events, schema.KernelSummary)}
    assert rows["aten::mm"].num_calls >= BURN_ITERS and rows["aten::mm"].input_shapes == ""
    assert rows["gloo:all_reduce"].category == "collective"
    assert all(0 < k.total_ns <= win.duration_ns for k in rows.values() if k.name == "aten::tanh")
    assert win.num_ops >= 4 * BURN_ITERS
    (cost,) = h.thread.window_costs
    assert cost[0] == "p3"
    assert any(e.key == "aten::tanh" for e in prof.key_averages())  # the job's profile intact


def _entries(raw: bytes) -> list[tuple[Any, ...]]:
    dump = load_fr_dump(raw, validate=False)
    return [(e["record_id"], e["profiling_name"], e["state"]) for e in dump["entries"]]


def test_the_native_flight_recorder_dump_is_torchs_without_holding_the_gil(
    world: None, observer: Any
) -> None:
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    t = torch.ones(64)
    for _ in range(40):
        dist.all_reduce(t)
    time.sleep(0.1)  # every one retired
    ours, torchs = observer.dump_fn("fr")(True), c10d._dump_fr_trace(includeStackTraces=False)
    assert _entries(ours) == _entries(torchs) and len(_entries(ours)) >= 40
    probe = load_fr_dump(observer.dump_fn("fr")(False), validate=False)
    assert "entries" not in probe
    assert probe["pg_status"] == load_fr_dump(torchs, validate=False)["pg_status"]

    # While a thread that never yields the GIL otherwise (a switch interval of a minute) dumps,
    # this one runs only if the dump itself lets go of the GIL; torch's own binding never does.
    ran = [0]
    seen: list[int] = []
    done = threading.Event()

    def dumps() -> None:
        deadline = time.monotonic() + 3
        while not ran[0] and time.monotonic() < deadline:
            observer.dump_fn("fr")(True)
        seen.append(ran[0])  # before this thread lets go of the GIL for good
        done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        worker = threading.Thread(target=dumps)
        worker.start()
        while not done.wait(0.001):
            ran[0] += 1
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert seen[0] > 0


def test_the_native_reader_reads_torchs_ring_from_any_record_id(world: None, observer: Any) -> None:
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    read = observer.since_fn()
    assert read is not None, observer.since_why()
    capacity = read(0, False)["capacity"]  # 512 where the hook sized it, else torch's 2,000
    t = torch.ones(8, 3)
    for _ in range(capacity + 100):  # more than the ring holds
        dist.all_reduce(t)
    dist.broadcast(t, 0)
    dist.all_gather([torch.empty(8, 3)], t)
    dist.barrier()

    def torchs_dump() -> dict[str, Any]:
        return load_fr_dump(c10d._dump_fr_trace(includeStackTraces=False), validate=False)

    # every one retired (gloo's worker retires an entry after the call returned): from then on
    # nothing in the ring changes, and the two views must be equal
    wait_for(lambda: all(e["retired"] for e in torchs_dump()["entries"]), timeout_s=10)
    torchs = torchs_dump()
    ours = read(0)
    assert ours["entries"] == torchs["entries"] and len(ours["entries"]) == capacity
    assert ours["pg_config"] == torchs["pg_config"] and ours["pg_status"] == torchs["pg_status"]
    top = ours["entries"][-1]["record_id"]
    assert ours["next_record_id"] == top + 1 and ours["capacity"] == capacity
    assert [e["record_id"] for e in read(top - 2)["entries"]] == [top - 2, top - 1, top]
    assert read(top + 1)["entries"] == [] and "entries" in read(0, False)
    assert read(0, False)["entries"] == [] and read(0, False)["next_record_id"] == top + 1
    assert observer.next_id_fn()() == (top + 1, ours["reset_epoch"])


def test_the_hook_harvests_through_the_native_dump(world: None, observer: Any) -> None:
    sink = FrameSink(Path(os.environ["TMPDIR"]) / f"n{os.getpid()}.sock")
    sink.start()
    h = hook.install(HookConfig(daemon_sock=str(sink.path), **FAST))
    wait_for(lambda: h.thread.dumper.native())  # loaded at the thread's start
    trainer = Trainer()
    trainer.steps(8)
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error
    assert h.thread.dumper.num_native > 0 and h.state.num_fr_dropped == 0
    # the ring is read, not dumped, once a read agreed with torch's dump
    assert h.thread.dumper.verified and h.thread.dumper.num_reads > 0
    steps = [s for s in of_kind(events, schema.StepEvent) if s.num_collectives]
    colls = [c for c in of_kind(events, schema.CollectiveEvent) if c.step >= 0]
    assert len(steps) == 8
    assert len(colls) == sum(s.num_collectives for s in steps)
    assert all(c.origin == "fr" for c in colls)
