"""The cross-rank kernel table: from stored KernelSummary rows and from Kineto files."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from diag import schema
from diag.store.run_store import RunStore
from diag.traces import kernels
from diag.traces.kineto import load_trace
from diag.traces.kineto_summary import summarize
from tests.fakes.paths import SHARED

KINETO = SHARED / "data" / "external" / "kineto"
T0 = 1_790_000_000_000_000_000
_seq = itertools.count()


def _kernel(
    rank: int,
    window: str,
    name: str,
    total_ns: int,
    device: str = "cuda:0",
    category: str = "kernel",
) -> schema.KernelSummary:
    return schema.KernelSummary(
        ts_ns=T0,
        host="h",
        rank=rank,
        source=f"h/rank{rank}/1",
        seq=next(_seq),
        window_id=window,
        name=name,
        category=category,
        device=device,
        num_calls=2,
        total_ns=total_ns,
        median_ns=total_ns // 2,
        max_ns=total_ns // 2,
    )


def _window(rank: int, window: str, ok: bool = True) -> schema.ProfileWindow:
    return schema.ProfileWindow(
        ts_ns=T0,
        host="h",
        rank=rank,
        source=f"h/rank{rank}/1",
        seq=next(_seq),
        window_id=window,
        trigger="periodic",
        start_ns=T0,
        end_ns=T0 + 1,
        duration_ns=1,
        ok=ok,
    )


def test_table_from_store_medians_over_windows(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path)
    events: list[schema.Event] = []
    for rank in range(3):
        for w in ("p10", "p20", "p30"):
            events.append(_window(rank, w))
            slow = 3 if rank == 2 else 1
            events.append(_kernel(rank, w, "sgemm", 1_000_000 * slow))
            # split over two devices in one window: summed
            events.append(_kernel(rank, w, "nccl_allreduce", 250_000, category="collective"))
            events.append(
                _kernel(rank, w, "nccl_allreduce", 250_000, device="cuda:1", category="collective")
            )
    # rank 0 ran "rare" in one window of three: its median is 0
    events.append(_kernel(0, "p10", "rare", 9_000_000))
    events.append(_window(1, "p40", ok=False))  # a failed window does not count
    store.append(events)
    store.flush()
    table = kernels.from_store(RunStore.open(tmp_path))
    assert table.ranks == (0, 1, 2) and table.num_windows == 3 and table.source == "store"
    names = [r.name for r in table.rows]
    assert names == ["sgemm", "nccl_allreduce", "rare"]
    gemm = table.rows[0]
    assert dict(gemm.ns_by_rank) == {0: 1e6, 1: 1e6, 2: 3e6}
    assert (gemm.median_ns, gemm.max_ns, gemm.spread, gemm.slowest_rank) == (1e6, 3e6, 3.0, 2)
    assert gemm.num_calls == 2
    nccl = table.rows[1]
    assert nccl.category == "collective" and nccl.spread == 1.0 and nccl.slowest_rank == 0
    assert nccl.ns_by_rank[1] == 500_000 and nccl.num_calls == 4
    rare = table.rows[2]
    assert rare.ns_by_rank[0] == 0.0 and rare.max_ns == 0.0 and rare.spread is None
    js = table.to_json()[0]
    assert js["ms_by_rank"] == {"0": 1.0, "1": 1.0, "2": 3.0} and js["spread"] == 3.0
    assert js["total_ms"] == 5.0 and js["slowest_rank"] == 2
    assert [r.name for r in kernels.from_store(store, top=1).rows] == ["sgemm"]


def test_empty_store_gives_an_empty_table(tmp_path: Path) -> None:
    table = kernels.from_store(RunStore.create(tmp_path))
    assert table.rows == () and table.ranks == () and table.to_json() == []


def test_core_table_ties_and_missing_windows() -> None:
    rows = [
        (0, "a", "k", "kernel", 5.0, 1),
        (1, "a", "k", "kernel", 5.0, 1),
        (1, "b", "k", "kernel", 7.0, 1),
    ]
    table = kernels.kernel_table(rows, {0: ["a"], 1: ["a", "b"], 2: []}, source="test")
    assert table.ranks == (0, 1)  # rank 2 has no window
    (row,) = table.rows
    assert dict(row.ns_by_rank) == {0: 5.0, 1: 6.0} and row.slowest_rank == 1
    tie = kernels.kernel_table(
        [(0, "a", "k", "kernel", 5.0, 1), (1, "a", "k", "kernel", 5.0, 1)],
        {0: ["a"], 1: ["a"]},
        source="test",
    )
    assert tie.rows[0].slowest_rank == 0 and tie.rows[0].spread == 1.0


@pytest.mark.skipif(not KINETO.is_dir(), reason="shared Kineto traces not present")
def test_table_from_the_nccl_job_traces() -> None:
    sums = [
        summarize(load_trace(KINETO / f"trace_filter_sampled_rank-{r}.json.gz")) for r in (0, 1)
    ]
    table = kernels.from_traces(sums)
    assert table.ranks == (0, 1) and table.source == "traces" and table.num_windows == 2
    first = table.rows[0]
    assert first.name.startswith("ncclKernel_SendRecv") and first.category == "collective"
    assert first.ns_by_rank[0] == pytest.approx(396.199e6) and first.slowest_rank == 0
    # rank 1's embedding backward kernel takes 2.4x rank 0's (57.2 ms vs 23.5 ms)
    emb = next(r for r in table.rows if r.name.startswith("void split_embedding_backward"))
    assert emb.slowest_rank == 1 and emb.ns_by_rank[1] / emb.ns_by_rank[0] > 2
    assert [r.total_ns for r in table.rows] == sorted(
        (r.total_ns for r in table.rows), reverse=True
    )


def test_traces_without_ranks_get_free_ones() -> None:
    class T:
        def __init__(self, rank: int | None) -> None:
            self.rank = rank

    assert kernels.assign_ranks([T(None), T(0), T(None), T(2)]) == [1, 0, 3, 2]
