"""``--config`` of diag triage, ``--detector-config`` of diag analyzer and diag run: the file's
thresholds reach the detectors; a bad file is one line and exit 2 before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.cli import runtime
from diag.cli.main import main
from diag.diagnose.detector_config import parse_detector_config
from tests.fakes.cli import run_cli
from tests.fakes.scenarios import Scenario

STRICT = "[node]\nmin_ratio = 2.0\n"  # a 25% slower rank is no longer flagged
BAD = "[node]\nmin_ratio = 1.1\nwindw = 12\n"


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "detectors.toml"
    path.write_text(text)
    return path


def _one_line_error(capsys: pytest.CaptureFixture[str], command: str, path: Path) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"diag {command}: error: ") and str(path) in lines[0]
    return lines[0]


def test_triage_config_changes_the_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    Scenario(slow_ranks=(2,), onset_step=50, severity=0.2).write(run)
    assert main(["triage", str(run), "--json"]) == 0
    assert [f["id"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["node-rank2"]
    assert main(["triage", str(run), "--json", "--config", str(_toml(tmp_path, STRICT))]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
    assert (run / "findings.jsonl").read_text() == ""


def test_triage_with_a_bad_config_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    Scenario(steps=20).write(run)
    bad = _toml(tmp_path, BAD)
    res = run_cli("triage", str(run), "--config", str(bad))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"diag triage: error: {bad}: unknown key 'windw' in [node] (known: confident_gap, "
        "critical, min_excess_frac, min_excess_ms, min_frac, min_ratio, min_run, "
        "min_wait_explained, min_z, quick_alpha, quick_min_run, stall_min_loss, "
        "stall_min_share_z, stall_min_steps, stall_min_t, stopped_min, stopped_min_share, "
        "structural_share, warmup_steps, warning, window)"
    ]
    assert not (run / "findings.jsonl").exists()


@pytest.mark.parametrize("text", [None, "[node]\nwindow = 'ten'\n", "[node\n"])
def test_analyzer_refuses_a_bad_detector_config_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None
) -> None:
    path = tmp_path / "missing.toml" if text is None else _toml(tmp_path, text)
    run = tmp_path / "run"
    args = ["analyzer", "--run-dir", str(run), "--detector-config", str(path)]
    assert main(args) == 2
    _one_line_error(capsys, "analyzer", path)
    assert not run.exists()


def test_run_refuses_a_bad_detector_config_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad, out = _toml(tmp_path, BAD), tmp_path / "out"
    args = ["run", "--live", "off", "--out", str(out), "--detector-config", str(bad), "--", "true"]
    assert main(args) == 2
    assert "unknown key 'windw' in [node]" in _one_line_error(capsys, "run", bad)
    assert not out.exists()


def test_run_detector_config_is_for_the_embedded_analyzer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _toml(tmp_path, STRICT)
    args = ["run", "--live", "off", "--analyzer", "127.0.0.1:1", "--detector-config", str(path)]
    assert main([*args, "--", "true"]) == 2
    assert "with --analyzer give it to diag analyzer" in _one_line_error(capsys, "run", path)


def test_the_embedded_analyzer_triages_with_the_configs(tmp_path: Path) -> None:
    detectors = parse_detector_config({"node": {"min_ratio": 2.0}}, where="x")
    analyzer = runtime.EmbeddedAnalyzer.start(tmp_path / "run", detectors)
    try:
        assert analyzer._core.detectors == detectors  # used by the live and the final triage
    finally:
        analyzer.stop()
