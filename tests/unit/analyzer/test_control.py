"""The control board (injected clock, no sleeps), its feed from ingest, and the two RPCs on
127.0.0.1:0 through the generated stub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from diag.analyzer.control import ControlBoard
from diag.analyzer.core import AnalyzerCore
from diag.analyzer.service import serve
from diag.config import AnalyzerConfig
from diag.errors import ConfigError, NotReady
from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc as pb_grpc
from diag.store.run_store import RunStore
from tests.fakes.events import MS, Source, batch

S = 1_000_000_000


class Clock:
    def __init__(self, now_ns: int = 1_000 * S) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns


def test_lead_is_two_seconds_of_steps_but_at_least_three() -> None:
    board = ControlBoard(Clock())
    # Nothing seen yet: no step can be chosen (one could already be past on the ranks).
    with pytest.raises(NotReady, match="no training step yet"):
        board.request_profile()
    # 100 ms steps: 2.0 s ahead = 20 steps past the newest step of any rank.
    board.observe_steps([(0, 40, 100 * MS), (1, 41, 100 * MS), (1, 39, 100 * MS)])
    p = board.progress()
    assert (p.newest_step, p.num_ranks, p.median_step_ns, p.lead_steps) == (41, 2, 100 * MS, 20)
    first = board.request_profile()
    # a rank that gets it late moves on by whole leads (the hook: WindowPlan.realign_after)
    assert (first.at_step, first.realign_steps) == (61, 20)
    # Slow steps (the median, so one outlier does not matter): the minimum of 3 steps wins.
    board.observe_steps([(0, 42 + i, 5 * S) for i in range(70)] + [(0, 200, 10 * MS)])
    assert board.progress().lead_steps == 3
    assert (board.request_profile().at_step, board.request_profile().realign_steps) == (203, 3)
    # 300 ms median: ceil(2.0 / 0.3) = 7.
    board.observe_steps([(2, 300, 300 * MS)] * 64)
    assert board.request_profile().at_step == 307


def test_at_step_extrapolates_from_the_newest_step_end() -> None:
    clock = Clock()
    board = ControlBoard(clock)
    end = clock.now_ns
    board.observe_steps([(r, 40, 100 * MS, end) for r in range(2)])
    # Step events arrive late: 1.55 s after step 40 ended the job is at about step 55.
    clock.now_ns = end + 1550 * MS
    assert board.progress().estimated_step == 55
    assert board.request_profile().at_step == 55 + 20
    # A job silent for long is not assumed to run on: at most 10 s of extrapolation.
    clock.now_ns = end + 3600 * S
    assert board.progress().estimated_step == 40 + 100


def test_a_job_that_just_slowed_down_is_extrapolated_at_its_median_step() -> None:
    """When the closed loop asks, the job has just slowed down: 48 of the board's 64 recent
    durations are the old 17 ms steps, 16 (four steps) the new 118 ms ones. Extrapolated at the
    median of all of them the window was placed 290 steps (34 s) ahead of the job; a lagging
    estimate costs at most a lead (the late ranks move on by ``realign_steps``), a leading one
    all of it: the newest four steps' median."""
    clock = Clock()
    board = ControlBoard(clock)
    end = clock.now_ns
    seen = [(r, s, (17 if s < 12 else 118) * MS, end) for s in range(16) for r in range(4)]
    board.observe_steps(seen)
    clock.now_ns = end + 2400 * MS
    p = board.progress()
    assert (p.median_step_ns, p.estimated_step, p.lead_steps) == (118 * MS, 15 + 20, 17)


def test_explicit_step_ranks_seq_and_times() -> None:
    clock = Clock()
    board = ControlBoard(clock)
    board.observe_steps([(0, 10, 100 * MS)])
    a = board.request_profile(num_steps=3, ranks=(2, 0, 2), at_step=500, ttl_s=30)
    b = board.request_profile(at_step=20)
    assert (a.seq, b.seq) == (1, 2) and board.last_seq == 2
    assert len(a.request_id) == 8 and int(a.request_id, 16) >= 0 and a.request_id != b.request_id
    assert (a.at_step, a.num_steps, list(a.ranks)) == (500, 3, [0, 2])
    assert (a.requested_ns, a.expires_ns) == (clock.now_ns, clock.now_ns + 30 * S)
    assert list(b.ranks) == [] and b.num_steps == 1 and b.expires_ns == clock.now_ns + 120 * S


def test_poll_filters_by_seq_and_drops_expired() -> None:
    clock = Clock()
    board = ControlBoard(clock)
    assert board.poll(0) == []
    short = board.request_profile(ranks=[1], ttl_s=10, at_step=5)
    long = board.request_profile(ttl_s=60, at_step=5)
    msgs = board.poll(0)
    assert [m.WhichOneof("body") for m in msgs] == ["profile", "profile"]
    assert [m.profile for m in msgs] == [short, long]
    assert list(msgs[0].profile.ranks) == [1]
    assert [m.profile.seq for m in board.poll(1)] == [2]
    assert board.poll(2) == []
    clock.now_ns += 10 * S  # expires_ns is exclusive
    assert [m.profile.seq for m in board.poll(0)] == [2]
    clock.now_ns += 50 * S
    assert board.poll(0) == []


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"num_steps": 0}, "num_steps must be between 1 and 100, got 0"),
        ({"num_steps": 101}, "num_steps must be between 1 and 100, got 101"),
        ({"ranks": [0, -1]}, "ranks must be >= 0"),
        ({"ttl_s": 0}, "ttl_s"),
    ],
)
def test_bad_requests_are_refused_and_issue_nothing(kwargs: dict, fragment: str) -> None:
    board = ControlBoard(Clock())
    with pytest.raises(ConfigError, match=fragment):
        board.request_profile(**kwargs)
    assert board.last_seq == 0 and board.poll(0) == []


def test_sequence_and_requests_survive_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "control.json"
    first = ControlBoard(clock, state_path=path)
    assert not path.exists()  # written only when a request is made
    r1 = first.request_profile(at_step=50)
    r2 = first.request_profile(at_step=60)
    second = ControlBoard(clock, state_path=path)
    # A daemon that saw seq 1 from the first process still gets seq 2 and then the new seq 3.
    assert [m.profile for m in second.poll(1)] == [r2]
    r3 = second.request_profile(at_step=70)
    assert r3.seq == 3 and [m.profile.seq for m in second.poll(2)] == [3]
    assert [m.profile for m in second.poll(0)] == [r1, r2, r3]
    assert json.loads(path.read_text())["last_seq"] == 3


def test_unreadable_state_resumes_numbering_from_the_clock(tmp_path: Path) -> None:
    path = tmp_path / "control.json"
    path.write_text("{not json")
    clock = Clock(1_700_000_000 * S)
    board = ControlBoard(clock, state_path=path)
    assert board.request_profile(at_step=5).seq == 1_700_000_000_000 + 1


# -- fed by ingest ----------------------------------------------------------------------------


def test_ingest_feeds_the_board_and_a_restart_reseeds_it(tmp_path: Path) -> None:
    ranks = [Source(rank=r) for r in range(2)]
    clock = Clock(ranks[1].step(10).end_ns)  # now = the end of the newest step: no extrapolation
    core = AnalyzerCore(RunStore.create(tmp_path), clock)
    # Source.step lasts 125 ms: ceil(2.0 / 0.125) = 16 steps of lead.
    core.ingest(batch([s.step(i) for i in range(10) for s in ranks]))
    core.ingest(batch([ranks[1].step(10)]))
    assert core.control.progress().newest_step == 10
    req = core.request_profile(num_steps=2)
    assert (req.at_step, req.num_steps) == (26, 2)
    assert [m.profile for m in core.poll_control(0)] == [req]
    core.close()

    again = AnalyzerCore(RunStore.open(tmp_path), clock)
    try:
        p = again.control.progress()
        assert (p.newest_step, p.num_ranks, p.lead_steps) == (10, 2, 16)
        assert [m.profile for m in again.poll_control(0)] == [req]
        assert again.request_profile().seq == 2
    finally:
        again.close()


# -- the RPCs ---------------------------------------------------------------------------------


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[tuple[pb_grpc.AnalyzerStub, AnalyzerCore]]:
    server, port, core = serve(AnalyzerConfig(run_dir=str(tmp_path), flush_interval_s=0.05))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.AnalyzerStub(channel), core
    finally:
        channel.close()
        server.stop(None).wait()
        core.close()


def test_request_profile_then_poll_control(stub) -> None:
    analyzer, core = stub
    src = Source(rank=0)
    analyzer.Ingest(batch([src.step(i) for i in range(5)]), timeout=5)
    issued = analyzer.RequestProfile(pb.ProfileRequest(num_steps=2, ranks=[3, 1]), timeout=5)
    assert issued.seq == 1 and len(issued.request_id) == 8
    # The synthetic steps ended in 2023, so the estimate extrapolates the 10 s maximum (80 steps
    # of 125 ms) past step 4, plus a lead of 2 s (16 steps).
    assert (issued.num_steps, list(issued.ranks), issued.at_step) == (2, [1, 3], 4 + 80 + 16)
    assert issued.expires_ns - issued.requested_ns == 120 * S
    # Fields the analyzer owns are its own, whatever the caller sent.
    explicit = analyzer.RequestProfile(
        pb.ProfileRequest(num_steps=1, at_step=999, request_id="mine", seq=77), timeout=5
    )
    assert (explicit.seq, explicit.at_step) == (2, 999) and explicit.request_id != "mine"
    reply = analyzer.PollControl(pb.ControlPoll(host="n0", daemon="d", after_seq=0), timeout=5)
    assert [m.profile for m in reply.messages] == [issued, explicit]
    reply = analyzer.PollControl(pb.ControlPoll(after_seq=1), timeout=5)
    assert [m.profile.seq for m in reply.messages] == [2]
    # The in-process path shares the sequence.
    assert core.request_profile(at_step=9).seq == 3


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (pb.ProfileRequest(), "num_steps must be between 1 and 100, got 0"),
        (pb.ProfileRequest(num_steps=101), "num_steps must be between 1 and 100, got 101"),
        (pb.ProfileRequest(num_steps=1, ranks=[-2]), "ranks must be >= 0"),
    ],
)
def test_malformed_profile_requests_are_invalid_argument(stub, request_, fragment: str) -> None:
    analyzer, _ = stub
    with pytest.raises(grpc.RpcError) as info:
        analyzer.RequestProfile(request_, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in info.value.details() and "\n" not in info.value.details()
    assert not analyzer.PollControl(pb.ControlPoll(), timeout=5).messages
