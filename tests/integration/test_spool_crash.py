"""The daemon's spool against real failures of its writer process: killed with SIGKILL in the
middle of a record (reopening keeps every intact batch not yet acknowledged), and a disk that
refuses appends for a while (a short write, then EFBIG: no torn record is left in front of later
batches, and appends succeed again once the disk takes them)."""

from __future__ import annotations

import errno
import json
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

ROOT = Path(__file__).resolve().parents[2]

CRASHER = textwrap.dedent(
    """
    import os, signal, sys
    from diag.daemon.spool import RECORDS, Spool
    spool = Spool(sys.argv[1], segment_bytes=1000)
    for i in range(30):
        spool.append(f"batch-{i:05d}-".encode().ljust(100, b"x"))
    for _ in range(10):
        spool.ack(spool.peek())
    # Killed in the middle of writing batch 30: a torn record at the end of the segment.
    spool._write_file.write(RECORDS.encode(b"torn".ljust(100, b"x"))[:40])
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_killed_mid_write_reopen_keeps_every_intact_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASHER, str(tmp_path)], cwd=ROOT, check=False)
    assert proc.returncode == -signal.SIGKILL
    with caplog.at_level(logging.ERROR, logger="diag.daemon.spool"):
        spool = Spool(tmp_path, segment_bytes=1000, fsync=False)
    assert spool.num_corrupt_segments == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert "is damaged: a torn record at the end" in line and "truncated record" in line
    (aside,) = tmp_path.glob("*.corrupt")
    assert aside.name.split(".")[0] in line
    assert drain(spool) == [payload(i) for i in range(10, 30)]


# The writer runs with its file size limited (RLIMIT_FSIZE, SIGXFSZ ignored): a write past the
# limit is cut short and the next one fails with EFBIG, as on a disk that fills up.
FAILING_DISK = textwrap.dedent(
    """
    import json, resource, signal, sys
    from pathlib import Path
    from diag.daemon.spool import Spool
    from tests.fakes.spools import drain, payload

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    spool = Spool(sys.argv[1], segment_bytes=100_000)
    ok, failed = [], []

    def append(i, limit):
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            spool.append(payload(i))
            ok.append(i)
        except OSError as exc:
            failed.append(exc.errno)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    for i in range(8):  # 8 whole records
        append(i, soft)
    segment = max(Path(sys.argv[1]).glob("seg-*.spool"))
    append(8, segment.stat().st_size + 50)  # a short write (50 bytes), then EFBIG
    append(9, 50)  # the next segment takes 50 bytes, then EFBIG
    append(10, 50)
    for i in range(11, 15):  # space is back
        append(i, soft)
    running = drain(spool)
    append(15, soft)
    append(16, soft)
    spool.close()
    print(json.dumps({
        "ok": ok, "failed": failed, "running": [p.decode() for p in running],
        "num_write_errors": spool.num_write_errors,
    }))
    """
)


def test_failed_appends_leave_no_torn_record_and_later_appends_succeed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FAILING_DISK, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    res = json.loads(out.stdout)
    assert res["failed"] == [errno.EFBIG] * 3 and res["num_write_errors"] == 3
    assert res["ok"] == [*range(8), *range(11, 17)]
    # The running daemon sends exactly the batches it took, in order.
    assert res["running"] == [payload(i).decode() for i in [*range(8), *range(11, 15)]]
    assert "an append failed (" in out.stderr and "takes batches again" in out.stderr
    with caplog.at_level(logging.WARNING, logger="diag.daemon.spool"):
        spool = Spool(tmp_path, fsync=False)
    assert not caplog.records and spool.num_corrupt_segments == 0
    assert not list(tmp_path.glob("*.corrupt"))
    assert drain(spool) == [payload(15), payload(16)]
