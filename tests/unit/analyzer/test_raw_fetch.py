"""Fetching the raw collectives a finding was judged without (diag.analyzer.fetch) and the control
board's fetch requests: numbered with the others, kept across a restart, refused when bad."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from diag.analyzer.autocapture import AutoCaptureConfig
from diag.analyzer.control import ControlBoard
from diag.analyzer.core import AnalyzerCore
from diag.analyzer.fetch import FROM_SUMMARIES, FetchConfig, RawFetch, from_summaries
from diag.diagnose.triage import TriageResult
from diag.errors import ConfigError
from diag.findings import Evidence, Finding, LinkRef
from diag.proto import diag_pb2 as pb
from diag.store.run_store import RunStore


def link_finding(
    *, summaries: bool = True, onset: int | None = 40, severity: str = "warning"
) -> Finding:
    evidence = [Evidence(metric="slowdown", subject="pg 1", value=1.5)]
    if summaries:
        evidence.append(Evidence(metric=FROM_SUMMARIES, subject="pg 1", value=1.0))
    return Finding(
        id="link-1",
        symptom="slowdown",
        cause="link",
        severity=severity,
        link=LinkRef(ranks=(4, 5, 6, 7), hosts=("a", "b"), group="1"),
        onset_step=onset,
        detected_step=None if onset is None else onset + 6,
        confidence=0.8,
        summary="slow link",
        evidence=tuple(evidence),
    )


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[int, int, tuple[int, ...]]] = []
        self.fail = fail

    def __call__(self, first: int, last: int, ranks: Sequence[int]) -> pb.CollectiveFetch:
        if self.fail:
            raise OSError("analyzer closing")
        self.calls.append((first, last, tuple(ranks)))
        return pb.CollectiveFetch(first_step=first, last_step=last, ranks=list(ranks))


def test_a_finding_from_summaries_fetches_its_group_over_onset_and_detection_once() -> None:
    rec = Recorder()
    loop = RawFetch(rec, FetchConfig(before=8, after=4))
    assert from_summaries(link_finding()) and not from_summaries(link_finding(summaries=False))
    assert len(loop.step([link_finding()])) == 1
    assert rec.calls == [(32, 50, (4, 5, 6, 7))]
    assert loop.step([link_finding()]) == []  # asked already
    loop.step([link_finding(onset=45)])  # a later onset reaches new steps: asked again
    assert rec.calls[-1] == (37, 55, (4, 5, 6, 7))


def test_nothing_is_fetched_without_summaries_an_onset_or_for_info() -> None:
    rec = Recorder()
    loop = RawFetch(rec)
    loop.step(
        [link_finding(summaries=False), link_finding(onset=None), link_finding(severity="info")]
    )
    assert rec.calls == []


def test_a_window_is_bounded_and_a_failed_request_is_asked_again() -> None:
    f = link_finding(onset=3)
    f = Finding(**{**{k: getattr(f, k) for k in f.__dataclass_fields__}, "detected_step": 500})
    failing = RawFetch(Recorder(fail=True), FetchConfig(max_steps=10))
    assert failing.step([f]) == []
    assert failing.wants([f])  # nothing was marked asked
    rec = Recorder()
    RawFetch(rec, FetchConfig(max_steps=10)).step([f])
    assert rec.calls == [(0, 9, (4, 5, 6, 7))]


def test_fetch_requests_are_numbered_polled_and_kept_across_a_restart(tmp_path: Path) -> None:
    now = [1_000_000_000_000]
    state = tmp_path / "control.json"
    board = ControlBoard(lambda: now[0], state_path=state)
    profile = board.request_profile(at_step=5)
    fetch = board.request_fetch(10, 20, ranks=[3, 1, 3])
    assert (profile.seq, fetch.seq) == (1, 2)
    assert list(fetch.ranks) == [1, 3] and fetch.host == "*"
    msgs = board.poll(after_seq=1)
    assert [m.WhichOneof("body") for m in msgs] == ["fetch"] and msgs[0].fetch == fetch
    again = ControlBoard(lambda: now[0], state_path=state)
    assert again.poll(after_seq=0)[1].fetch == fetch
    assert again.request_fetch(0, 0).seq == 3
    now[0] += 121 * 10**9  # expired: no longer handed out
    assert again.poll(after_seq=0) == []


@pytest.mark.parametrize(("first", "last", "host"), [(-1, 5, "*"), (6, 5, "*"), (0, 5, "")])
def test_bad_fetch_requests_are_refused(first: int, last: int, host: str) -> None:
    board = ControlBoard(lambda: 1)
    with pytest.raises(ConfigError):
        board.request_fetch(first, last, host=host)
    assert board.last_seq == 0


def test_the_analyzer_asks_after_a_live_pass_and_counts_it(tmp_path: Path) -> None:
    core = AnalyzerCore(RunStore.create(tmp_path / "run"), auto_capture=AutoCaptureConfig())
    try:
        result = TriageResult(run={}, findings=(link_finding(),))
        core.capture(result)
        core.capture(result)  # asked once
        msgs = core.control.poll(after_seq=0)
        assert [(m.fetch.first_step, m.fetch.last_step) for m in msgs] == [(32, 50)]
        assert core.counters()["fetches"] == 1
    finally:
        core.close()
    off = AnalyzerCore(
        RunStore.create(tmp_path / "off"), auto_capture=AutoCaptureConfig(mode="observe")
    )
    try:
        off.capture(TriageResult(run={}, findings=(link_finding(),)))
        assert off.control.poll(after_seq=0) == [] and off.counters()["fetches"] == 0
    finally:
        off.close()
