"""``detected_step`` is honest: the first step at which triage on the run so far names the
culprit. Triage of the run cut one step earlier does not; cut there, it does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.findings import Finding
from tests.fakes.contention_scenarios import ContentionRun
from tests.fakes.scenarios import Scenario

HOG = ContentionRun(contended=(2,), extra_ms=20.0)  # as test_detect_contention's


def _ids(run: ContentionRun | Scenario, tmp_path: Path) -> dict[str, Finding]:
    return {f.id: f for f in run_all(Features.from_store(run.write(tmp_path)))}


Make = Callable[[int], ContentionRun | Scenario]  # the same run, cut after so many steps


def _first_named_at(make: Make, steps: int, tmp_path: Path) -> tuple[Finding, set[str], set[str]]:
    whole = _ids(make(steps), tmp_path / "whole")
    (found,) = [f for f in whole.values() if f.severity != "info"]
    assert found.detected_step is not None
    cut = found.detected_step + 1  # steps 0 .. detected_step
    return (
        found,
        set(_ids(make(cut - 1), tmp_path / "before")),
        set(_ids(make(cut), tmp_path / "at")),
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_contention_is_detected_when_triage_so_far_names_it(tmp_path: Path, seed: int) -> None:
    found, before, at = _first_named_at(
        lambda n: replace(HOG, seed=seed, steps=n), HOG.steps, tmp_path
    )
    assert found.onset_step is not None and found.detected_step is not None
    assert found.detected_step >= found.onset_step + 29  # three windows above the noise
    assert found.id not in before and found.id in at


@pytest.mark.parametrize("seed", [0, 1])
def test_a_slow_rank_is_detected_when_triage_so_far_names_it(tmp_path: Path, seed: int) -> None:
    found, before, at = _first_named_at(
        lambda n: Scenario(
            slow_ranks=(1,), onset_step=50, severity=0.3, noise=0.05, seed=seed, steps=n
        ),
        100,
        tmp_path,
    )
    assert found.onset_step == 50 and found.detected_step is not None
    assert found.detected_step <= 53  # three steps far beyond the flag
    assert found.id not in before and found.id in at
