"""``diag demo``, the README's first command: its real 4-rank job with a slow rank ends once the
live triage has decided about that rank, and the verdict names it, its cause and its onset.

One torchrun launch (about 15 s on two cores)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fakes.diagproc import diag, env

pytestmark = pytest.mark.integration

CAP = 1500


def test_the_demo_stops_once_diag_decided_and_names_the_slow_rank(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = subprocess.run(
        diag("demo", "--out", str(out), "--live", "off", "--steps", str(CAP)),
        env=env(), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "diag demo: live triage decided:" in res.stdout and "on rank 2" in res.stdout
    findings = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]
    top = findings[0]
    assert (top["cause"], top["ranks"]) == ("node", [2]), top["summary"]
    assert 19 <= top["onset_step"] <= 22, top["summary"]
    assert "undecided" not in top["summary"]
    steps = json.loads(
        subprocess.run(
            diag("report", str(out), "--json"), env=env(), capture_output=True, text=True,
            check=True,
        ).stdout
    )["run"]["steps"]  # fmt: skip
    assert steps < CAP - 1  # ended early, at the stop file
