"""The daemon's spool survives its writer killed with SIGKILL in the middle of a record: a real
process appends, acknowledges and dies; reopening keeps every intact batch not yet acknowledged."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from diag.daemon.spool import Spool
from tests.fakes.spools import drain, payload

pytestmark = pytest.mark.integration

CRASHER = textwrap.dedent(
    """
    import os, signal, sys
    from diag.daemon.spool import Spool
    spool = Spool(sys.argv[1], segment_bytes=1000)
    for i in range(30):
        spool.append(f"batch-{i:05d}-".encode().ljust(100, b"x"))
    for _ in range(10):
        spool.ack(spool.peek())
    # Killed in the middle of writing batch 30: a torn record at the end of the segment.
    spool._write_file.write(b"\\x00\\x00\\x00\\x64\\x12\\x34\\x56\\x78" + b"torn")
    spool._write_file.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_killed_mid_write_reopen_keeps_every_intact_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASHER, str(tmp_path)], check=False)
    assert proc.returncode == -signal.SIGKILL
    with caplog.at_level(logging.ERROR, logger="diag.daemon.spool"):
        spool = Spool(tmp_path, segment_bytes=1000, fsync=False)
    assert spool.num_corrupt_segments == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "is damaged at offset" in line and "truncated record" in line
    (aside,) = tmp_path.glob("*.corrupt")
    assert aside.name.split(".")[0] in line
    assert drain(spool) == [payload(i) for i in range(10, 30)]
