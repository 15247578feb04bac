"""``diag triage``: --json shape and order, findings.jsonl, and one-line errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.findings import findings_from_json, ranked
from tests.fakes.cli import run_cli
from tests.fakes.scenarios import Scenario


def test_json_shape_sorting_and_findings_file(tmp_path: Path) -> None:
    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2, ckpt_every=40, ckpt_ms=800)
    sc.write(tmp_path)
    res = run_cli("triage", str(tmp_path), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out) == {"run", "findings"}
    assert out["run"]["world_size"] == 4 and out["run"]["steps"] == 120
    ids = [f["id"] for f in out["findings"]]
    assert sorted(ids) == ["checkpoint", "node-rank2"]
    found = findings_from_json(out["findings"])
    assert list(found) == ranked(found)  # severity, then share lost x confidence
    lines = (tmp_path / "findings.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ids


def test_table_output(tmp_path: Path) -> None:
    Scenario(slow_ranks=(2, 3), onset_step=50, severity=0.2).write(tmp_path)
    res = run_cli("triage", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "node1" in res.stdout and "warning" in res.stdout
    lines = res.stdout.splitlines()
    assert any(line.startswith("1. ") and "onset step" in line for line in lines)  # when
    assert any(line.startswith("   compute_ms of ") for line in lines)  # and the evidence
    (verdict,) = [line for line in lines if line.startswith("verdict: ")]
    assert verdict.startswith("verdict: warning node: ") and lines[-1] == verdict


def test_fail_on_gates_a_ci_step_on_severity(tmp_path: Path) -> None:
    Scenario(slow_ranks=(2,), onset_step=50, severity=0.2).write(tmp_path)
    found = json.loads(run_cli("triage", str(tmp_path), "--json").stdout)["findings"]
    worst = max((f["severity"] for f in found), key=["info", "warning", "critical"].index)
    for floor in ("warning", "critical"):
        res = run_cli("triage", str(tmp_path), "--fail-on", floor)
        want = ["info", "warning", "critical"].index(worst) >= ["warning", "critical"].index(
            floor
        ) + 1
        assert res.returncode == (1 if want else 0), (floor, worst)
    clean = tmp_path / "clean"
    Scenario().write(clean)
    res = run_cli("triage", str(clean), "--fail-on", "warning")
    assert res.returncode == 0 and "verdict: no problem found in 120 steps of 4 ranks" in res.stdout


def test_a_path_that_is_no_run_table_or_remains_is_exit_2(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\nprint('hello')\n")
    for path in (script, tmp_path):
        res = run_cli("triage", str(path))
        assert res.returncode == 2, res.stdout
        (line,) = res.stderr.strip().splitlines()
        assert "not a diag run directory, a timing table (.parquet/.csv) or a failed run" in line


def _truncated_part(target: Path) -> None:
    Scenario(steps=20).write(target)
    part = next((target / "store" / "step").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:100])


@pytest.mark.parametrize("make", ["missing", "empty", "truncated"])
def test_bad_input_is_one_line(tmp_path: Path, make: str) -> None:
    target = tmp_path / "x"
    if make == "empty":
        target.mkdir()
    elif make == "truncated":
        _truncated_part(target)
    res = run_cli("triage", str(target), "--json")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert lines[0].startswith("diag triage: error:") and str(target) in lines[0]
    assert not (target / "findings.jsonl").exists()


def test_quiet_keeps_diags_own_log_lines_off_stderr(tmp_path: Path) -> None:
    Scenario().write(tmp_path)
    (tmp_path / "auto_capture.jsonl").write_text("not json\n")  # logged as a warning
    loud = run_cli("triage", str(tmp_path))
    assert loud.returncode == 0 and "auto_capture.jsonl line 1: skipped" in loud.stderr
    quiet = run_cli("-q", "triage", str(tmp_path))
    assert quiet.returncode == 0 and quiet.stderr == "" and "verdict: " in quiet.stdout
