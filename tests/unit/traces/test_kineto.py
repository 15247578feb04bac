"""Kineto trace loading and summaries, on real traces (shared/ and a tiny torch 2.13 fixture)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import pytest

from diag.errors import InputError
from diag.traces.kineto import TraceEvent, load_trace, rank_from_name
from diag.traces.kineto_summary import category_of, summarize
from tests.fakes.paths import DATA, SHARED

# shared/ lies beside the checkout (as in CI); DIAG_SHARED_DIR points elsewhere.
KINETO = SHARED / "data" / "external" / "kineto"
NCCL = [KINETO / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
CPU_ONLY = KINETO / "cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
FIXTURE = DATA / "kineto"
needs_shared = pytest.mark.skipif(not KINETO.is_dir(), reason="shared Kineto traces not present")


@needs_shared
@pytest.mark.parametrize("rank", [0, 1])
def test_nccl_job_traces_top_kernels(rank: int) -> None:
    trace = load_trace(NCCL[rank])
    assert (trace.rank, trace.world_size, trace.backend) == (rank, 128, "nccl")
    # No baseTimeNanoseconds: ts are integer epoch microseconds, kept exact.
    assert trace.clock == "wall" and trace.base_time_ns is None
    assert trace.start_ns == (1682725897226747 if rank == 0 else 1682725897227300) * 1000
    start = dt.datetime.fromtimestamp(trace.start_ns / 1e9, dt.UTC)
    assert start.date() == dt.date(2023, 4, 28)
    assert len(trace.events) > 4000 and trace.num_skipped == 0
    s = summarize(trace, top=10)
    assert 3.3e9 < s.span_ns < 3.4e9  # the profiler's own span: 3.367 s / 3.366 s
    assert 0.1 < s.gpu_busy_ns / s.span_ns < 0.3
    first = s.top[0]
    assert first.name.startswith("ncclKernel_SendRecv") and first.category == "collective"
    assert first.device == f"cuda:{rank}" and first.num_calls == 10
    assert 0.05 < first.step_share < 0.2  # 11.8% (rank 0), 11.3% (rank 1) of the span
    assert all(k.on_gpu for k in s.top) and len(s.top) == 10
    assert any("gemm" in k.name for k in s.top)  # cutlass GEMM
    assert s.top_share == pytest.approx(sum(k.step_share for k in s.top))
    cats = {k.category for k in s.kernels}
    assert cats == {"kernel", "collective", "gpu_memcpy", "gpu_memset", "cpu_op"}
    memcpy = next(k for k in s.kernels if k.category == "gpu_memcpy")
    assert memcpy.name.startswith("Memcpy")
    op = next(k for k in s.kernels if k.name == "aten::mm")
    assert op.category == "cpu_op" and op.device == "cpu" and op.input_shapes.startswith("[[")
    assert s.kernels == tuple(sorted(s.kernels, key=lambda k: -k.total_ns))


@needs_shared
def test_cpu_only_trace_has_cpu_ops_and_gloo_collectives() -> None:
    trace = load_trace(CPU_ONLY)
    assert (trace.rank, trace.world_size, trace.backend) == (34, 300, "gloo")
    assert trace.base_time_ns == 1719853884000000000 and trace.clock == "wall"
    # base + ts: 2024-07-15 17:52 UTC; the file name says Jul_15_10_52_41 (US Pacific).
    start = dt.datetime.fromtimestamp(trace.start_ns / 1e9, dt.UTC)
    assert (start.date(), start.hour, start.minute) == (dt.date(2024, 7, 15), 17, 52)
    s = summarize(trace)
    assert not s.has_gpu and s.gpu_busy_ns == 0
    names = {(k.name, k.category, k.device) for k in s.top}
    assert ("gloo:all_reduce", "collective", "cpu") in names
    assert ("aten::empty", "cpu_op", "cpu") in names
    gloo = next(k for k in s.top if k.name == "gloo:all_reduce")
    assert gloo.num_calls == 10 and gloo.input_shapes == "[[2082411]]"


def test_torch_trace_ts_maps_to_wall_clock() -> None:
    """baseTimeNanoseconds + ts*1000 is wall clock: a record_function lands between the
    time.time_ns() taken before it and the one taken inside it (fixture from torch 2.13)."""
    trace = load_trace(FIXTURE / "torch_cpu_rank0.json.gz")
    marks = json.loads((FIXTURE / "marks.json").read_text())
    assert trace.rank == 0 and trace.clock == "wall" and trace.base_time_ns
    mark = next(e for e in trace.events if e.name == "mark")
    assert marks["before_ns"] <= mark.ts_ns <= marks["inside_ns"]
    s = summarize(trace, top=3)
    assert len(s.top) == 3 and all(k.category == "cpu_op" for k in s.top)


def test_plain_json_loads_like_gzip(tmp_path: Path) -> None:
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress((FIXTURE / "torch_cpu_rank0.json.gz").read_bytes()))
    a, b = load_trace(plain), load_trace(FIXTURE / "torch_cpu_rank0.json.gz")
    assert a.events == b.events and a.rank is None and b.rank == 0


def test_relative_trace_is_aligned_by_window_start(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": 10.5,
                "dur": 2,
                "args": {"device": 0},
            },
            {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 5, "dur": 20},
            {"ph": "X", "cat": "cpu_op", "name": "bad", "pid": 1, "tid": 1, "ts": "x"},
        ]
    }
    path = tmp_path / "other_tool.json"
    path.write_text(json.dumps(doc))
    trace = load_trace(path)
    assert trace.clock == "relative" and trace.num_skipped == 1
    assert (trace.start_ns, trace.end_ns) == (5000, 25000)
    assert trace.wall_offset_ns(None) is None
    assert trace.wall_offset_ns(1_000_000) == 1_000_000 - 5000
    kernel = next(e for e in trace.events if e.name == "k")
    assert (kernel.ts_ns, kernel.dur_ns, kernel.device) == (10500, 2000, 0)


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("trace_rank-3.json", 3),
        ("x_rank_12.json.gz", 12),
        ("Rank7.pt.trace.json", 7),
        ("rank5/p20.json.gz", 5),
        ("worker.json", None),
    ],
)
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert rank_from_name(Path("/runs/traces") / name) == rank


def test_categories() -> None:
    def ev(cat: str, name: str) -> TraceEvent:
        return TraceEvent(name=name, cat=cat, ts_ns=0, dur_ns=1, pid=0, tid=0)

    assert category_of(ev("kernel", "ncclDevKernel_AllReduce_Sum_f32")) == "collective"
    assert category_of(ev("kernel", "ampere_sgemm_128x64_nn")) == "kernel"
    assert category_of(ev("cpu_op", "c10d::allreduce_")) == "collective"
    assert category_of(ev("user_annotation", "gloo:all_reduce")) == "collective"
    assert category_of(ev("gpu_user_annotation", "nccl:all_reduce")) == "collective"
    assert category_of(ev("user_annotation", "ProfilerStep#3")) is None
    assert category_of(ev("gpu_user_annotation", "## forward ##")) is None
    assert category_of(ev("gpu_memset", "Memset (Device)")) == "gpu_memset"
    assert category_of(ev("cuda_runtime", "cudaLaunchKernel")) is None
    assert category_of(ev("python_function", "train.py(12): step")) is None


def _bad(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load_trace(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_truncated_gzip_is_one_line(tmp_path: Path) -> None:
    src = (FIXTURE / "torch_cpu_rank0.json.gz").read_bytes()
    cut = tmp_path / "rank0.json.gz"
    cut.write_bytes(src[: len(src) // 2])
    assert _bad(cut) == f"{cut} is not a readable Kineto trace: truncated gzip stream"


@needs_shared
def test_truncated_real_nccl_trace(tmp_path: Path) -> None:
    cut = tmp_path / NCCL[0].name
    cut.write_bytes(NCCL[0].read_bytes()[:50_000])
    assert _bad(cut).endswith("truncated gzip stream")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"traceEvents": [{"ph": "X"', "truncated JSON at line 1"),
        (b'{"traceEvents": [}', "bad JSON at line 1 column 18"),
        (b'{"schemaVersion": 1}', "no traceEvents list"),
        (b"[1, 2]", "no traceEvents list"),
        (b'{"traceEvents": "x"}', "no traceEvents list"),
        (b'{"a": "\xc3\x28"}', "not UTF-8 text"),
        (b"\x1f\x8b\x08\x00garbage-after-magic", "corrupt gzip stream"),
    ],
)
def test_malformed_files_are_one_line(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    msg = _bad(path)
    assert msg.startswith(f"{path} is not a readable Kineto trace: ") and reason in msg


def test_gzipped_bad_json_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [1,'))
    assert "truncated JSON" in _bad(path)
    assert _bad(tmp_path / "nope.json").startswith(f"cannot read {tmp_path / 'nope.json'}")
