"""The injection mechanisms: several of different nature per cause, split up front, each giving
the training job arguments it accepts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from diag.selftest.cases import Case, Unsupported
from diag.selftest.live import _base_args, job_args, prepare
from diag.selftest.mechanisms import (
    DEFAULT_MECHANISM,
    HELDOUT,
    MECHANISMS,
    TUNE,
    mechanism_of,
    split_of,
)
from diag.selftest.workloads.pipeline_job import parse_args as pipeline_args
from diag.selftest.workloads.train_ddp import parse_args


def test_every_cause_has_tuning_and_held_out_mechanisms_of_several_natures() -> None:
    per_cause = Counter(m.cause for m in MECHANISMS.values())
    assert all(per_cause[c] >= 3 for c in ("node", "data", "kernel", "checkpoint")), per_cause
    assert per_cause["structural"] >= 1
    assert per_cause["link"] >= 2
    for cause, name in DEFAULT_MECHANISM.items():
        assert MECHANISMS[name].cause == cause
        # a cause's default is its tuning mechanism, where it has one (structural's live
        # pipeline case is held out: the layout was tuned on generated op tables)
        tuned = [m for m in MECHANISMS.values() if m.cause == cause and m.split == TUNE]
        assert MECHANISMS[name].split == TUNE or not tuned
    assert {m.split for m in MECHANISMS.values()} == {TUNE, HELDOUT}
    assert len({m.nature for m in MECHANISMS.values()}) == len(MECHANISMS)


@pytest.mark.parametrize("name", [n for n, m in MECHANISMS.items() if m.cause != "link"])
def test_each_local_mechanism_gives_the_job_arguments_it_accepts(name: str) -> None:
    mech = MECHANISMS[name]
    case = Case(cause=mech.cause, severity=0.2, ranks=(2,), onset_step=30, mechanism=name)
    if mech.workload == "pipeline":
        args = pipeline_args(job_args(case, Path("/tmp/ckpt")))
        assert args.pp == 2 and args.steps == case.steps
        return
    args = parse_args(job_args(case, Path("/tmp/ckpt")))
    assert args.severity == 0.2
    full, base = job_args(case, Path("/tmp/ckpt")), _base_args(case)
    applied = any(full[i : i + len(base)] == base for i in range(len(full)))
    assert applied != mech.replaces_base  # the cause's tuning injector, unless replaced
    if mech.actor is not None:
        assert args.print_every == 1  # the runner follows every step to act at the onset


def test_cases_name_their_mechanism_and_split() -> None:
    plain = Case(cause="node", severity=0.2, ranks=(1,), onset_step=30)
    hog = Case(cause="node", severity=0.2, ranks=(1,), onset_step=30, mechanism="node.cpu_hog")
    assert mechanism_of(plain) is MECHANISMS["node.extra_compute"] and split_of(plain) == TUNE
    assert split_of(hog) == HELDOUT and hog.name == "node.cpu_hog/20%/seed0"
    assert split_of(Case(cause="clean")) == TUNE
    with pytest.raises(Unsupported, match="injects node, not data"):
        mechanism_of(Case(cause="data", severity=0.2, mechanism="node.cpu_hog"))


def test_prepare_sets_what_the_mechanism_makes_the_answer() -> None:
    skew = prepare(Case(cause="data", severity=0.2, ranks=(1,), onset_step=30,
                        mechanism="data.skewed_lengths"))  # fmt: skip
    assert skew.ranks == ()  # a moving imbalance has no culprit rank
    start = prepare(Case(cause="node", severity=0.2, ranks=(1,), onset_step=30,
                         mechanism="node.from_start"))  # fmt: skip
    assert start.onset_step is None
    custom = prepare(Case(cause="kernel", severity=0.2, ranks=(1,), onset_step=30))
    other = prepare(Case(cause="kernel", severity=0.2, ranks=(1,), onset_step=30,
                         mechanism="kernel.float64"))  # fmt: skip
    assert custom.kernel == "diagfault::scale_input" and other.kernel is None
    stage = prepare(Case(cause="structural", severity=0.2, ranks=(3,), onset_step=None))
    assert stage.ranks == (2, 3) and stage.onset_step is None  # every replica of stage 1
