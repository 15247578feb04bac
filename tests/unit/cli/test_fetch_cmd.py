"""``diag fetch``: a request through a real analyzer service (127.0.0.1:0) lands on its control
board for the daemons; bad steps, ranks and an absent analyzer are one line and exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.cli import one_error_line, run_cli
from tests.fakes.daemon_doubles import ServedAnalyzer


@pytest.fixture
def analyzer(tmp_path: Path) -> Iterator[ServedAnalyzer]:
    a = ServedAnalyzer(tmp_path / "run")
    yield a
    a.stop()


def test_a_fetch_is_issued_on_the_board(tmp_path: Path, analyzer: ServedAnalyzer) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"analyzer": analyzer.target}))
    res = run_cli("fetch", str(tmp_path), "--step-range", "100:121", "--ranks", "5,0")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("steps 100-120 of ranks 0, 5 on every node")
    res = run_cli(
        "fetch", "--analyzer", analyzer.target, "--step-range", "7", "--host", "n3", "--json"
    )
    issued = json.loads(res.stdout)
    assert (issued["first_step"], issued["last_step"], issued["host"]) == (7, 7, "n3")
    msgs = analyzer.core.control.poll(after_seq=0)
    assert [(m.fetch.first_step, m.fetch.last_step, list(m.fetch.ranks)) for m in msgs] == [
        (100, 120, [0, 5]),
        (7, 7, []),
    ]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--step-range", "9:9"], "--step-range wants 0 <= A < B, got '9:9'"),
        (["--step-range", "a:b"], "--step-range wants A:B (two step numbers)"),
        (["--step-range", "1:2", "--ranks", "x"], "--ranks wants comma-separated rank numbers"),
        (["--step-range", "1:2"], "RequestFetch failed: UNAVAILABLE"),
    ],
)
def test_bad_input_is_one_line(args: list[str], fragment: str) -> None:
    line = one_error_line(run_cli("fetch", "--analyzer", "127.0.0.1:1", *args), "fetch")
    assert fragment in line


def test_a_run_without_its_analyzer_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"analyzer": "127.0.0.1:1"}))
    line = one_error_line(run_cli("fetch", str(tmp_path), "--step-range", "1:2"), "fetch")
    assert line.endswith("a fetch needs the job's daemons running")
