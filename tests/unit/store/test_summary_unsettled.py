"""A profiler window that stopped while a gloo worker still held one of its records (schema
1.16: torch's profiler race) is named in the report: that rank's memory may be corrupt."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from diag import schema
from diag.cli.render import tables as render
from diag.store.run_store import RunStore
from diag.store.summary import summarize
from tests.fakes.events import T0, Source


def _window(src: Source, window_id: str, unsettled: int) -> schema.ProfileWindow:
    return schema.ProfileWindow(**src.env(T0, step=5), window_id=window_id, trigger="periodic",
                                start_ns=T0, end_ns=T0 + 10**7, duration_ns=10**7,
                                settle_ns=10**8 if unsettled else 2 * 10**5,
                                unsettled=unsettled)  # fmt: skip


def _report(tmp_path: Path, windows: list[schema.ProfileWindow]) -> tuple[dict, str]:
    store = RunStore.create(tmp_path)
    store.append([Source(host="n0", rank=r, pid=10 + r).step(0) for r in range(3)] + windows)
    store.flush()
    summary = json.loads(json.dumps(summarize(tmp_path).to_json(), allow_nan=False))
    buf = io.StringIO()
    Console(width=300, file=buf, color_system=None).print(render.headline(summary))
    return summary, buf.getvalue()


def test_a_window_stopped_unsettled_is_named_with_its_rank(tmp_path: Path) -> None:
    r0, r1, r2 = (Source(host="n0", rank=r, pid=10 + r) for r in range(3))
    wins = [_window(r0, "p5", 0), _window(r1, "p5", 1), _window(r2, "p5", 0)]
    summary, text = _report(tmp_path, wins)
    assert summary["run"]["unsettled_ranks"] == [1]
    assert "a profiler window on rank 1 stopped while a gloo worker" in text


def test_settled_windows_say_nothing(tmp_path: Path) -> None:
    r0, r1 = (Source(host="n0", rank=r, pid=10 + r) for r in range(2))
    summary, text = _report(tmp_path, [_window(r0, "p5", 0), _window(r1, "p5", 0)])
    assert summary["run"]["unsettled_ranks"] == [] and "gloo worker" not in text
