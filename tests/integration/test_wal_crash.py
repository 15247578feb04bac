"""The ingest WAL's writer on a disk that refuses appends for a while (a real process with its file
size limited: a short write, then EFBIG): each failed append is cut off again, nothing torn is left
in front of later frames, and appends succeed once the disk takes them."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from diag.analyzer.wal import read_wal, wal_paths
from tests.fakes.spools import payload

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# RLIMIT_FSIZE with SIGXFSZ ignored: a write past the limit is cut short and the next one fails
# with EFBIG, as on a disk that fills up.
FAILING_DISK = textwrap.dedent(
    """
    import json, resource, signal, sys
    from pathlib import Path
    from diag.analyzer.wal import WalWriter
    from tests.fakes.spools import payload

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    writer = WalWriter(Path(sys.argv[1]))
    ok, failed = [], []

    def append(i, limit):
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            writer.append(payload(i))
            ok.append(i)
        except OSError as exc:
            failed.append(exc.errno)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    for i in range(8):  # 8 whole frames
        append(i, soft)
    append(8, writer.current.stat().st_size + 50)  # a short write (50 bytes), then EFBIG
    append(9, 50)  # the next file takes 50 bytes, then EFBIG
    append(10, 50)
    for i in range(11, 15):  # space is back
        append(i, soft)
    writer.close()
    print(json.dumps({"ok": ok, "failed": failed}))
    """
)


def test_failed_appends_are_cut_off_and_later_appends_succeed(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", FAILING_DISK, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    res = json.loads(out.stdout)
    assert res["failed"] == [errno.EFBIG] * 3
    assert res["ok"] == [*range(8), *range(11, 15)]
    contents = [read_wal(p) for p in wal_paths(tmp_path)]
    assert [c.num_trailing_bytes for c in contents] == [0, 0]  # a file cut back, and the next
    assert [p for c in contents for p in c.payloads] == [payload(i) for i in res["ok"]]
