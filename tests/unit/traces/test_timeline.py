"""The merged run timeline, from a synthetic run: two ranks on two hosts, one host's clock off."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from diag import schema
from diag.errors import InputError
from diag.store.run_store import RunStore
from diag.traces.timeline import clock_offsets, merged_trace, parse_steps

MS = 1_000_000
T0 = 1_790_000_000_000_000_000  # analyzer clock at step 0
SKEW = 2_000 * MS  # node-b's clock runs 2 s behind the analyzer: analyzer = host + SKEW
STEP = 100 * MS
PHASES = {"data_wait_ns": 5, "forward_ns": 30, "backward_ns": 50, "optimizer_ns": 10, "other_ns": 5}


class _Src:
    def __init__(self, host: str, rank: int) -> None:
        self.host, self.rank, self.seq = host, rank, itertools.count()

    def env(self, ts_ns: int, step: int = -1) -> dict[str, Any]:
        return {
            "ts_ns": ts_ns,
            "host": self.host,
            "rank": self.rank,
            "local_rank": 0,
            "job_id": "j",
            "source": f"{self.host}/rank{self.rank}/1",
            "seq": next(self.seq),
            "step": step,
        }


def _trace(path: Path, events: list[dict[str, Any]], base_ns: int | None) -> None:
    doc: dict[str, Any] = {"traceEvents": events}
    if base_ns is not None:
        doc["baseTimeNanoseconds"] = base_ns
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def _x(name: str, cat: str, ts_us: float, dur_us: float, pid: int, tid: int) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts_us, "dur": dur_us, "pid": pid, "tid": tid}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    store = RunStore.create(tmp_path)
    events: list[schema.Event] = []
    for host, rank in (("node-a", 0), ("node-b", 1)):
        src = _Src(host, rank)
        host_off = SKEW if host == "node-b" else 0
        for step in range(4):
            start = T0 + step * STEP - host_off  # the host's own clock
            events.append(
                schema.StepEvent(
                    **src.env(start + STEP, step),
                    start_ns=start,
                    end_ns=start + STEP,
                    duration_ns=STEP,
                    compute_ns=95 * MS,
                    **{k: v * MS for k, v in PHASES.items()},
                )
            )
            enq = start + 60 * MS
            dur = None if rank == 1 else 20 * MS  # gloo on rank 1: no durations
            events.append(
                schema.CollectiveEvent(
                    **src.env(enq, step),
                    op="all_reduce",
                    pg_name="0",
                    seq_id=step,
                    num_bytes=1024,
                    enqueue_ns=enq,
                    start_ns=None if dur is None else enq + MS,
                    duration_ns=dur,
                )
            )
        # A profiler window over step 2, and one whose trace was deleted.
        w_start = T0 + 2 * STEP - host_off
        events.append(
            schema.ProfileWindow(
                **src.env(w_start + STEP, 2),
                window_id="p2",
                trigger="periodic",
                start_ns=w_start,
                end_ns=w_start + STEP,
                duration_ns=STEP,
                trace_path=f"rank{rank}/p2.json.gz",
            )
        )
        events.append(
            schema.ProfileWindow(
                **src.env(w_start + 2 * STEP, 3),
                window_id="p3",
                trigger="periodic",
                start_ns=w_start + STEP,
                end_ns=w_start + 2 * STEP,
                duration_ns=STEP,
                trace_path=f"rank{rank}/p3.json.gz",
            )
        )
    # Rank 0: a torch-style trace (base + relative ts) at wall-clock times inside its window.
    base = T0 // 10**9 * 10**9
    rel_us = (T0 + 2 * STEP - base) / 1000
    _trace(
        tmp_path / "traces/rank0/p2.json.gz",
        [
            _x("aten::mm", "cpu_op", rel_us + 1000, 500, 7, 7),
            _x("sgemm", "kernel", rel_us + 1200, 300, 0, 20),
            _x("cudaLaunchKernel", "cuda_runtime", rel_us + 1100, 5, 7, 7),
        ],
        base,
    )
    # Rank 1: another tool's trace on its own clock: aligned at the window start.
    _trace(
        tmp_path / "traces/rank1/p2.json.gz",
        [
            _x("aten::mm", "cpu_op", 0, 500, 9, 9),
            _x("sgemm", "kernel", 200, 300, 1, 20),
        ],
        None,
    )
    src_a, src_b = _Src("node-a", -1), _Src("node-b", -1)
    events.append(schema.ClockSync(**src_a.env(T0), offset_ns=40_000, rtt_ns=100_000))
    events.append(schema.ClockSync(**src_b.env(T0), offset_ns=SKEW + 5 * MS, rtt_ns=9 * MS))
    events.append(schema.ClockSync(**src_b.env(T0 + 1), offset_ns=SKEW, rtt_ns=50_000))
    store.append(events)
    store.flush()
    return tmp_path


def _by(trace: dict[str, Any], **match: Any) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if all(e.get(k) == v for k, v in match.items())]


def _threads(trace: dict[str, Any], pid: int) -> dict[str, int]:
    return {e["args"]["name"]: e["tid"] for e in _by(trace, ph="M", name="thread_name", pid=pid)}


def test_offsets_use_the_sample_with_the_smallest_rtt(run_dir: Path) -> None:
    assert clock_offsets(RunStore.open(run_dir)) == {"node-a": 40_000, "node-b": SKEW}


def test_merged_trace_aligns_ranks_and_places_kernels(run_dir: Path) -> None:
    trace = merged_trace(RunStore.open(run_dir))
    trace = json.loads(json.dumps(trace, allow_nan=False))  # strict JSON
    assert trace["displayTimeUnit"] == "ms"
    assert {e["ph"] for e in trace["traceEvents"]} == {"X", "i", "M"}
    for e in _by(trace, ph="X"):
        assert isinstance(e["ts"], float | int) and e["dur"] >= 0 and e["ts"] >= 0
    procs = {e["pid"]: e["args"]["name"] for e in _by(trace, ph="M", name="process_name")}
    assert procs == {0: "rank 0 (node-a)", 1: "rank 1 (node-b)"}
    meta = trace["metadata"]["diag"]
    assert meta["num_ranks"] == 2 and meta["num_traces"] == 2
    assert sorted(n.split(":")[0] for n in meta["notes"]) == [
        "skipped rank 0 window p3",
        "skipped rank 1 window p3",
    ]

    # Steps line up across hosts once node-b's offset is applied (node-a: 40 us).
    starts = {}
    for pid in (0, 1):
        steps = _by(trace, ph="X", cat="step", pid=pid, tid=_threads(trace, pid)["steps"])
        starts[pid] = {e["args"]["step"]: e["ts"] for e in steps}
        assert all(e["dur"] == pytest.approx(STEP / 1000) for e in steps)
    assert sorted(starts[0]) == [0, 1, 2, 3]
    for step, ts in starts[0].items():
        assert ts == pytest.approx(starts[1][step] + 40, abs=0.01)  # microseconds

    # Phases: consecutive children of the step, in order, summing to it.
    phases = [e for e in _by(trace, ph="X", cat="phase", pid=1) if e["args"]["step"] == 1]
    assert [e["name"] for e in phases] == ["data_wait", "forward", "backward", "optimizer", "other"]
    assert phases[0]["ts"] == pytest.approx(starts[1][1])
    for a, b in itertools.pairwise(phases):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"])

    # Collectives: spans with duration on rank 0, instants (no duration) on rank 1.
    coll0 = _by(trace, cat="collective", pid=0)
    assert {e["ph"] for e in coll0} == {"X"} and len(coll0) == 4
    assert coll0[0]["args"] == {
        "op": "all_reduce",
        "seq_id": 0,
        "pg": "0",
        "bytes": 1024,
        "state": "",
        "origin": "fr",
        "enqueue_to_start_us": 1000.0,
    }
    assert {e["ph"] for e in _by(trace, cat="collective", pid=1)} == {"i"}

    # Kernels inside their window (step 2) on both ranks, on per-track threads.
    for pid in (0, 1):
        threads = _threads(trace, pid)
        kern = [e for e in _by(trace, ph="X", pid=pid) if e["cat"] in ("cpu_op", "kernel")]
        assert {e["name"] for e in kern} == {"aten::mm", "sgemm"}
        lo, hi = starts[pid][2], starts[pid][3]
        assert all(lo <= e["ts"] and e["ts"] + e["dur"] <= hi for e in kern)
        assert {t for t in threads if t.startswith("kernels: ")} == {
            f"kernels: {7 if pid == 0 else 9}/{7 if pid == 0 else 9}",
            f"kernels: {pid}/20",
        }
    mm0 = next(e for e in _by(trace, name="aten::mm", pid=0))
    assert mm0["ts"] == pytest.approx(starts[0][2] + 1000, abs=0.01)  # wall-clock placement
    mm1 = next(e for e in _by(trace, name="aten::mm", pid=1))
    assert mm1["ts"] == pytest.approx(starts[1][2])  # aligned at the window start
    assert not _by(trace, name="cudaLaunchKernel")


def test_steps_filter_keeps_the_range(run_dir: Path) -> None:
    store = RunStore.open(run_dir)
    trace = merged_trace(store, steps=parse_steps("1:3"))
    assert trace["metadata"]["diag"]["steps"] == "1:3"
    assert sorted(e["args"]["step"] for e in _by(trace, cat="step", pid=0)) == [1, 2]
    assert sorted(e["args"]["seq_id"] for e in _by(trace, cat="collective", pid=1)) == [1, 2]
    assert len(_by(trace, name="sgemm")) == 2  # window p2 is inside steps 1..2
    assert min(e["ts"] for e in trace["traceEvents"] if e["ph"] != "M") == 0
    early = merged_trace(store, steps=parse_steps("0:1"))
    assert early["metadata"]["diag"]["steps"] == "0:1"
    assert not _by(early, name="sgemm") and len(_by(early, cat="step")) == 2
    last = merged_trace(store, steps=parse_steps("-1:"))
    assert {e["args"]["step"] for e in _by(last, cat="step")} == {3}
    with pytest.raises(InputError, match="no recorded steps"):
        merged_trace(store, steps=parse_steps("10:20"))


@pytest.mark.parametrize("text", ["3", "a:b", "1:2:3"])
def test_bad_steps_argument(text: str) -> None:
    with pytest.raises(InputError, match="expected A:B"):
        parse_steps(text)


def test_overlapping_collectives_go_to_extra_threads(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path)
    src = _Src("h", 0)
    store.append(
        [
            schema.CollectiveEvent(
                **src.env(T0),
                op=op,
                enqueue_ns=T0 + i * MS,
                start_ns=T0 + i * MS,
                duration_ns=10 * MS,
                pg_name=str(i),
            )
            for i, op in enumerate(["all_reduce", "all_gather"])
        ]
    )
    trace = merged_trace(store)
    threads = _threads(trace, 0)
    assert set(threads) == {"collectives", "collectives #2"}
    assert {e["tid"] for e in _by(trace, cat="collective")} == set(threads.values())


def test_a_summed_step_is_one_span_per_group_unless_its_raw_rows_were_fetched(
    tmp_path: Path,
) -> None:
    store = RunStore.create(tmp_path)
    src = _Src("h", 0)
    summary = {"pg_name": "1", "num_collectives": 96, "num_bytes": 96 << 20, "num_p2p": 2,
               "num_timed": 96, "duration_sum_ns": 40 * MS, "duration_max_ns": 3 * MS,
               "first_seq_id": 960, "last_seq_id": 1055}  # fmt: skip
    store.append(
        [
            schema.CollectiveSummary(
                **src.env(T0 + s * STEP, step=s),
                first_enqueue_ns=T0 + s * STEP + 2 * MS,
                last_enqueue_ns=T0 + s * STEP + 50 * MS,
                mean_enqueue_ns=T0 + s * STEP + 26 * MS,
                **summary,  # type: ignore[arg-type]
            )
            for s in (12, 13)
        ]
        + [  # step 13's raw rows came back (a fetch): they show each call instead
            schema.CollectiveEvent(
                **src.env(T0 + 13 * STEP, step=13),
                op="_allgather_base",
                pg_name="1",
                seq_id=1056,
                enqueue_ns=T0 + 13 * STEP + 2 * MS,
                start_ns=T0 + 13 * STEP + 2 * MS,
                duration_ns=MS,
            )
        ]
    )
    trace = merged_trace(store)
    [span] = _by(trace, cat="collective_summary")
    assert span["name"] == "98 calls on pg 1" and span["args"]["step"] == 12
    assert span["args"]["seq_ids"] == "960-1055" and span["args"]["calls"] == 96
    assert span["dur"] == pytest.approx(51_000)  # first enqueue to the last + its longest call
    assert [e["args"]["seq_id"] for e in _by(trace, cat="collective")] == [1056]


def test_empty_run_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no steps, collectives or profiler windows"):
        merged_trace(RunStore.create(tmp_path))


def test_window_trace_paths_stay_inside_the_traces_folder(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path / "run")
    src = _Src("h", 0)
    _trace(tmp_path / "outside.json.gz", [_x("aten::mm", "cpu_op", 0, 5, 1, 1)], None)
    store.append(
        [
            schema.ProfileWindow(
                **src.env(T0),
                window_id="p0",
                trigger="periodic",
                start_ns=T0,
                end_ns=T0 + STEP,
                duration_ns=STEP,
                trace_path="../../outside.json.gz",
            )
        ]
    )
    trace = merged_trace(store, steps=None)
    assert not _by(trace, name="aten::mm")
    (note,) = trace["metadata"]["diag"]["notes"]
    assert note.startswith("skipped rank 0 window p0: ../../outside.json.gz is outside")
    assert trace["metadata"]["diag"]["steps"] is None
