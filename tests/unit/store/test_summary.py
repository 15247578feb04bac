"""summarize(): run facts, per-rank medians, the slow rank's compute_vs_peers, the GPU section."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from diag import schema
from diag.store.run_store import RunStore
from diag.store.summary import summarize
from tests.fakes.events import MS, T0, Source


def _run(tmp_path: Path, *, ended: bool = True) -> RunStore:
    store = RunStore.create(tmp_path)
    launcher = Source(host="n0", pid=1)
    store.append([
        schema.RunEvent(**launcher.env(T0), phase="start", run_id="run-7", command="train.py",
                        nnodes=2, nproc_per_node=2),
    ])  # fmt: skip
    ranks = [Source(host=f"n{r // 2}", rank=r, pid=10 + r) for r in range(4)]
    for r, src in enumerate(ranks):
        store.append([schema.RankInfo(**src.env(T0 + 1), pid=10 + r, world_size=4, run_id="run-7")])
        compute, wait = (150, 5) if r == 2 else (100, 55)
        for i in range(10):
            loss = math.nan if (r == 3 and i == 9) else 2.0 - i / 10
            store.append([src.step(i, compute_ms=compute, wait_ms=wait, loss=loss)])
        store.append([src.collective(i) for i in range(5)])
        store.append([
            schema.CheckpointEvent(**src.env(T0 + 5 * MS), op="save", api="torch.save",
                                   start_ns=T0, duration_ns=30 * MS),
            schema.HookHealth(**src.env(T0 + 6 * MS), pid=10 + r, num_dropped=1),
            schema.HookHealth(**src.env(T0 + 7 * MS), pid=10 + r, num_dropped=2 + r, final=True),
        ])  # fmt: skip
    store.flush()  # half the run in parts, half buffered: summarize sees both
    daemon = Source(host="n0", pid=2)
    store.append([
        daemon.gpu(T0, 0, util=10.0),
        daemon.gpu(T0 + 1, 1, util=None, temp_c=math.nan),
        daemon.gpu(T0 + 2, 0, util=99.0, throttle_reasons="hw_slowdown", power_w=650.0),
    ])  # fmt: skip
    if ended:
        store.append([
            schema.RunEvent(**launcher.env(T0 + 10**10), phase="end", run_id="run-7",
                            exit_code=0, duration_ns=10**10),
        ])  # fmt: skip
    return store


def test_slow_rank_has_compute_vs_peers_near_one_and_a_half(tmp_path: Path) -> None:
    s = summarize(_run(tmp_path))
    ratios = {r.rank: r.compute_vs_peers for r in s.ranks}
    assert ratios[2] == pytest.approx(1.5)
    assert all(ratios[r] == pytest.approx(1.0) for r in (0, 1, 3))
    slow, fast = s.ranks[2], s.ranks[0]
    assert slow.compute_ms_median == pytest.approx(150) and slow.wait_ms_median == pytest.approx(5)
    assert fast.wait_ms_median == pytest.approx(55) and fast.data_ms_median == pytest.approx(5)
    assert fast.step_ms_median == pytest.approx(160) and fast.forward_ms_median == pytest.approx(30)
    assert fast.backward_ms_median == pytest.approx(115)
    assert fast.optimizer_ms_median == pytest.approx(10)
    assert fast.checkpoint_ms_total == pytest.approx(30) and fast.num_collectives == 5
    assert [r.host for r in s.ranks] == ["n0", "n0", "n1", "n1"]
    assert fast.steps == 10 and fast.last_step == 9 and fast.loss_last == pytest.approx(1.1)


def test_a_rank_is_not_its_own_peer_in_a_two_rank_job(tmp_path: Path) -> None:
    """With the rank in its own reference, a 2-rank job capped every ratio at 2x: a rank 37x
    slower read "1.95x the typical rank", its healthy peer 0.05x."""
    store = RunStore.create(tmp_path)
    for r, compute in ((0, 4.0), (1, 148.0)):
        src = Source(rank=r, pid=10 + r)
        store.append([src.step(i, compute_ms=compute) for i in range(5)])
    ratios = {r.rank: r.compute_vs_peers for r in summarize(store).ranks}
    assert ratios[1] == pytest.approx(37.0) and ratios[0] == pytest.approx(4.0 / 148.0)
    alone = RunStore.create(tmp_path / "one")
    alone.append([Source(rank=0).step(0)])
    assert summarize(alone).ranks[0].compute_vs_peers is None  # no peer: no ratio


def test_run_facts(tmp_path: Path) -> None:
    run = summarize(_run(tmp_path)).run
    assert (run.id, run.command, run.world_size, run.steps) == ("run-7", "train.py", 4, 10)
    assert (run.exit_code, run.nnodes, run.nproc_per_node) == (0, 2, 2)
    assert run.hosts == ("n0", "n1")
    assert run.start_ns == T0 and run.end_ns == T0 + 10**10 and run.duration_ns == 10**10
    assert run.num_dropped == 2 + 3 + 4 + 5  # the latest HookHealth of each hook
    assert run.num_events == 2 + 4 * (1 + 10 + 5 + 3) + 3


def test_live_run_has_no_exit_code_yet(tmp_path: Path) -> None:
    run = summarize(_run(tmp_path, ended=False)).run
    assert run.exit_code is None and run.start_ns is not None and run.end_ns is not None
    assert run.end_ns > run.start_ns


def test_json_is_strict_and_keeps_a_nan_loss_visible(tmp_path: Path) -> None:
    _run(tmp_path).flush()
    data = summarize(tmp_path).to_json()  # from the path, as diag report does
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert set(back) == {"run", "ranks", "gpus"}
    assert back["ranks"][3]["loss_last"] == "nan" and back["ranks"][0]["loss_last"] == 1.1
    assert back["run"]["hosts"] == ["n0", "n1"]
    assert list(back["gpus"]) == ["n0"]
    gpu0, gpu1 = back["gpus"]["n0"]
    assert (gpu0["gpu_index"], gpu0["util_pct"], gpu0["throttle_reasons"]) == (
        0,
        99.0,
        "hw_slowdown",
    )
    assert gpu0["power_w"] == 650.0 and gpu0["sm_clock_mhz"] == 1980
    assert gpu1["util_pct"] is None and gpu1["temp_c"] is None


def test_empty_store(tmp_path: Path) -> None:
    data = summarize(RunStore.create(tmp_path)).to_json()
    assert data["ranks"] == [] and data["gpus"] == {}
    assert data["run"]["steps"] == 0 and data["run"]["num_events"] == 0
    assert data["run"]["start_ns"] is None and data["run"]["exit_code"] is None


def test_a_ranks_last_step_is_its_last_by_step_not_by_arrival_time(tmp_path: Path) -> None:
    """Rows whose timestamps run against their steps (a host clock stepped back, resent steps)
    are ordered by step: the last loss and host are the last step's, whatever came last."""
    store = RunStore.create(tmp_path)
    src = Source(host="n0", rank=0, pid=10)
    moved = Source(host="n1", rank=0, pid=11)  # the rank restarted on another host
    events = [src.step(i, loss=2.0 - i / 10) for i in range(6)]
    late = moved.step(6, loss=0.5)
    early = dataclasses.replace(late, ts_ns=events[0].ts_ns - 1)  # stamped before step 0
    store.append([*events, early])
    store.flush()
    (rank,) = summarize(store).ranks
    assert rank.last_step == 6 and rank.steps == 7
    assert rank.loss_last == pytest.approx(0.5) and rank.host == "n1"


@pytest.mark.parametrize("spacing", [1, 1_000_000])  # dense ranks, and ranks far apart
def test_the_last_loss_of_each_rank_is_its_last_row_with_one_nan_kept(spacing: int) -> None:
    """A rank's last loss is its last row that has one (a NaN is a value: kept; <NA> is none),
    as pandas' group-by of the rows with a loss says, whatever the ranks' order and spacing."""
    import numpy as np
    import pandas as pd

    from diag.store.summary import _last_loss

    rng = np.random.default_rng(spacing)
    for _ in range(50):
        n = int(rng.integers(0, 40))
        values = rng.normal(size=n)
        values[rng.random(n) < 0.2] = np.nan
        steps = pd.DataFrame(
            {
                "rank": rng.integers(0, 8, n) * spacing,
                "loss": pd.arrays.FloatingArray(values, rng.random(n) < 0.3),
            }
        )
        rows = steps.dropna(subset=["loss"]).groupby("rank").tail(1)
        want = dict(zip(rows["rank"].tolist(), rows["loss"].tolist(), strict=True))
        got = _last_loss(steps)
        assert got.keys() == want.keys()
        assert all(got[r] == want[r] or (math.isnan(got[r]) and math.isnan(want[r])) for r in want)
