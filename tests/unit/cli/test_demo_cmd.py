"""``diag demo`` ends its job once a live finding decides about the slow rank."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from diag.cli import demo_cmd
from diag.diagnose.coverage import CoverageConfig, decided, undecided
from diag.diagnose.triage import TriageResult
from diag.findings import Finding


def _node(rank: int) -> Finding:
    return Finding(
        id=f"node-rank{rank}", symptom="slowdown", cause="node", severity="critical",
        ranks=(rank,), onset_step=20, confidence=0.9, summary=f"rank {rank} computes 20x",
    )  # fmt: skip


def test_an_undecided_finding_lets_the_job_run_and_a_decided_one_stops_it_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stop = tmp_path / "stop"
    watch = demo_cmd.StopWhenDecided(2, stop)
    watch(TriageResult(run={}, findings=(undecided(_node(2), CoverageConfig()),)))
    assert not stop.exists()  # node or kernel: a profiler window after the onset decides
    watch(TriageResult(run={}, findings=(decided(_node(3), 1),)))
    assert not stop.exists()  # not the rank the demo slowed down
    stalled = dataclasses.replace(_node(2), id="data-rank2", cause="data")
    watch(TriageResult(run={}, findings=(stalled,)))
    assert not stop.exists()  # about the rank, but not its node or a kernel: later passes see
    watch(TriageResult(run={}, findings=(decided(_node(2), 1),)))
    assert stop.exists() and watch.finding is not None and watch.finding.ranks == (2,)
    stop.unlink()
    watch(TriageResult(run={}, findings=(decided(_node(2), 2),)))
    assert not stop.exists()  # asked once
    out = capsys.readouterr().out
    assert out.count("stopping the job") == 1 and "node (critical" in out


def test_the_job_is_told_where_its_stop_file_is() -> None:
    parser = argparse.ArgumentParser()
    demo_cmd.configure(parser)
    args = parser.parse_args([])
    cmd = demo_cmd.demo_command(args, Path("/tmp/x/stop"))
    assert cmd[cmd.index("--stop-file") + 1] == "/tmp/x/stop"
    assert cmd[cmd.index("--steps") + 1] == "1500" and args.triage_interval == 1.0
    assert "--stop-file" not in demo_cmd.demo_command(args)
