"""Runs as a node daemon ships them at fleet scale (schema 1.17): each rank's completed
collectives of its steps from ``raw_steps`` on replaced by :func:`diag.daemon.collsum.summarize`
output, stamped with the host's daemon source as the daemon relays them; optionally the raw rows
too (as after the analyzer fetched them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from diag import schema
from diag.daemon.collsum import relayed, summarize, summed_here
from diag.store.run_store import RunStore


def daemon_view(
    events: Sequence[schema.Event],
    *,
    raw_steps: int = 10,
    keep_raw: Callable[[schema.CollectiveEvent], bool] | None = None,
    split: bool = False,
) -> list[schema.Event]:
    """``events`` with the completed collectives of steps >= ``raw_steps`` summed per (rank,
    step, group); those for which ``keep_raw`` says so also stay raw (fetched). ``split``: each
    row summed alone (a rank's step summed over several batches, as when its rows wait past
    ``max_pending_s``)."""
    out: list[schema.Event] = []
    held: list[schema.CollectiveEvent] = []
    for e in events:
        if summed_here(e, raw_steps):
            assert isinstance(e, schema.CollectiveEvent)
            held.append(e)
            if keep_raw is not None and keep_raw(e):
                out.append(e)
        else:
            out.append(e)
    summaries = [x for e in held for x in summarize([e])] if split else summarize(held)
    return out + relayed(summaries)


def stored_events(store: RunStore) -> list[schema.Event]:
    """Every event of ``store``, rebuilt from its frames (kind by kind)."""
    out: list[schema.Event] = []
    for kind in store.kinds():
        cls = schema.EVENT_TYPES[kind]
        for row in store.frame(kind).to_dict("records"):
            out.append(cls(**{k: _plain(v) for k, v in row.items()}))
    return out


def resummarized(
    src: RunStore,
    dest: Path,
    *,
    raw_steps: int = 10,
    keep_raw: Callable[[schema.CollectiveEvent], bool] | None = None,
    split: bool = False,
) -> RunStore:
    """A new store at ``dest`` holding :func:`daemon_view` of ``src``'s events."""
    store = RunStore.create(dest)
    store.append(
        daemon_view(stored_events(src), raw_steps=raw_steps, keep_raw=keep_raw, split=split)
    )
    store.flush()
    return RunStore.open(dest)


def _plain(v: object) -> object:
    if v is pd.NA:
        return None
    return v.item() if hasattr(v, "item") else v
