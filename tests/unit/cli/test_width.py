"""Tables that fit: on an 80-column terminal, piped with ``COLUMNS``, and piped without it (120
columns); headers and numbers are never cut to "comp…", columns are left out and said so."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from diag.cli.render.console import PIPED_WIDTH, width_for
from diag.cli.runtime import _job_line
from tests.fakes.cli import run_cli
from tests.fakes.scenarios import Scenario


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_width_rule() -> None:
    assert width_for(_Tty(), {"COLUMNS": "50"}) is None  # a terminal: rich asks it
    assert width_for(io.StringIO(), {}) == PIPED_WIDTH
    assert width_for(io.StringIO(), {"COLUMNS": "80"}) == 80
    assert width_for(io.StringIO(), {"COLUMNS": "7"}) == 40  # never narrower than that
    assert width_for(io.StringIO(), {"COLUMNS": "wide"}) == PIPED_WIDTH


@pytest.mark.parametrize("command", ["triage", "report"])
def test_piped_at_80_columns_every_line_fits_and_nothing_is_cut(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Scenario(slow_ranks=(2,), onset_step=50, severity=0.2, ckpt_every=40, ckpt_ms=800).write(
        tmp_path
    )
    monkeypatch.setenv("COLUMNS", "80")
    res = run_cli(command, str(tmp_path))
    assert res.returncode == 0, res.stderr
    table = [line for line in res.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 80, res.stdout
    assert "…" not in res.stdout, res.stdout
    monkeypatch.setenv("COLUMNS", "60")
    narrow = run_cli(command, str(tmp_path))
    table = [line for line in narrow.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(len(line) for line in table) <= 60 and "…" not in narrow.stdout, narrow.stdout
    assert "left out to fit 60 columns: " in narrow.stdout  # and says which
    monkeypatch.delenv("COLUMNS")
    wide = run_cli(command, str(tmp_path))
    assert max(len(line) for line in wide.stdout.splitlines()) > 80  # piped: 120 columns
    assert "left out to fit" not in wide.stdout


def test_job_lines_under_a_live_view_into_a_pipe_are_the_jobs_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    piped = Console(file=io.StringIO(), width=80)
    long = "rank 0 step 10 loss 0.25 " + "x" * 120
    _job_line(piped, long, False)
    _job_line(piped, "Traceback (most recent call last):", True)
    out, err = capsys.readouterr()
    assert out == long + "\n"  # never wrapped at the console's 80 columns
    assert err == "Traceback (most recent call last):\n"  # stderr stays stderr
