"""What the hooks lost, and why, reaches ``diag report`` (and triage's run section): the drops by
reason from each hook's latest health, and the ranks whose hook went silent and stayed silent."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from diag import schema
from diag.cli.render import tables as render
from diag.store.run_store import RunStore
from diag.store.summary import summarize
from tests.fakes.events import MS, T0, Source


def _health(src: Source, ts_ns: int, **counts: Any) -> schema.HookHealth:
    return schema.HookHealth(**src.env(ts_ns), pid=10, health_interval_ns=5000 * MS, **counts)


def _silent(daemon: Source, hook: Source, last_seq: int) -> schema.HookSilent:
    return schema.HookSilent(
        **daemon.env(T0 + 50 * MS) | {"rank": hook.rank}, pid=10, hook_source=hook.name,
        silent_ns=30_000 * MS, health_interval_ns=5000 * MS, last_health_seq=last_seq,
    )  # fmt: skip


def _store(tmp_path: Path) -> RunStore:
    store = RunStore.create(tmp_path)
    daemon = Source(host="n0", pid=2)
    r0, r1, r2 = (Source(host="n0", rank=r, pid=10 + r) for r in range(3))
    store.append([r.step(0) for r in (r0, r1, r2)])
    store.append([
        _health(r0, T0 + MS, num_dropped=2, num_undelivered=2),
        _health(r0, T0 + 2 * MS, num_dropped=7, num_undelivered=3, num_unencodable=1,
                num_oversize=1, num_queue_dropped=2, num_gil_pauses=5, gil_paused_ns=15 * MS),
        _health(r1, T0 + MS, num_dropped=4, num_fr_dropped=4, num_gil_pauses=2,
                gil_paused_ns=3 * MS),
        _health(r2, T0 + MS),
    ])  # fmt: skip
    # rank 1's hook went silent for good; rank 2's went silent, then reported again
    store.append([_silent(daemon, r1, last_seq=1), _silent(daemon, r2, last_seq=1)])
    store.append([_health(r2, T0 + 60 * MS)])
    return store


def test_drops_by_reason_and_the_ranks_whose_hook_went_silent(tmp_path: Path) -> None:
    run = summarize(_store(tmp_path)).run
    assert run.num_dropped == 7 + 4
    assert (run.num_undelivered, run.num_unencodable, run.num_oversize) == (3, 1, 1)
    assert (run.num_queue_dropped, run.num_fr_dropped) == (2, 4)
    assert run.silent_ranks == (1,)
    # the hooks' pacing, from each hook's latest health the same way
    assert (run.num_hook_pauses, run.hook_paused_ns) == (5 + 2, 18 * MS)


def test_the_report_says_what_was_dropped_why_and_which_hook_went_silent(tmp_path: Path) -> None:
    _store(tmp_path).flush()
    summary = json.loads(json.dumps(summarize(tmp_path).to_json(), allow_nan=False))
    buf = io.StringIO()
    Console(width=200, file=buf, color_system=None).print(render.headline(summary))
    out = buf.getvalue()
    assert (
        "hook dropped 11 events: 3 daemon unreachable, 2 queue full, "
        "4 Flight Recorder overwritten, 1 unencodable, 1 oversize"
    ) in out
    assert "the hook of rank 1 went silent (its thread died or is stuck)" in out


def test_a_run_without_drops_or_silences_says_nothing_about_them(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path)
    src = Source(host="n0", rank=0, pid=10)
    store.append([src.step(0), _health(src, T0 + MS)])
    summary = summarize(store).to_json()
    assert summary["run"]["num_dropped"] == 0 and summary["run"]["silent_ranks"] == []
    buf = io.StringIO()
    Console(width=200, file=buf, color_system=None).print(render.headline(summary))
    assert "hook" not in buf.getvalue()
