"""The op-table generator: a timing table ``diag triage`` reads, a real 1F1B schedule, faults only
where and when the scenario says, and a tuning set apart from the held-out one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diag.diagnose.timing_table import features_from_table, read_timing_table
from diag.selftest.optables import SCENARIOS, Spec, culprits, expected, generate, specs

SPEC = Spec(pp=4, dp=2, tp=2, microbatches=6, steps=8, onset=4)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return generate(SPEC)


def test_the_table_reads_as_a_timing_table(tmp_path: Path, table: pd.DataFrame) -> None:
    path = tmp_path / "ops.parquet"
    table.to_parquet(path, index=False)
    read = read_timing_table(path)
    assert len(read) == len(table) and read["rank"].nunique() == SPEC.world == 16
    for col in ("dp_rank", "pp_rank", "tp_rank", "microbatch", "host"):
        assert col in read.columns
    assert set(read["phase"]) == {"data", "forward", "backward", "collective", "optimizer"}


def test_each_rank_runs_its_microbatches_on_a_1f1b_schedule(table: pd.DataFrame) -> None:
    compute = table[table["phase"].isin(["forward", "backward"])]
    for _, spans in compute.groupby(["rank", "step"]):
        spans = spans.sort_values("start_ns")
        ends = (spans["start_ns"] + spans["duration_ns"]).to_numpy()
        assert (spans["start_ns"].to_numpy()[1:] >= ends[:-1]).all()  # one at a time
        assert len(spans) == 2 * SPEC.microbatches
    # Stage 0 of a 4-stage pipeline runs 3 warm-up forwards before its first backward; the
    # last stage alternates from the start.
    first = compute[compute["step"] == 0].sort_values("start_ns")
    order0 = first[first["rank"] == SPEC.rank(0, 0, 0)]["phase"].tolist()
    order3 = first[first["rank"] == SPEC.rank(3, 0, 0)]["phase"].tolist()
    assert order0[:4] == ["forward"] * 4 and order0[4] == "backward"
    assert order3[:2] == ["forward", "backward"]
    # A forward of microbatch m on stage s starts after stage s - 1's forward of m ended.
    fwd = compute[(compute["phase"] == "forward") & (compute["dp_rank"] == 1)]
    ends = fwd.assign(end=fwd["start_ns"] + fwd["duration_ns"])
    by = ends.groupby(["step", "pp_rank", "microbatch"])
    start, end = by["start_ns"].min(), by["end"].max()
    for (step, p, m), s in start.items():
        if p > 0:
            assert s >= end[(step, p - 1, m)]


def test_every_rank_ends_the_step_together(table: pd.DataFrame) -> None:
    world = table[table["op"] == "all_reduce_world"]
    ends = (world["start_ns"] + world["duration_ns"]).groupby(world["step"]).nunique()
    assert (ends == 1).all()


def test_gaps_count_as_wait_not_compute() -> None:
    spec = Spec(pp=4, dp=2, tp=1, microbatches=4, steps=3, p2p_spans=False)
    table = generate(spec)
    assert not table["op"].str.startswith("recv").any()
    steps = features_from_table(table).steps.set_index(["rank", "step"])
    spans = table[table["phase"].isin(["forward", "backward", "optimizer"])]
    own = spans.groupby(["rank", "step"])["duration_ns"].sum() / 1e6
    assert np.allclose(steps["compute_ms"].sort_index(), own.sort_index(), atol=1e-3)
    last = steps.xs(spec.rank(3, 0, 0), level="rank")  # the last stage idles at first
    assert (last["wait_ms"] > 5 * spec.fwd_ms).all()


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s not in ("clean", "moving")])
def test_faults_hit_their_culprits_only_from_their_onset(scenario: str) -> None:
    spec = Spec(pp=2, dp=4, tp=2, microbatches=2, steps=6, onset=3, seed=5, scenario=scenario)
    faulty, clean = generate(spec), generate(Spec(**{**_fields(spec), "scenario": "clean"}))
    ranks = culprits(spec)
    assert ranks and 0 not in ranks and expected(spec).ranks == ranks
    key = ["rank", "step", "microbatch"]
    fwd = faulty[faulty["phase"] == "forward"].merge(
        clean[clean["phase"] == "forward"], on=key, suffixes=("", "_clean")
    )
    assert len(fwd) == spec.world * spec.steps * spec.microbatches
    slower = fwd["duration_ns"] > 1.2 * fwd["duration_ns_clean"]
    from_start = scenario in ("stage", "slow_start")
    hit = fwd["rank"].isin(ranks) & (fwd["step"] >= (0 if from_start else spec.onset))
    assert (slower == hit).all()


def test_the_culprit_sets() -> None:
    spec = Spec(pp=2, dp=4, tp=2, ranks_per_host=4, seed=2)
    host = culprits(Spec(**{**_fields(spec), "scenario": "host"}))
    assert len(host) == 4 and len({spec.host(r) for r in host}) == 1
    tp = culprits(Spec(**{**_fields(spec), "scenario": "tp_group"}))
    coords = spec.coords()
    assert len(tp) == 2 and len({tuple(coords[r][:2]) for r in tp}) == 1
    replica = culprits(Spec(**{**_fields(spec), "scenario": "replica"}))
    assert len(replica) == 4 and len({coords[r][1] for r in replica}) == 1
    assert expected(Spec(scenario="moving")).cause == "data"
    assert expected(Spec(scenario="slow_start")).onset is None


def test_tuning_and_held_out_sets_share_no_seed_or_layout() -> None:
    tuning, held = specs("tuning"), specs("held-out")
    assert {s.seed for s in tuning}.isdisjoint({s.seed for s in held})
    shape = lambda s: (s.pp, s.dp, s.tp, s.order, s.p2p_spans)  # noqa: E731
    assert {shape(s) for s in tuning}.isdisjoint({shape(s) for s in held})
    assert {s.world for s in held} == {64, 256, 1024}
    assert {s.scenario for s in held} == set(SCENARIOS)


def _fields(spec: Spec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in Spec.__dataclass_fields__}
