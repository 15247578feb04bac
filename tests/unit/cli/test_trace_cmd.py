"""``diag trace`` and ``diag report --kernels``: what a user sees, and bad input as one line."""

from __future__ import annotations

import gzip
import io
import itertools
import json
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from diag import schema
from diag.cli.main import main
from diag.cli.render import tables as render
from diag.store.run_store import RunStore
from tests.fakes.cli import run_cli
from tests.fakes.paths import DATA, SHARED

KINETO = SHARED / "data" / "external" / "kineto"
NCCL = [KINETO / f"trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
FIXTURE = DATA / "kineto" / "torch_cpu_rank0.json.gz"
needs_shared = pytest.mark.skipif(not KINETO.is_dir(), reason="shared Kineto traces not present")
MS = 1_000_000
T0 = 1_790_000_000_000_000_000


def _text(renderable: object) -> str:
    buf = io.StringIO()
    Console(width=120, file=buf, color_system=None).print(renderable)
    return buf.getvalue()


@pytest.mark.parametrize("kind", ["truncated", "malformed"])
def test_bad_trace_file_is_one_line_exit_2(tmp_path: Path, kind: str) -> None:
    bad = tmp_path / "rank0.json.gz"
    if kind == "truncated":
        data = FIXTURE.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    else:
        bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X",]}'))
    res = run_cli("trace", str(bad))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"diag trace: error: {bad} is not a readable")
    reason = "truncated gzip stream" if kind == "truncated" else "bad JSON at line 1"
    assert reason in lines[0]


def test_steps_need_a_run_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(FIXTURE), "--step-range", "1:2"]) == 2
    assert "--step-range needs a run directory" in capsys.readouterr().err


def test_empty_folder_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(tmp_path)]) == 2
    assert f"{tmp_path}: no Kineto trace files" in capsys.readouterr().err


@needs_shared
def test_the_merged_trace_of_gpu_ranks_has_a_track_per_cuda_stream(tmp_path: Path) -> None:
    # Two ranks of a real NCCL job (Kineto traces with CUDA activity): each rank's GPU streams
    # are their own threads, after its CPU threads, with the NCCL kernels on them.
    out = tmp_path / "merged.json.gz"
    assert main(["trace", *map(str, NCCL), "--out", str(out)]) == 0
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}  # fmt: skip
    for rank in (0, 1):
        tracks = [n for (pid, _), n in sorted(names.items()) if pid == rank]
        streams = [n for n in tracks if n.startswith("kernels: GPU")]
        assert streams and all(" stream " in n for n in streams), tracks
        assert tracks.index(streams[0]) > max(
            i for i, n in enumerate(tracks) if not n.startswith("kernels: GPU")
        ), tracks
        on_streams = [e for e in events if e.get("ph") == "X" and e["pid"] == rank
                      and names[(rank, e["tid"])].startswith("kernels: GPU")]  # fmt: skip
        assert {e["cat"] for e in on_streams} <= {"kernel", "gpu_memcpy", "gpu_memset"}
        assert any(e["name"].startswith("ncclKernel_") for e in on_streams)


@needs_shared
def test_trace_files_print_tables_and_write_a_merged_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "merged.json.gz"
    assert main(["trace", *map(str, NCCL), "--top", "5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rank 0: 3367.3 ms traced, GPU busy 547.7 ms (16%); top 5" in text
    assert "rank 1: 3366.4 ms traced" in text and "ncclKernel_SendRecv_RING_SIMPLE" in text
    assert "Kernels by rank" in text and "r0 ms" in text and "r1 ms" in text
    line = text.strip().splitlines()[-1]
    assert line.startswith("wrote ") and line.endswith(
        f"events for 2 ranks to {out} (open in https://ui.perfetto.dev)"
    )
    doc = json.loads(gzip.decompress(out.read_bytes()))
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert procs == {0: f"rank 0 ({NCCL[0].name})", 1: f"rank 1 ({NCCL[1].name})"}
    assert doc["metadata"]["diag"]["clock"] == "wall"


@needs_shared
def test_trace_folder_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", str(KINETO), "--json", "--top", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(t["rank"] for t in doc["traces"]) == [0, 1, 34]
    assert set(doc["kernels"][0]["ms_by_rank"]) == {"0", "1", "34"}
    cpu = next(t for t in doc["traces"] if t["rank"] == 34)
    assert cpu["top"][0]["name"] == "gloo:all_reduce" and cpu["gpu_busy_ms"] == 0


def _run_dir(path: Path) -> Path:
    store = RunStore.create(path)
    seq = itertools.count()
    events: list[schema.Event] = []
    for rank in (0, 1):
        env = {"host": "h", "rank": rank, "source": f"h/rank{rank}/1"}
        for step in range(3):
            start = T0 + step * 100 * MS
            events.append(
                schema.StepEvent(
                    **env,
                    ts_ns=start,
                    seq=next(seq),
                    step=step,
                    start_ns=start,
                    end_ns=start + 100 * MS,
                    duration_ns=100 * MS,
                    forward_ns=40 * MS,
                    backward_ns=60 * MS,
                )
            )
        events.append(
            schema.ProfileWindow(
                **env,
                ts_ns=T0,
                seq=next(seq),
                step=1,
                window_id="p1",
                trigger="periodic",
                start_ns=T0 + 100 * MS,
                end_ns=T0 + 200 * MS,
                duration_ns=100 * MS,
            )
        )
        events.append(
            schema.KernelSummary(
                **env,
                ts_ns=T0,
                seq=next(seq),
                window_id="p1",
                name="void ampere_sgemm_128x64_nn(float*, float const*)",
                category="kernel",
                device=f"cuda:{rank}",
                num_calls=4,
                total_ns=(rank + 1) * 10 * MS,
                median_ns=MS,
                max_ns=MS,
            )
        )
    store.append(events)
    store.flush()
    return path


def test_trace_of_a_run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_dir(tmp_path / "run")
    assert main(["trace", str(run), "--step-range", "1:"]) == 0
    out = run / "trace.json"
    assert capsys.readouterr().out == (
        f"wrote 12 events for 2 ranks to {out} (open in https://ui.perfetto.dev)\n"
    )  # 2 ranks x 2 steps x (step + forward + backward)
    doc = json.loads(out.read_text())
    assert doc["metadata"]["diag"]["steps"] == "1:"


def test_report_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_dir(tmp_path / "run")
    assert main(["report", str(run), "--kernels"]) == 0
    text = capsys.readouterr().out
    assert "Kernels by rank" in text and "ampere_sgemm_128x64_nn" in text
    row = next(line for line in text.splitlines() if "ampere_sgemm" in line)
    assert [c.strip() for c in row.split("│")[2:7]] == ["kernel", "10.0", "20.0", "1.33x", "1"]
    assert main(["report", str(run), "--json", "--kernels"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kernels"][0]["ms_by_rank"] == {"0": 10.0, "1": 20.0}
    assert main(["report", str(run), "--json"]) == 0
    assert "kernels" not in json.loads(capsys.readouterr().out)


def _rows(num_ranks: int, slow: float) -> list[dict]:
    by_rank = {str(r): (10.0 * slow if r == 2 else 10.0) for r in range(num_ranks)}
    return [
        {
            "name": "void at::native::vectorized_elementwise_kernel<4>(int, float*)",
            "category": "kernel",
            "ms_by_rank": by_rank,
            "min_ms": 10.0,
            "median_ms": 10.0,
            "max_ms": 10.0 * slow,
            "spread": slow,
            "slowest_rank": 2,
        }
    ]


def test_render_kernel_table_columns_per_rank_and_highlight() -> None:
    table = render.kernel_table(_rows(4, 1.5))
    out = _text(table)
    assert "r0 ms" in out and "r3 ms" in out and "1.50x" in out
    row = next(line for line in out.splitlines() if "vectorized" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells == [
        "at::native::vectorized_elementwise_kernel<4>",
        "kernel",
        "10.0",
        "10.0",
        "15.0",
        "10.0",
        "1.50x",
        "2",
    ]
    rank2 = table.columns[4]._cells[0]  # the r2 column
    assert isinstance(rank2, Text) and str(rank2.style) == "bold red"
    balanced = render.kernel_table(_rows(4, 1.02))
    assert str(balanced.columns[4]._cells[0].style) == ""


def test_render_kernel_table_many_ranks_uses_min_median_max() -> None:
    out = _text(render.kernel_table(_rows(32, 2.0)))
    assert "r0 ms" not in out and "median ms" in out
    row = next(line for line in out.splitlines() if "vectorized" in line)
    assert [c.strip() for c in row.split("│")[3:8]] == ["10.0", "10.0", "20.0", "2.00x", "2"]


def test_kernel_names_are_shortened_for_tables() -> None:
    short = render._kernel_name
    assert short("void ncclKernel_SendRecv(ncclDevComm*, unsigned long)") == "ncclKernel_SendRecv"
    assert short("Memcpy HtoD (Pinned -> Device)") == "Memcpy HtoD (Pinned -> Device)"
    assert short("void f<(int)3>(g(x))") == "f<(int)3>"
    assert short("x" * 80).endswith("…") and len(short("x" * 80)) == 60
