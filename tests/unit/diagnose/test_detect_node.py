"""Golden scenarios for the node detector: a slow rank, a slow host, a structural imbalance."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.diagnose.detectors import node
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from tests.fakes.scenarios import Scenario


def _features(sc: Scenario, tmp_path: Path) -> Features:
    return Features.from_store(sc.write(tmp_path))


def test_slow_rank_with_onset(tmp_path: Path) -> None:
    f = _features(Scenario(slow_ranks=(2,), onset_step=50, severity=0.2), tmp_path)
    (found,) = node.detect(f)
    assert (found.cause, found.ranks, found.severity) == ("node", (2,), "warning")
    assert found.hosts == ("node1",)  # the host the slow rank runs on
    assert found.onset_step is not None and abs(found.onset_step - 50) <= 3
    assert found.detected_step is not None and 50 <= found.detected_step <= 60
    assert found.slowdown == pytest.approx(0.2, abs=0.03)
    assert found.confidence > 0.9
    compute, wait = found.evidence[:2]
    assert compute.subject == "rank 2" and compute.value > 1.2 * (compute.reference or 0)
    assert wait.reference is not None and wait.value > wait.reference + 20
    assert [x.id for x in run_all(f)] == ["node-rank2"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_clearly_slow_rank_is_found_within_three_steps_of_its_onset(
    tmp_path: Path, seed: int
) -> None:
    # 30% of the job lost: each step of rank 1 is far beyond the flag, three in a row say it
    sc = Scenario(slow_ranks=(1,), onset_step=50, severity=0.3, noise=0.05, seed=seed)
    (found,) = node.detect(_features(sc, tmp_path))
    assert (found.cause, found.ranks, found.onset_step) == ("node", (1,), 50)
    assert found.detected_step is not None and 50 <= found.detected_step <= 53


def test_slow_host_names_the_host(tmp_path: Path) -> None:
    f = _features(Scenario(slow_ranks=(2, 3), onset_step=50, severity=0.35), tmp_path)
    (found,) = node.detect(f)
    assert (found.cause, found.ranks, found.hosts) == ("node", (2, 3), ("node1",))
    assert found.severity == "critical" and found.slowdown == pytest.approx(0.35, abs=0.03)


def test_slow_from_the_start_is_a_node_without_onset(tmp_path: Path) -> None:
    # No layout is known (no process groups, ranks alike): every rank is presumed to do the same
    # work, so one rank slow from the first step is a slow node, and the finding says why.
    f = _features(Scenario(slow_ranks=(3,), onset_step=0, severity=0.2), tmp_path)
    (found,) = node.detect(f)
    assert (found.cause, found.ranks, found.onset_step) == ("node", (3,), None)
    assert found.slowdown == pytest.approx(0.2, abs=0.03)
    assert "from the start" in found.summary and "layout unknown" in found.summary
    (peers,) = [e for e in found.evidence if e.metric == "peers"]
    assert peers.value == 3 and peers.note.startswith("layout unknown")


def test_two_ranks_small_slowdown_is_info(tmp_path: Path) -> None:
    sc = Scenario(ranks=2, slow_ranks=(1,), onset_step=60, severity=0.08)
    (found,) = node.detect(_features(sc, tmp_path))
    assert found.ranks == (1,) and found.severity == "info"


def test_too_few_steps_or_ranks_give_nothing(tmp_path: Path) -> None:
    assert node.detect(_features(Scenario(ranks=1, steps=40), tmp_path / "a")) == []
    sc = Scenario(steps=12, slow_ranks=(0,), severity=0.3)
    assert node.detect(_features(sc, tmp_path / "b")) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_run_has_no_warning(tmp_path: Path, seed: int) -> None:
    sc = Scenario(ranks=8, ranks_per_host=4, seed=seed, ckpt_every=20, ckpt_ms=5, ckpt_bytes=10**8)
    findings = run_all(_features(sc, tmp_path))
    assert [f.id for f in findings if f.severity != "info"] == []


@pytest.mark.parametrize(
    "sc",
    [
        Scenario(ranks=8, slow_ranks=(2,), onset_step=50, severity=0.2),
        Scenario(ranks=8, slow_ranks=(4, 5), onset_step=40, severity=0.15, seed=1),
        Scenario(ranks=8, stall_ranks=(3,), onset_step=30, severity=0.3, seed=2),
        Scenario(ranks=8, moving_imbalance=0.3, seed=3),
    ],
    ids=["rank", "host", "stall", "noise"],
)
def test_the_findings_do_not_depend_on_the_block_the_tables_are_worked_in(
    tmp_path: Path, sc: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node detector works its step x rank tables a block of steps at a time (~1 M cells, so
    a 131,072-rank table is never copied whole): blocks of a few cells give the same findings,
    number for number, as one block of the whole table."""
    from diag.diagnose import features as features_mod
    from diag.diagnose.detectors import node_slow

    whole = node.detect(_features(sc, tmp_path / "a"))
    monkeypatch.setattr(node_slow, "_BLOCK_CELLS", 7)
    monkeypatch.setattr(features_mod, "_PEER_BLOCK_CELLS", 5)
    assert node.detect(_features(sc, tmp_path / "b")) == whole
