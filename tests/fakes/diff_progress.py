"""Collectives for the synthetic runs of :mod:`tests.fakes.diff_runs`: a job's progress as its
collectives show it, including a job that ran on after the hook stopped counting its steps."""

from __future__ import annotations

from collections.abc import Iterable

from diag import schema
from tests.fakes.diff_runs import MS, T0, RunBuilder


def collectives(
    run: RunBuilder,
    steps: Iterable[int],
    *,
    per_step: int = 2,
    recorded_until: int | None = None,
    ranks: Iterable[int] | None = None,
) -> RunBuilder:
    """``per_step`` all-reduces per rank during each of ``steps`` (at the step times
    :meth:`RunBuilder.steps` uses). With ``recorded_until``, those of later steps carry step
    ``recorded_until + 1``: the step a hook that stopped counting still thinks is in progress."""
    for step in steps:
        label = step if recorded_until is None else min(step, recorded_until + 1)
        for rank in run.ranks if ranks is None else ranks:
            for i in range(per_step):
                ts = T0 + step * 200 * MS + (20 + 30 * i) * MS
                run.events.append(
                    schema.CollectiveEvent(
                        **run._env(rank, label, ts),  # type: ignore[arg-type]
                        op="all_reduce",
                        pg_name="0",
                        pg_size=len(run.ranks),
                        seq_id=step * per_step + i + 1,
                        num_bytes=4096,
                        dtype="Float",
                        enqueue_ns=ts,
                        start_ns=ts,
                        end_ns=ts + 5 * MS,
                        duration_ns=5 * MS,
                        state="completed",
                    )
                )
    return run
