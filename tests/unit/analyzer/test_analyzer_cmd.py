"""``diag analyzer``'s checks that need no process (the command as a process:
tests/integration/test_analyzer_process.py)."""

from __future__ import annotations

from diag.cli.analyzer_cmd import is_loopback


def test_loopback_detection() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("[::]") and not is_loopback("10.0.0.1")
