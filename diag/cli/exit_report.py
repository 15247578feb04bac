"""torchrun's failure report -> :class:`~diag.schema.RankExit` events from the launcher.

When workers fail, torchrun prints (on stderr, which ``diag run`` keeps in ``logs/job.log``)::

    Failures:
    [1]:
      time      : 2026-11-29_12:34:05
      host      : localhost
      rank      : 1 (local_rank: 1)
      exitcode  : -15 (pid: 32138)  (SIGTERM)
      error_file: <N/A>
      traceback : Signal 15 (SIGTERM) received by PID 32138
    ----------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      ...
      exitcode  : -6 (pid: 32137)  (SIGABRT)

Each block becomes one :class:`WorkerFailure`: a negative exit code is the signal that ended the
worker (``signal`` = its number); ``first_failure`` marks the "Root Cause" block. Only the last
report in the text counts (an elastic job that restarted prints one per failed attempt). This is
the only place the daemon-less exit status of a rank comes from: ranks are torchrun's children.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from diag.postmortem.torchrun import SummaryReader
from diag.schema import RankExit

TAIL_BYTES = 256 * 1024  # the report is at the end of the job's output


@dataclass(frozen=True, slots=True)
class WorkerFailure:
    """One failed worker as torchrun reported it."""

    rank: int
    local_rank: int
    exit_code: int
    pid: int
    signal: int
    first_failure: bool


def parse_failures(text: str) -> list[WorkerFailure]:
    """The failed workers of the last torchrun failure report in ``text`` ([] if none), read by
    the remains triage's :class:`~diag.postmortem.torchrun.SummaryReader` (one parser of it)."""
    start = text.rfind("Failures:")
    root = text.rfind("Root Cause (first observed failure):")
    if start < 0 and root < 0:
        return []
    section = text[min(i for i in (start, root) if i >= 0) :]
    reader = SummaryReader(source="job.log")
    for no, line in enumerate(section.splitlines(), 1):
        reader.feed(line, no)
    out = [
        WorkerFailure(
            rank=c.rank,
            local_rank=c.rank if c.local_rank is None else c.local_rank,
            exit_code=c.exitcode,
            pid=c.pid or 0,
            signal=-c.exitcode if c.exitcode < 0 else 0,
            first_failure=c.root,
        )
        for c in reader.close()
        if c.kind == "exit" and c.rank is not None and c.exitcode is not None
    ]
    # A root cause is also listed among the failures in some torch versions: keep one of each.
    seen: dict[tuple[int, int], WorkerFailure] = {}
    for f in out:
        key = (f.rank, f.pid)
        if key not in seen or f.first_failure:
            seen[key] = f
    return sorted(seen.values(), key=lambda f: (not f.first_failure, f.rank))


def read_failures(job_log: Path) -> list[WorkerFailure]:
    """:func:`parse_failures` of the end of ``job_log`` ([] if it cannot be read)."""
    try:
        with open(job_log, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(fh.tell() - TAIL_BYTES, 0))
            return parse_failures(fh.read().decode(errors="replace"))
    except OSError:
        return []


def rank_exits(
    failures: list[WorkerFailure],
    *,
    host: str,
    job_id: str,
    source: str,
    next_seq: Callable[[], int],
) -> list[RankExit]:
    """One launcher :class:`RankExit` per failure, numbered by ``next_seq``."""
    now = time.time_ns()
    return [
        RankExit(
            ts_ns=now, host=host, rank=f.rank, local_rank=f.local_rank, job_id=job_id,
            source=source, seq=next_seq(), pid=f.pid, observer="launcher",
            exit_code=f.exit_code, signal=f.signal, first_failure=f.first_failure,
        )
        for f in failures
    ]  # fmt: skip
