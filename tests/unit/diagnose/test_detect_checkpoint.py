"""Golden scenarios for the checkpoint detector: slow saves named; fast periodic saves ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.diagnose.detectors import checkpoint
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from tests.fakes.scenarios import Scenario


def test_slow_checkpoint_names_paths_and_throughput(tmp_path: Path) -> None:
    sc = Scenario(ckpt_every=25, ckpt_ms=1000, ckpt_bytes=500 * 10**6)
    (found,) = run_all(Features.from_store(sc.write(tmp_path)))
    assert (found.id, found.cause, found.ranks) == ("checkpoint", "checkpoint", (0, 1, 2, 3))
    assert found.onset_step == 24
    # 4 saves of 1 s in a run of 115 analysed steps of 125 ms plus those 4 s.
    assert found.slowdown == pytest.approx(4.0 / (115 * 0.125 + 4.0), abs=0.01)
    assert found.severity == "warning" and found.confidence > 0.9
    rates = [e for e in found.evidence if e.metric == "throughput_mb_s"]
    assert [e.subject for e in rates] == [f"/ckpt/run1/step{s}" for s in (24, 49, 74)]
    assert [e.value for e in rates] == pytest.approx([500.0] * 3)
    assert "500 MB/s" in found.summary


def test_fast_checkpoints_give_nothing(tmp_path: Path) -> None:
    sc = Scenario(ckpt_every=10, ckpt_ms=5, ckpt_bytes=10**8)
    assert checkpoint.detect(Features.from_store(sc.write(tmp_path))) == []


def test_slow_step_without_checkpoint_time_is_not_blamed_on_it(tmp_path: Path) -> None:
    sc = Scenario(slow_ranks=(0,), onset_step=60, severity=0.3)
    assert checkpoint.detect(Features.from_store(sc.write(tmp_path))) == []
