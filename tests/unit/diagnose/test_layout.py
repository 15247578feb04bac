"""The layout model: work classes from table columns, process groups, p2p order, time profiles."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from diag import schema
from diag.diagnose.features import Features
from diag.diagnose.layout import from_columns
from diag.diagnose.timing_table import features_from_table
from diag.selftest.optables import Spec, culprits, generate
from diag.store.run_store import RunStore
from tests.fakes.layouts import Group, p2p_events, pg_events, sources
from tests.fakes.scenarios import Scenario

LAYOUT_COLUMNS = ["pp_rank", "dp_rank", "tp_rank"]


def _features(tmp_path: Path, events: list[schema.Event], ranks: int = 4) -> Features:
    sc = Scenario(ranks=ranks, steps=30)
    store = RunStore.create(tmp_path)
    store.append([*sc.events(), *events])
    store.flush()
    return Features.from_store(RunStore.open(tmp_path))


def test_table_columns_give_stages_tp_positions_and_replicas() -> None:
    spec = Spec(pp=2, dp=2, tp=2, microbatches=2, steps=3)
    layout = from_columns(generate(spec))
    assert layout is not None and layout.source == "table columns"
    assert layout.describe() == (
        "layout from table columns: 2 stages x 2 replicas x 2 TP positions"
    )
    # Megatron order: rank = (pp x dp + dp) x tp + tp; a class is one (stage, TP position).
    assert sorted(layout.classes().values()) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert layout.position(6) == "stage 1, TP 0, replica 1"
    kinds = {(g.kind, g.ranks) for g in layout.groups()}
    assert ("replica", (2, 3, 6, 7)) in kinds and ("tp group", (4, 5)) in kinds
    assert ("stage", (0, 1, 2, 3)) in kinds


PP_DP: list[Group] = [
    ("1", "pp", [0, 1]),
    ("2", "pp", [2, 3]),
    ("3", "dp", [0, 2]),
    ("4", "dp", [1, 3]),
]


def test_named_process_groups(tmp_path: Path) -> None:
    srcs = sources(4)
    layout = _features(tmp_path, pg_events(srcs, PP_DP)).layout
    assert layout is not None and layout.source == "process groups"
    assert layout.describe() == "layout from process groups: 2 stages x 2 replicas"
    assert dict(layout.stage) == {0: 0, 1: 1, 2: 0, 3: 1}
    assert dict(layout.replica) == {0: 0, 1: 0, 2: 1, 3: 1}
    assert sorted(layout.classes().values()) == [(0, 2), (1, 3)]


def test_megatron_group_descriptions(tmp_path: Path) -> None:
    # PP2 x DP2 x TP2 in Megatron's order; its model-parallel group (TP x PP of one replica),
    # embedding group (first and last stages) and a partial DP group say nothing more.
    srcs = sources(8, ranks_per_host=4)
    groups: list[Group] = [
        ("1", "TENSOR_MODEL_PARALLEL_GROUP", [0, 1]),
        ("2", "TENSOR_MODEL_PARALLEL_GROUP", [2, 3]),
        ("3", "TENSOR_MODEL_PARALLEL_GROUP", [4, 5]),
        ("4", "TENSOR_MODEL_PARALLEL_GROUP", [6, 7]),
        ("5", "PIPELINE_MODEL_PARALLEL_GROUP", [0, 4]),
        ("6", "PIPELINE_MODEL_PARALLEL_GROUP", [1, 5]),
        ("7", "PIPELINE_MODEL_PARALLEL_GROUP", [2, 6]),
        ("8", "PIPELINE_MODEL_PARALLEL_GROUP", [3, 7]),
        ("9", "DATA_PARALLEL_GROUP", [0, 2]),
        ("10", "DATA_PARALLEL_GROUP", [1, 3]),
        ("11", "DATA_PARALLEL_GROUP", [4, 6]),
        ("12", "DATA_PARALLEL_GROUP", [5, 7]),
        ("13", "MODEL_PARALLEL_GROUP", [0, 1, 4, 5]),
        ("14", "MODEL_PARALLEL_GROUP", [2, 3, 6, 7]),
        ("15", "EMBEDDING_GROUP", [0, 4]),
    ]
    layout = _features(tmp_path, pg_events(srcs, groups), ranks=8).layout
    assert layout is not None
    assert layout.summary == "2 stages x 2 replicas x 2 TP positions"
    assert sorted(layout.classes().values()) == [(0, 2), (1, 3), (4, 6), (5, 7)]


def test_unnamed_groups_read_from_p2p_traffic_and_structure(tmp_path: Path) -> None:
    # No descriptions: the groups p2p operations ride on are the pipelines; the other partition
    # of the world is the data-parallel one.
    srcs = sources(4)
    groups = [(name, "", ranks) for name, _, ranks in PP_DP]
    ops = {0: ("send", "recv"), 1: ("recv", "send"), 2: ("send", "recv"), 3: ("recv", "send")}
    p2p = p2p_events(srcs, {0: ops[0], 1: ops[1]}, 3, pg_name="1")
    p2p += p2p_events(srcs, {2: ops[2], 3: ops[3]}, 3, pg_name="2")
    layout = _features(tmp_path, pg_events(srcs, groups) + p2p).layout
    assert layout is not None and layout.summary == "2 stages x 2 replicas"
    assert sorted(layout.classes().values()) == [(0, 2), (1, 3)]


def test_stages_from_p2p_order_on_the_world_group(tmp_path: Path) -> None:
    # A 2-stage x 2-replica job that sends and receives on the default group and all-reduces
    # gradients in per-stage groups: the first stage's steps begin with a send.
    srcs = sources(4)
    groups: list[Group] = [("1", "", [0, 2]), ("2", "", [1, 3])]
    ops = {0: ("send", "recv"), 2: ("send", "recv"), 1: ("recv", "send"), 3: ("recv", "send")}
    layout = _features(tmp_path, pg_events(srcs, groups) + p2p_events(srcs, ops, 4)).layout
    assert layout is not None and layout.source == "process groups"
    assert dict(layout.stage) == {0: 0, 1: 1, 2: 0, 3: 1}
    assert "stages from p2p order" in layout.summary
    assert sorted(layout.classes().values()) == [(0, 2), (1, 3)]


def test_three_stages_from_p2p_order(tmp_path: Path) -> None:
    srcs = sources(6)
    ops = {
        0: ("send", "recv"),
        1: ("recv", "send", "recv", "send"),
        2: ("recv", "send"),
    }
    ops = {r + 3 * k: o for k in range(2) for r, o in ops.items()}
    layout = _features(tmp_path, p2p_events(srcs, ops, 4), ranks=6).layout
    assert layout is not None and dict(layout.stage) == {0: 0, 1: 1, 2: 2, 3: 0, 4: 1, 5: 2}


def test_hierarchical_data_parallel_groups_split_nothing(tmp_path: Path) -> None:
    # Rail groups of a data-parallel job: every rank still does the same work.
    srcs = sources(4)
    layout = _features(tmp_path, pg_events(srcs, [("1", "", [0, 2]), ("2", "", [1, 3])])).layout
    assert layout is not None and layout.source == "process groups"
    assert set(layout.work_class.values()) == {0} and layout.summary == "2 replicas"


def test_two_unnamed_dimensions_tp_is_the_host_local_one(tmp_path: Path) -> None:
    srcs = sources(4)  # hosts: node0 = ranks 0, 1; node1 = ranks 2, 3
    groups: list[Group] = [
        ("1", "", [0, 2]),
        ("2", "", [1, 3]),
        ("3", "", [0, 1]),
        ("4", "", [2, 3]),
    ]
    layout = _features(tmp_path, pg_events(srcs, groups)).layout
    assert layout is not None
    assert dict(layout.tp) == {0: 0, 1: 1, 2: 0, 3: 1}
    assert dict(layout.replica) == {0: 0, 2: 1, 1: 0, 3: 1}
    assert sorted(layout.classes().values()) == [(0, 2), (1, 3)]


def test_world_group_alone_says_nothing(tmp_path: Path) -> None:
    layout = _features(tmp_path, pg_events(sources(4), [])).layout
    assert layout is not None and not layout.known
    assert layout.describe().startswith("layout unknown")


def _without_columns(spec: Spec) -> Features:
    return features_from_table(generate(spec).drop(columns=LAYOUT_COLUMNS))


def test_profiles_find_a_heavy_stage_without_columns() -> None:
    spec = Spec(pp=2, dp=8, tp=1, microbatches=4, steps=30, scenario="stage", extra=0.4)
    spec = replace(spec, ranks_per_host=4)  # each stage on two hosts
    layout = _without_columns(spec).layout
    assert layout is not None and layout.source == "time profiles"
    assert sorted(layout.classes().values()) == [tuple(range(8)), culprits(spec)]
    # A stage that is exactly one host could as well be a slow host: no class then.
    assert not _without_columns(replace(spec, ranks_per_host=8)).work_layout().known


@pytest.mark.parametrize("scenario", ["slow_start", "host"])
def test_profiles_never_make_a_class_of_one_rank_or_one_host(scenario: str) -> None:
    spec = Spec(pp=1, dp=16, tp=1, microbatches=4, steps=30, scenario=scenario, onset=0)
    layout = _without_columns(spec).layout
    assert layout is not None and not layout.known


def test_layout_of_hand_made_features_is_inferred() -> None:
    table = generate(Spec(pp=2, dp=2, tp=1, microbatches=2, steps=12))
    f = features_from_table(table.drop(columns=LAYOUT_COLUMNS))
    bare = Features(steps=f.steps, ckpt=f.ckpt, host=f.host, proc=f.proc)
    assert bare.layout is None and not bare.work_layout().known
    assert f.layout == bare.work_layout() or f.layout is not None
