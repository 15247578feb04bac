"""Steps that stalled for the whole job are a fact of the run's summary, and a verdict without
findings says what they cost instead of "no problem found" alone (the pause of a lossy link:
six ~200 ms retransmission timeouts on every rank alike, which no comparison of ranks places)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.cli.render import tables
from diag.cli.runtime import verdict
from diag.store.run_store import RunStore
from diag.store.summary import STALL_WARMUP, summarize
from tests.fakes.events import Source


def _summary(tmp_path: Path, slow: dict[int, float], *, steps: int = 40) -> dict:
    """Four ranks' ``steps`` steps of 125 ms, each step in ``slow`` taking that many ms more on
    every rank (wait time: all ranks wait alike)."""
    store = RunStore.create(tmp_path)
    sources = [Source(host="n0", rank=r, pid=10 + r) for r in range(4)]
    store.append([s.step(i, wait_ms=20 + slow.get(i, 0.0)) for s in sources for i in range(steps)])
    store.flush()
    return json.loads(json.dumps(summarize(tmp_path).to_json(), allow_nan=False))


def test_stalls_of_the_whole_job_are_counted_and_told(tmp_path: Path) -> None:
    # a warm-up step (10x) is not a stall; six steps of 5.8x the median are
    slow = {0: 1125.0} | {i: 600.0 for i in range(20, 26)}
    run = _summary(tmp_path, slow)["run"]
    assert run["num_stall_steps"] == 6
    typical, stalled = 125.0, 725.0
    share = 6 * (stalled - typical) / ((40 - STALL_WARMUP - 6) * typical + 6 * stalled)
    assert run["stall_share"] == pytest.approx(share)
    summary = {"run": run, "ranks": [{"steps": 40}] * 4, "findings": []}
    line = verdict(summary)
    assert line.startswith("verdict: no problem found in 40 steps of 4 ranks; yet 6 steps took")
    assert f"({share:.0%} of its step time)" in line
    text = tables.verdict_line((), 40, 4, run).plain
    assert text == line


def test_a_run_without_stalls_or_with_cheap_ones_says_no_problem_alone(tmp_path: Path) -> None:
    run = _summary(tmp_path, {0: 1125.0})["run"]  # only the warm-up was slow
    assert (run["num_stall_steps"], run["stall_share"]) == (0, 0.0)
    assert tables.stall_note(run) == ""
    cheap = _summary(tmp_path / "cheap", {30: 600.0}, steps=200)["run"]  # 1 stall in 195 steps
    assert cheap["num_stall_steps"] == 1 and 0 < cheap["stall_share"] < tables.STALL_NOTE_SHARE
    assert tables.stall_note(cheap) == ""
    assert tables.verdict_line((), 200, 4, cheap).plain == (
        "verdict: no problem found in 200 steps of 4 ranks"
    )
    assert tables.stall_note({"num_stall_steps": "x"}) == ""  # an odd run section: said nothing
