"""Bad input to the CLI: one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.cli import run_cli


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_report_on_something_that_is_not_a_run(tmp_path: Path, make: str) -> None:
    target = tmp_path / "x"
    if make == "empty":
        target.mkdir()
    elif make == "file":
        target.write_text("hello")
    res = run_cli("report", str(target))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert lines[0].startswith("diag report: error:") and str(target) in lines[0]


def test_run_without_a_command() -> None:
    res = run_cli("run", "--live", "off")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "diag run: error: nothing to run: give the job after --, e.g. diag run -- torchrun ... x.py"
    ]


def test_run_with_a_command_that_does_not_exist(tmp_path: Path) -> None:
    res = run_cli("run", "--out", str(tmp_path / "r"), "--live", "off", "--", "no-such-binary-x")
    assert res.returncode == 2
    assert "cannot start 'no-such-binary-x'" in res.stderr
    assert "Traceback" not in res.stderr


def test_an_unknown_flag_is_reported_by_the_commands_own_parser(tmp_path: Path) -> None:
    res = run_cli("triage", str(tmp_path), "--bogus")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert (
        lines[0].startswith("usage: diag triage ")
        and "unrecognized arguments: --bogus" in lines[-1]
    )
    assert lines[-1].startswith("diag triage: error:")


def test_version() -> None:
    from importlib.metadata import version

    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"diag {version('diag')}"
