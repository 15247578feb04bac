"""``diag profile`` without an analyzer to ask: one line and exit 2 (against a real analyzer
process: tests/integration/test_analyzer_process.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.cli import one_error_line, run_cli


def test_run_json_without_analyzer_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r1", "analyzer": None}))
    line = one_error_line(run_cli("profile", str(tmp_path)), "profile")
    assert line == (
        f"diag profile: error: {tmp_path / 'run.json'} names no analyzer (the run had none, or "
        "was not started by diag run); use --analyzer HOST:PORT"
    )
    line = one_error_line(run_cli("profile", str(tmp_path / "nope")), "profile")
    assert line.endswith(f"{tmp_path / 'nope'}: not a diag run directory (no store/: diag run, "
                         "diag attach and diag analyzer write one)")  # fmt: skip


def test_unreachable_analyzer_and_bad_flags_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"analyzer": "127.0.0.1:1"}))
    line = one_error_line(run_cli("profile", str(tmp_path)), "profile")
    assert line.endswith(
        f"{tmp_path}: the run's analyzer does not answer (nothing listens at 127.0.0.1:1): a "
        "profiler window needs a running job"
    )  # not a raw gRPC error
    (tmp_path / "run.json").write_text(json.dumps({"analyzer": "127.0.0.1:1", "exit_code": 0}))
    line = one_error_line(run_cli("profile", str(tmp_path)), "profile")
    assert f"{tmp_path}: the run has ended (nothing listens at 127.0.0.1:1)" in line
    line = one_error_line(run_cli("profile", "--analyzer", "127.0.0.1:1"), "profile")
    assert "analyzer 127.0.0.1:1: RequestProfile failed: UNAVAILABLE" in line
    line = one_error_line(run_cli("profile"), "profile")
    assert line.endswith("give either a run directory or --analyzer HOST:PORT")
    line = one_error_line(
        run_cli("profile", "--analyzer", "127.0.0.1:1", "--ranks", "a"), "profile"
    )
    assert "--ranks wants comma-separated rank numbers" in line
