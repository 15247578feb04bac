"""Golden scenarios for the data detector: one rank's loader, every rank's, a moving imbalance."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from diag.diagnose.detectors import data
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from tests.fakes.scenarios import Scenario


def _features(sc: Scenario, tmp_path: Path) -> Features:
    return Features.from_store(sc.write(tmp_path))


def test_one_rank_data_loader(tmp_path: Path) -> None:
    f = _features(Scenario(data_ranks=(1,), onset_step=40, severity=0.2), tmp_path)
    (found,) = run_all(f)
    assert (found.id, found.cause, found.ranks, found.severity) == (
        "data-rank1",
        "data",
        (1,),
        "warning",
    )
    assert found.onset_step is not None and abs(found.onset_step - 40) <= 3
    assert found.slowdown == pytest.approx(0.2, abs=0.03)
    assert found.evidence[0].metric == "data_ms"


def test_every_rank_data_loader(tmp_path: Path) -> None:
    f = _features(Scenario(data_ranks=(0, 1, 2, 3), onset_step=60, severity=0.25), tmp_path)
    (found,) = data.detect(f)
    assert (found.id, found.ranks) == ("data-all", (0, 1, 2, 3))
    assert found.onset_step is not None and abs(found.onset_step - 60) <= 3
    assert found.slowdown == pytest.approx(0.25, abs=0.03)
    share = found.evidence[0]
    assert share.reference is not None and share.value > share.reference + 0.15


def test_moving_imbalance_is_data_not_node(tmp_path: Path) -> None:
    f = _features(Scenario(ranks=8, ranks_per_host=4, moving_imbalance=0.3), tmp_path)
    (found,) = run_all(f)
    assert (found.id, found.cause, found.onset_step) == ("data-moving", "data", None)
    assert len(found.ranks) == 3 and found.severity == "warning"
    assert found.slowdown == pytest.approx(0.3 * 100 / 150, abs=0.03)


def test_config_thresholds_are_used(tmp_path: Path) -> None:
    f = _features(Scenario(ranks=8, ranks_per_host=4, moving_imbalance=0.3), tmp_path)
    strict = replace(data.DataConfig(), min_ratio=1.5)
    assert data.detect(f, strict) == []
