"""Did the job stop making progress? What a hang needs besides collectives in flight.

A Flight Recorder dump of a running job always holds collectives in flight (issued, not yet
completed), and a snapshot taken rank after rank shows some ranks a collective ahead of others.
So entries in flight, or a rank a collective behind, are a hang only with evidence that progress
stopped. Any one of these is that evidence (:func:`stop_evidence`), each an
:class:`~diag.findings.Evidence` of metric ``no_progress`` the hang finding carries:

- the job **failed**: the caller knows it (the remains of a failed run; a ``diag run`` whose job
  exited non-zero), or a worker's exit code or signal was logged (torchrun's report);
- its **watchdog** said so: a collective timed out (c10d's timeout line or its PG status line)
  or a ``monitoredBarrier`` named ranks that never arrived;
- its **steps stopped** (:func:`steps_stopped`, from a run store): every rank's last step ended
  long before the recording did (the daemon still sampling the host, the hooks still reporting),
  by at least ``max(min_s, factor x p99 step)`` (30 s, 3: the hook watchdog's own rule).

Without any, the dumps' entries in flight are what a running job shows (``diag attach`` detached
from a healthy job, dumps taken on demand): no hang is reported, and the missing-evidence line
:func:`in_flight_line` says why.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from diag.findings import Evidence
from diag.postmortem.groups import fmt_ranks
from diag.postmortem.records import Remains

NO_PROGRESS = "no_progress"
#: clue kinds in which the job's own watchdog says a collective never finished.
WATCHDOG_CLUES = ("timeout", "pg_status", "barrier")


def stop_evidence(
    remains: Remains, *, failed: bool, stopped: Sequence[Evidence] = ()
) -> tuple[Evidence, ...]:
    """What says the job stopped (module docstring): empty when nothing does."""
    out = list(stopped)
    if failed:
        out.append(
            Evidence(
                metric=NO_PROGRESS,
                subject="job",
                value=1.0,
                note="the job failed (what it left is a failed run's remains, or its exit code "
                "was not 0)",
            )
        )
    watchdog = [c for c in remains.clues if c.kind in WATCHDOG_CLUES]
    if watchdog:
        first = watchdog[0]
        who = f"rank {first.rank}" if first.rank is not None else "job"
        out.append(
            Evidence(
                metric=NO_PROGRESS,
                subject=who,
                value=float(len(watchdog)),
                unit="lines",
                note=f"the watchdog timed out a collective ({first.where()}: {first.text[:120]})",
            )
        )
    exits = [c for c in remains.clues if c.kind == "exit" and (c.exitcode or 0) != 0]
    if exits and not failed:
        first = exits[0]
        out.append(
            Evidence(
                metric=NO_PROGRESS,
                subject=f"rank {first.rank}" if first.rank is not None else "job",
                value=float(first.exitcode or 0),
                unit="exit code",
                note=f"a worker exited with {first.exitcode} ({first.where()})",
            )
        )
    return tuple(out)


def steps_stopped(
    steps: pd.DataFrame, end_ns: int | None, *, factor: float = 3.0, min_s: float = 30.0
) -> Evidence | None:
    """Evidence that every rank's steps stopped long before ``end_ns`` (the recording's last
    sign of life), from a ``step`` frame (``rank``, ``end_ns``, ``duration_ns``); ``None`` when
    some rank was still stepping, or nothing tells."""
    if end_ns is None or steps.empty or not {"rank", "end_ns", "duration_ns"} <= set(steps):
        return None
    s = steps[steps["rank"] >= 0]
    if s.empty:
        return None
    last = int(s.groupby("rank")["end_ns"].max().max())  # the last rank to step
    p99_s = float(s["duration_ns"].astype(float).quantile(0.99)) / 1e9
    need_s = max(min_s, factor * p99_s)
    quiet_s = (end_ns - last) / 1e9
    if quiet_s < need_s:
        return None
    return Evidence(
        metric=NO_PROGRESS,
        subject="job",
        value=quiet_s,
        reference=need_s,
        unit="s",
        note=f"no rank finished a step in the recording's last {quiet_s:.0f} s (a hang: at "
        f"least {need_s:.0f} s, {factor:g}x the p99 step or {min_s:g} s)",
    )


def in_flight_line(ranks: Sequence[int]) -> str:
    """The missing-evidence line for dumps whose entries in flight are not a hang."""
    return (
        f"Flight Recorder entries in flight on {fmt_ranks(ranks)}, as in any running job; "
        "nothing says progress stopped (no watchdog timeout, no failed exit, no steps that "
        "stopped): not reported as a hang"
    )
