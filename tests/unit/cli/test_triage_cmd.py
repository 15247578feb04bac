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
