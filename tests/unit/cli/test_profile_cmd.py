"""``diag profile`` against a real analyzer process, found through run.json or --analyzer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc as pb_grpc
from tests.fakes.paths import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _diag(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diag.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=ENV,
    )


@pytest.fixture(scope="module")
def analyzer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A run directory whose run.json names a running ``diag analyzer``."""
    tmp = tmp_path_factory.mktemp("profile")
    run_dir = tmp / "run"
    port_file = tmp / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag.cli.main", "analyzer", "--run-dir", str(run_dir),
         "--port-file", str(port_file)],
        cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("analyzer listening on"), line
        target = f"127.0.0.1:{int(port_file.read_text())}"
        (run_dir / "run.json").write_text(json.dumps({"run_id": "r1", "analyzer": target}))
        yield run_dir, target
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def _polled(target: str) -> list[pb.ProfileRequest]:
    with grpc.insecure_channel(target) as channel:
        reply = pb_grpc.AnalyzerStub(channel).PollControl(pb.ControlPoll(), timeout=5)
    return [m.profile for m in reply.messages]


def test_profile_through_run_json_and_through_analyzer(analyzer: tuple[Path, str]) -> None:
    run_dir, target = analyzer
    # No steps seen yet: the analyzer cannot choose a step, and says so in one line.
    line = _one_error_line(_diag("profile", str(run_dir)))
    assert "FAILED_PRECONDITION: the analyzer has seen no training step yet" in line
    assert _polled(target) == []
    res = _diag("profile", str(run_dir), "--at-step", "3")
    assert res.returncode == 0, res.stderr
    (first,) = _polled(target)
    assert res.stdout == f"profile request {first.request_id}: 1 step at step 3 on all ranks\n"

    res = _diag(
        "profile", "--analyzer", target, "--steps", "2", "--ranks", "2,0", "--at-step", "57"
    )
    assert res.returncode == 0, res.stderr
    second = _polled(target)[1]
    assert res.stdout == f"profile request {second.request_id}: 2 steps at step 57 on ranks 0, 2\n"

    res = _diag("profile", str(run_dir), "--ranks", "1", "--json", "--at-step", "3")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    third = _polled(target)[2]
    assert data == {
        "request_id": third.request_id,
        "seq": 3,
        "at_step": 3,
        "num_steps": 1,
        "ranks": [1],
        "requested_ns": third.requested_ns,
        "expires_ns": third.expires_ns,
    }


def _one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("diag profile: error: ")
    return lines[0]


def test_refused_request_is_one_line(analyzer: tuple[Path, str]) -> None:
    run_dir, _ = analyzer
    line = _one_error_line(_diag("profile", str(run_dir), "--steps", "0"))
    assert "INVALID_ARGUMENT: num_steps must be between 1 and 100, got 0" in line


def test_run_json_without_analyzer_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r1", "analyzer": None}))
    line = _one_error_line(_diag("profile", str(tmp_path)))
    assert line == (
        f"diag profile: error: {tmp_path / 'run.json'} names no analyzer (the run had none, or "
        "was not started by diag run); use --analyzer HOST:PORT"
    )
    line = _one_error_line(_diag("profile", str(tmp_path / "nope")))
    assert "run.json not found" in line


def test_unreachable_analyzer_and_bad_flags_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"analyzer": "127.0.0.1:1"}))
    line = _one_error_line(_diag("profile", str(tmp_path)))
    assert "analyzer 127.0.0.1:1: RequestProfile failed: UNAVAILABLE" in line
    line = _one_error_line(_diag("profile"))
    assert line.endswith("give either a run directory or --analyzer HOST:PORT")
    line = _one_error_line(_diag("profile", "--analyzer", "127.0.0.1:1", "--ranks", "a"))
    assert "--ranks wants comma-separated rank numbers" in line
