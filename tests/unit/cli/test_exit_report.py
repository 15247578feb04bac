"""torchrun's failure report, as torch 2.13 prints it, becomes the launcher's RankExit events."""

from __future__ import annotations

import itertools
from pathlib import Path

from diag.cli.exit_report import WorkerFailure, parse_failures, rank_exits, read_failures

REPORT = """\
[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:6061
E1129 12:34:05.012000 32132 torch/distributed/elastic/multiprocessing/api.py:1002] failed
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
exp2.py FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-29_12:34:05
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 32138)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 32138
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_12:34:04
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 32137)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 32137
=======================================================
"""

ONLY_ROOT = """\
Failures:
  <NO_OTHER_FAILURES>
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_12:35:01
  host      : vm
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 811)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
=======================================================
"""


def test_every_failed_worker_with_its_signal_root_cause_first() -> None:
    assert parse_failures(REPORT) == [
        WorkerFailure(rank=0, local_rank=0, exit_code=-9, pid=32137, signal=9, first_failure=True),
        WorkerFailure(rank=1, local_rank=1, exit_code=-15, pid=32138, signal=15,
                      first_failure=False),
    ]  # fmt: skip


def test_a_lone_root_cause_and_a_plain_exit_code() -> None:
    assert parse_failures(ONLY_ROOT) == [
        WorkerFailure(rank=2, local_rank=0, exit_code=1, pid=811, signal=0, first_failure=True)
    ]


def test_no_report_no_failures() -> None:
    assert parse_failures("rank 0 step 3 loss 0.5\n") == []


def test_the_last_report_counts(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_bytes((REPORT + "restarting workers\n" + ONLY_ROOT).encode())
    assert [f.rank for f in read_failures(log)] == [2]
    assert read_failures(tmp_path / "missing.log") == []


def test_launcher_events_numbered_in_order() -> None:
    seq = itertools.count(3)
    exits = rank_exits(
        parse_failures(REPORT), host="vm", job_id="j", source="vm/launcher/9",
        next_seq=lambda: next(seq),
    )  # fmt: skip
    assert [(e.rank, e.seq, e.observer, e.exit_code, e.signal, e.first_failure) for e in exits] == [
        (0, 3, "launcher", -9, 9, True), (1, 4, "launcher", -15, 15, False),
    ]  # fmt: skip
