"""The link detector from node summaries (schema 1.17): a daemon at fleet scale ships one
``CollectiveSummary`` per rank, step and group from a rank's 10th step on instead of the raw
collectives. The same faults are named from them; raw rows (fetched) win over summaries of the
same group and step, never counted twice."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diag import schema
from diag.diagnose.detectors import link
from diag.diagnose.detectors.registry import DETECTORS
from diag.diagnose.features import Features
from diag.findings import Finding
from diag.store.run_store import RunStore
from tests.fakes.collsum_runs import daemon_view, resummarized, stored_events
from tests.fakes.link_kernel_scenarios import link_run

CFG = link.LinkConfig()


def _json(found: list[Finding]) -> list[dict]:
    return [f.to_json() for f in found]


def _from_summaries(f: Finding) -> float:
    return next((e.value for e in f.evidence if e.metric == "from_summaries"), 0.0)


@pytest.mark.parametrize(
    ("timed", "group", "onset"),
    [(True, "dp0", 30), (False, "dp1", 20)],  # NCCL-like durations; gloo-like: the proxy
)
def test_a_link_fault_from_summaries_names_the_same_link_hosts_and_onset(
    tmp_path: Path, timed: bool, group: str, onset: int
) -> None:
    raw_store = link_run(tmp_path / "raw", slow_group=group, slow_from=onset, timed=timed)
    (raw,) = link.detect_from_store(raw_store, CFG)
    (f,) = link.detect_from_store(resummarized(raw_store, tmp_path / "sum"), CFG)
    assert f.link is not None and raw.link is not None
    assert (f.link.group, f.ranks, f.hosts) == (raw.link.group, raw.ranks, raw.hosts)
    # The same onset, detection and severity: the last rank to arrive at each call is the same
    # one here, so its summed durations are exactly the sum of the per-call transfers (and the
    # proxy is the same step-level wait); the cost per step, and so the change point, match.
    assert (f.onset_step, f.detected_step, f.severity) == (onset, raw.detected_step, raw.severity)
    assert f.slowdown == pytest.approx(raw.slowdown, rel=1e-6)
    assert f.confidence == raw.confidence
    assert any(e.note.startswith("proxy") for e in f.evidence) is (not timed)
    # It says it was judged from summaries, and which steps to fetch to confirm.
    assert _from_summaries(f) == 1.0 and _from_summaries(raw) == 0.0
    assert f"steps {onset}-59 would confirm" in f.summary
    assert "node summaries" not in raw.summary


def test_raw_rows_and_summaries_of_the_same_steps_count_once(tmp_path: Path) -> None:
    # after a fetch of every rank's raw rows the summaries of those steps are dropped: exactly
    # the raw findings, evidence included (no from_summaries)
    for timed in (True, False):
        raw_store = link_run(tmp_path / f"raw{timed}", slow_group="dp0", timed=timed)
        both = resummarized(raw_store, tmp_path / f"both{timed}", keep_raw=lambda e: True)
        assert "collective_summary" in both.kinds()
        assert _json(link.detect_from_store(both, CFG)) == _json(
            link.detect_from_store(raw_store, CFG)
        )


def test_a_partial_fetch_leaves_those_steps_to_the_summaries(tmp_path: Path) -> None:
    # raw rows fetched for rank 0 only in steps 30-39, for every rank in steps 40-44: the first
    # window is judged from the summaries (rank 2's raw rows are missing), the second from raw
    raw_store = link_run(tmp_path / "raw", slow_group="dp0")
    store = resummarized(
        raw_store,
        tmp_path / "partial",
        keep_raw=lambda e: (e.rank == 0 and 30 <= e.step < 40) or 40 <= e.step < 45,
    )
    coll = link._per_collective(
        store.frame("collective"), store.frame("step"), store.frame("collective_summary")
    )
    per = coll.groupby(["pg", "step"])["summary"].agg(["all", "any", "size"])
    assert (per["all"] == per["any"]).all()  # one source per (group, step)
    assert not per.loc[(slice(None), slice(0, 9)), "any"].any()
    assert per.loc[(slice(None), slice(30, 39)), "all"].all()
    assert (per.loc[(slice(None), slice(30, 39)), "size"] == 1).all()
    assert not per.loc[(slice(None), slice(40, 44)), "any"].any()
    assert (per.loc[(slice(None), slice(40, 44)), "size"] == 2).all()  # two calls each
    (f,) = link.detect_from_store(store, CFG)
    assert f.link is not None and f.link.group == "dp0" and f.onset_step == 30
    assert 0 < _from_summaries(f) < 1


def test_collectives_in_flight_beside_the_summaries_do_not_cover_them(tmp_path: Path) -> None:
    # a collective still running when harvested ships raw on every rank (a hang's evidence);
    # it does not stand for the rank's step: the summaries of that step still count
    raw_store = link_run(tmp_path / "raw", slow_group="dp0")
    events = daemon_view(stored_events(raw_store))
    running = [
        dataclasses.replace(e, state="started", seq_id=10_000, duration_ns=None, end_ns=None)
        for e in stored_events(raw_store)
        if isinstance(e, schema.CollectiveEvent) and e.pg_name == "dp0" and e.seq_id == 70
    ]
    assert len(running) == 2
    store = RunStore.create(tmp_path / "run")
    store.append([*events, *(dataclasses.replace(e, seq=10_000 + e.seq) for e in running)])
    store.flush()
    coll = link._per_collective(
        store.frame("collective"), store.frame("step"), store.frame("collective_summary")
    )
    at35 = coll[(coll["pg"] == "dp0") & (coll["step"] == 35)]
    assert at35["summary"].tolist() == [True]


def test_a_step_summed_in_several_parts_is_one_step(tmp_path: Path) -> None:
    # each collective summed alone: a rank's parts of one (group, step) add up (bytes, durations;
    # the enqueue mean weighted by calls) before the ranks are compared
    raw_store = link_run(tmp_path / "raw", slow_group="dp0")
    whole = link.detect_from_store(resummarized(raw_store, tmp_path / "whole"), CFG)
    split = link.detect_from_store(resummarized(raw_store, tmp_path / "split", split=True), CFG)
    assert len(whole) == 1 and _json(split) == _json(whole)


@pytest.mark.parametrize("timed", [True, False])
@pytest.mark.parametrize("slow_rank", [None, 3])
def test_a_clean_run_or_a_slow_rank_from_summaries_is_no_link(
    tmp_path: Path, timed: bool, slow_rank: int | None
) -> None:
    raw_store = link_run(tmp_path / "raw", slow_rank=slow_rank, timed=timed)
    assert link.detect_from_store(resummarized(raw_store, tmp_path / "sum"), CFG) == []


def test_summaries_only_work_through_the_store_and_the_features(tmp_path: Path) -> None:
    # raw_steps=0: not one raw collective in the store (the daemon summed every step)
    raw_store = link_run(tmp_path / "raw", slow_group="dp1", slow_from=30)
    store = resummarized(raw_store, tmp_path / "sum", raw_steps=0)
    assert "collective" not in store.kinds() and "collective_summary" in store.kinds()
    (f,) = link.detect_from_store(store, CFG)
    assert f.link is not None and f.link.group == "dp1" and f.onset_step == 30
    assert f.hosts == ("node-a", "node-b") and _from_summaries(f) == 1.0
    features = Features.from_store(store)
    assert features.collectives.empty and len(features.collective_summaries)
    assert _json(DETECTORS["link"](features, None)) == _json([f])


def test_features_of_a_run_without_summaries_have_an_empty_frame(tmp_path: Path) -> None:
    features = Features.from_store(link_run(tmp_path))
    assert features.collective_summaries.empty and len(features.collectives)


@pytest.mark.parametrize("seed", range(6))
def test_waits_at_is_the_merge_of_the_last_step_event(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    spread = 40 if seed % 2 else 100_000  # dense table, or sparse keys (the merge path)
    steps = pd.DataFrame(
        {
            "rank": rng.integers(-1, 20, n) * (1 if seed % 2 else spread),
            "step": rng.integers(-1, 30, n),
            "collective_wait_ns": rng.integers(0, 10**9, n),
        }
    )
    rank = rng.integers(-1, 25, 200) * (1 if seed % 2 else spread)
    step = rng.integers(-1, 35, 200)
    waits = steps[(steps["rank"] >= 0) & (steps["step"] >= 0)]
    waits = waits.drop_duplicates(["rank", "step"], keep="last")
    want = (
        pd.DataFrame({"rank": rank, "step": step})
        .merge(waits, on=["rank", "step"], how="left")["collective_wait_ns"]
        .to_numpy(dtype=float, na_value=np.nan)
    )
    np.testing.assert_array_equal(link._waits_at(steps, rank, step), want)
