"""A profiler window that stopped while a gloo worker still held one of its records (schema
1.16: torch's profiler race) is named in the report: that rank's memory may be corrupt."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from tests.fakes.events import T0, Source
from tests.fakes.summary import headline


def _window(src: Source, window_id: str, unsettled: int) -> schema.ProfileWindow:
    return schema.ProfileWindow(**src.env(T0, step=5), window_id=window_id, trigger="periodic",
                                start_ns=T0, end_ns=T0 + 10**7, duration_ns=10**7,
                                settle_ns=10**8 if unsettled else 2 * 10**5,
                                unsettled=unsettled)  # fmt: skip


def test_a_window_stopped_unsettled_is_named_with_its_rank(tmp_path: Path) -> None:
    r0, r1, r2 = (Source(host="n0", rank=r, pid=10 + r) for r in range(3))
    wins = [_window(r0, "p5", 0), _window(r1, "p5", 1), _window(r2, "p5", 0)]
    summary, text = headline(tmp_path, wins)
    assert summary["run"]["unsettled_ranks"] == [1]
    assert "a profiler window on rank 1 stopped while a gloo worker" in text


def test_settled_windows_say_nothing(tmp_path: Path) -> None:
    r0, r1 = (Source(host="n0", rank=r, pid=10 + r) for r in range(2))
    summary, text = headline(tmp_path, [_window(r0, "p5", 0), _window(r1, "p5", 0)])
    assert summary["run"]["unsettled_ranks"] == [] and "gloo worker" not in text
