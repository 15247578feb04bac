"""Failures of jobs run with plain ``torchrun`` (no diag): ``diag triage`` on what torchrun left.

The jobs are ``diag/selftest/workloads/hang_job.py`` launched by ``torchrun --log-dir DIR
--redirects 3``, so the only remains are torchrun's per-rank stdout/stderr files and its own output
(kept next to them, as a launcher's log would be). One launch per test: a rank that raises (the job
fails in a second or two) and, with 3 ranks, a rank that skips a collective (the others time out
after the
process group's 12 s timeout; torchrun's own summary blames a rank that timed out waiting).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from diag.selftest.workloads import HANG_JOB
from tests.fakes.diagproc import diag, env

pytestmark = pytest.mark.integration

JOB = HANG_JOB


def _run_plain(tmp_path: Path, nproc: int, *job_args: str) -> Path:
    logs = tmp_path / "remains"
    logs.mkdir()
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(nproc), "--log-dir", str(logs / "torchrun"), "--redirects", "3",
        str(JOB), "--steps", "30", "--at-step", "5", "--timeout-s", "12", *job_args,
    ]  # fmt: skip
    res = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=180)
    assert res.returncode != 0, "the job was meant to fail"
    (logs / "launcher.log").write_text(res.stdout + res.stderr)
    return logs


def _triage(path: Path) -> dict[str, Any]:
    res = subprocess.run(
        diag("triage", str(path), "--json"), env=env(), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def test_a_rank_that_raises_is_named_from_torchrun_logs_alone(tmp_path: Path) -> None:
    out = _triage(_run_plain(tmp_path, 2, "--raise-rank", "1"))
    top = out["findings"][0]
    assert top["symptom"] == "crash" and top["ranks"] == [1], out["findings"]
    assert "RuntimeError" in top["summary"], top["summary"]


def test_a_rank_that_skips_a_collective_is_named_not_the_one_torchrun_blames(
    tmp_path: Path,
) -> None:
    out = _triage(_run_plain(tmp_path, 3, "--skip-collective-rank", "1"))
    top = out["findings"][0]
    assert top["symptom"] in ("hang", "crash") and top["ranks"] == [1], out["findings"]
    # No Flight Recorder dumps were written: diag says so rather than guessing the collective.
    assert out.get("missing"), out
