"""Profiler windows (and nothing else from the profiler) for synthetic runs: which steps were
profiled on which ranks, for the kernel-evidence rule of :mod:`diag.diagnose.coverage`."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source


def profile_windows(
    steps: list[int], ranks: range | list[int], *, host_of=lambda r: f"node{r // 2}"
) -> list[schema.Event]:
    """One one-step ``ProfileWindow`` per step in ``steps`` on every rank of ``ranks``."""
    out: list[schema.Event] = []
    for r in ranks:
        src = Source(host_of(r), r, pid=5000 + r)
        for step in steps:
            start = T0 + step * 200 * MS
            out.append(
                schema.ProfileWindow(
                    **src.env(start + 100 * MS, step),
                    window_id=f"p{step}",
                    trigger="periodic",
                    start_ns=start,
                    end_ns=start + 100 * MS,
                    duration_ns=100 * MS,
                )
            )
    return out


def write(run_dir: Path, events: list[schema.Event]) -> RunStore:
    """A store at ``run_dir`` holding ``events`` (flushed), reopened."""
    store = RunStore.create(run_dir)
    store.append(events)
    store.flush()
    return RunStore.open(run_dir)
