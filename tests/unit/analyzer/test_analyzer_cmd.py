"""``diag analyzer``'s checks that need no process (the command as a process:
tests/integration/test_analyzer_process.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.transport.security import is_loopback


def test_loopback_detection() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("[::]") and not is_loopback("10.0.0.1")


def test_a_bind_beyond_loopback_without_a_token_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from diag.cli.main import main

    code = main(["analyzer", "--run-dir", str(tmp_path / "run"), "--bind", "0.0.0.0:0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "without a token" in err[0] and "--token-file" in err[0] and "Traceback" not in err[0]
