"""The closed loop's decisions: what it requests, for whom, how often, and what it records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from diag.analyzer.autocapture import AutoCapture, AutoCaptureConfig, _peers
from diag.diagnose.capture_evidence import AUTO_CAPTURE, annotate
from diag.diagnose.coverage import KERNEL_EVIDENCE
from diag.diagnose.detectors.link_probe import PROBE_LOCALIZATION
from diag.errors import ConfigError, TransportError
from diag.findings import Evidence, Finding, LinkRef
from diag.proto import diag_pb2 as pb
from diag.store import captures

S = 1_000_000_000


def _node(ranks: tuple[int, ...] = (2,), windows: float = 0.0, onset: int = 40) -> Finding:
    return Finding(
        id=f"node-rank{ranks[0]}", symptom="slowdown", cause="node", severity="warning",
        ranks=ranks, onset_step=onset, detected_step=onset + 3, slowdown=0.3, confidence=0.6,
        summary=f"rank {ranks[0]} computes longer than its peers",
        evidence=(Evidence(metric=KERNEL_EVIDENCE, subject="rank 2 and peers", value=windows,
                           reference=1.0, unit="windows"),),
    )  # fmt: skip


class Board:
    """Stands in for the analyzer's control board: numbers the requests it is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, tuple[int, ...]]] = []

    def __call__(self, num_steps: int, ranks: Sequence[int]) -> pb.ProfileRequest:
        self.sent.append((num_steps, tuple(ranks)))
        return pb.ProfileRequest(request_id=f"r{len(self.sent)}", at_step=100 + len(self.sent))


class Clock:
    def __init__(self) -> None:
        self.now = 1000 * S

    def __call__(self) -> int:
        return self.now


def _loop(tmp_path: Path, mode: str = "on") -> tuple[AutoCapture, Board, Clock]:
    board, clock = Board(), Clock()
    loop = AutoCapture(
        request=board, run_dir=tmp_path, cfg=AutoCaptureConfig(mode=mode), clock=clock,
        wall=clock,
    )  # fmt: skip
    return loop, board, clock


RANKS = list(range(8))
CLASSES = {r: r % 2 for r in RANKS}  # two work classes: even and odd ranks (two stages)


def test_an_undecided_node_slowdown_gets_a_window_on_it_and_healthy_peers_of_its_class(
    tmp_path: Path,
) -> None:
    loop, board, _ = _loop(tmp_path)
    other = replace(_node((4,)), id="node-rank4", evidence=())  # named elsewhere: not healthy
    new = loop.step([_node((2,)), other], CLASSES, RANKS)
    assert board.sent == [(3, (2, 0, 4, 6))]  # 3 steps, rank 2 and its class's other ranks
    (c,) = new
    assert (c.status, c.finding_id, c.ranks, c.peers, c.at_step, c.after_step) == (
        "requested", "node-rank2", (2,), (0, 4, 6), 101, 40,
    )  # fmt: skip
    assert captures.read(tmp_path) == ([c], [])
    assert loop.step([_node((2,))], CLASSES, RANKS) == []  # on its way: not asked again
    assert len(board.sent) == 1


def test_peers_are_healthy_ranks_of_the_class_first_then_others_to_make_up_a_median() -> None:
    classes = {r: r % 2 for r in range(10)}
    assert _peers((2,), classes, range(10), named={2, 4}, most=2) == (0, 6)  # not 4: named
    assert _peers((2,), classes, range(10), named={0, 2, 6, 8}, most=3) == (0, 4, 6)
    assert _peers((3,), None, range(5), named={3}, most=3) == (1, 2, 4)  # one class: all


def test_the_outcome_is_recorded_once_the_window_decides(tmp_path: Path) -> None:
    loop, _, _ = _loop(tmp_path)
    loop.step([_node((2,))], CLASSES, RANKS)
    kernel = replace(
        _node((2,)), id="kernel-aten::mm", cause="kernel", evidence=(),
        summary="aten::mm 9.8 ms on rank 2 vs 2.4 ms on its peers",
    )  # fmt: skip
    (done,) = loop.step([kernel], CLASSES, RANKS)
    assert (done.status, done.request_id, done.outcome) == (
        "decided", "r1", "kernel: aten::mm 9.8 ms on rank 2 vs 2.4 ms on its peers",
    )  # fmt: skip
    (f,) = annotate([kernel], captures.read(tmp_path)[0])
    (ev,) = [e for e in f.evidence if e.metric == AUTO_CAPTURE]
    assert ev.value == 101 and ev.subject == "rank 2 (peers 0, 4, 6)"
    assert "requested automatically" in ev.note and "decided it: kernel: aten::mm" in ev.note
    assert loop.step([kernel], CLASSES, RANKS) == []  # decided: nothing more to fetch


def test_a_decided_node_finding_is_recorded_as_node(tmp_path: Path) -> None:
    loop, _, _ = _loop(tmp_path)
    loop.step([_node((3,))], CLASSES, RANKS)
    (done,) = loop.step([_node((3,), windows=1.0)], CLASSES, RANKS)
    assert done.status == "decided" and done.outcome.startswith("node:")


def test_one_window_per_job_every_two_minutes(tmp_path: Path) -> None:
    loop, board, clock = _loop(tmp_path)
    loop.step([_node((2,))], CLASSES, RANKS)
    clock.now += 30 * S
    (held,) = loop.step([_node((2,)), _node((3,))], CLASSES, RANKS)
    assert held.status == "deferred" and held.finding_id == "node-rank3"
    assert "one per job every 120 s" in held.outcome and len(board.sent) == 1
    assert loop.step([_node((2,)), _node((3,))], CLASSES, RANKS) == []  # noted once
    clock.now += 91 * S
    (asked,) = loop.step([_node((2,)), _node((3,))], CLASSES, RANKS)
    assert asked.status == "requested" and board.sent[-1] == (3, (3, 1, 5, 7))


def test_observe_only_records_and_off_does_nothing(tmp_path: Path) -> None:
    loop, board, _ = _loop(tmp_path / "o", "observe")
    (tmp_path / "o").mkdir()
    (seen,) = loop.step([_node((2,))], CLASSES, RANKS)
    assert seen.status == "observed" and board.sent == [] and seen.peers == (0, 4, 6)
    off, board_off, _ = _loop(tmp_path, "off")
    assert off.step([_node((2,))], CLASSES, RANKS) == [] and board_off.sent == []
    assert not (tmp_path / captures.CAPTURES_FILE).exists()


def test_decided_or_small_findings_need_no_window(tmp_path: Path) -> None:
    loop, board, _ = _loop(tmp_path)
    kernel = replace(_node((2,)), cause="kernel")
    hang = replace(_node((2,)), symptom="hang")
    assert loop.step([_node((2,), windows=2.0), kernel, hang], CLASSES, RANKS) == []
    assert board.sent == []


def test_a_failed_request_leaves_the_loop_running(tmp_path: Path) -> None:
    def refuse(num_steps: int, ranks: Sequence[int]) -> pb.ProfileRequest:
        raise TransportError("the analyzer is shutting down")

    loop = AutoCapture(request=refuse, run_dir=tmp_path)
    assert loop.step([_node((2,))], None, [0, 1, 2, 3]) == []


def test_bad_modes_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="choose one of on, observe, off"):
        AutoCaptureConfig(mode="sometimes")


def test_a_damaged_record_is_skipped_and_named(tmp_path: Path) -> None:
    loop, _, _ = _loop(tmp_path)
    loop.step([_node((2,))], CLASSES, RANKS)
    with (tmp_path / captures.CAPTURES_FILE).open("ab") as fh:
        fh.write(b'{"ts_ns": 1, "status": "requested", "finding_id": 7}\n\xff\xfe\n{"ts_n')
    done, problems = captures.read(tmp_path)
    assert len(done) == 1
    assert [p.split(": skipped")[0] for p in problems] == [
        f"{captures.CAPTURES_FILE} line {n}" for n in (2, 3, 4)
    ]


def test_the_final_triage_settles_what_is_still_pending(tmp_path: Path) -> None:
    loop, _, _ = _loop(tmp_path)
    loop.step([_node((2,)), _node((5,))], CLASSES, RANKS)  # rank 2 asked; rank 5 deferred
    kernel = replace(_node((2,)), id="kernel-x", cause="kernel", evidence=(), summary="x slower")
    (done,) = loop.settle([kernel, _node((5,))])
    assert (done.status, done.finding_id, done.outcome) == (
        "decided",
        "node-rank2",
        "kernel: x slower",
    )
    loop2, _, _ = _loop(tmp_path / "b")
    (tmp_path / "b").mkdir()
    loop2.step([_node((2,))], CLASSES, RANKS)
    (lost,) = loop2.settle([_node((2,))])
    assert lost.outcome.startswith("undecided when the run ended")
    assert loop2.settle([_node((2,))]) == []  # settled once


# -- link probe rounds --------------------------------------------------------------------------

ADDRESSES = {"node-a": "10.9.0.1", "node-b": "10.9.0.2", "node-c": "10.9.0.3", "node-d": "10.9.0.4"}


def _link(
    hosts: tuple[str, ...] = ("node-b", "node-c"), evidence: tuple[Evidence, ...] = ()
) -> Finding:
    return Finding(
        id="link:0", symptom="slowdown", cause="link", severity="warning", ranks=(1, 2),
        hosts=hosts, onset_step=30, detected_step=33, slowdown=0.5, confidence=0.6,
        summary="all_reduce of group 0 takes 2x longer", evidence=evidence,
        link=LinkRef(ranks=(1, 2), hosts=hosts, group="0"),
    )  # fmt: skip


class Daemons:
    """Stands in for the control board's probe requests: numbers them, keeps what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def __call__(self, probe: str, params_json: str, host: str) -> pb.ProbeRequest:
        self.sent.append((probe, params_json, host))
        return pb.ProbeRequest(request_id=f"p{len(self.sent)}", probe=probe, host=host)


def _probing(tmp_path: Path, mode: str = "on") -> tuple[AutoCapture, Daemons, Clock]:
    daemons, clock = Daemons(), Clock()
    loop = AutoCapture(request=Board(), run_dir=tmp_path, cfg=AutoCaptureConfig(mode=mode),
                       clock=clock, wall=clock, probe=daemons)  # fmt: skip
    return loop, daemons, clock


def test_a_link_its_connections_left_on_a_pair_gets_one_probe_round_with_references(
    tmp_path: Path,
) -> None:
    loop, daemons, _ = _probing(tmp_path)
    (c,) = loop.step([_link()], None, [0, 1, 2, 3], ADDRESSES)
    assert c.kind == "probe" and c.status == "requested" and c.request_id == "p1"
    assert "probing node-b, node-c, node-a, node-d pairwise (12 probes)" in c.reason
    assert {h for _, _, h in daemons.sent} == set(ADDRESSES) and len(daemons.sent) == 12
    assert all(p == "tcp_pair" for p, _, _ in daemons.sent)
    assert loop.step([_link()], None, [0, 1, 2, 3], ADDRESSES) == []  # once per finding
    named = _link(("node-c",), (Evidence(metric=PROBE_LOCALIZATION, subject="node-c", value=1.0),))
    (done,) = loop.step([named], None, [0, 1, 2, 3], ADDRESSES)
    assert done.status == "decided" and done.outcome == "link: the probes name node-c"
    (f,) = annotate([named], loop.records)
    (e,) = [e for e in f.evidence if e.metric == AUTO_CAPTURE]
    assert "link probe round, requested automatically" in e.note and "node-c" in e.note
    assert len(daemons.sent) == 12


def test_a_link_named_to_one_host_or_on_two_hosts_gets_no_round(tmp_path: Path) -> None:
    loop, daemons, _ = _probing(tmp_path)
    assert loop.step([_link(("node-c",))], None, [0, 1], ADDRESSES) == []
    two = {h: a for h, a in ADDRESSES.items() if h in ("node-b", "node-c")}
    (c,) = loop.step([_link()], None, [0, 1], two)
    assert c.status == "deferred" and "fewer than three hosts" in c.outcome
    assert daemons.sent == []


def test_observe_mode_and_the_budget_hold_probe_rounds_back(tmp_path: Path) -> None:
    loop, daemons, _ = _probing(tmp_path, mode="observe")
    (c,) = loop.step([_link()], None, [0, 1, 2, 3], ADDRESSES)
    assert c.status == "observed" and daemons.sent == []
    loop, daemons, clock = _probing(tmp_path)
    loop.step([_link()], None, [0, 1, 2, 3], ADDRESSES)
    other = replace(_link(), id="link:1")
    (held,) = loop.step([other], None, [0, 1, 2, 3], ADDRESSES)
    assert held.status == "deferred" and "one probe round per job every 600 s" in held.outcome
    clock.now += 601 * S
    lost, sent = loop.step([other], None, [0, 1, 2, 3], ADDRESSES)
    assert lost.status == "decided" and "no probe results came back within" in lost.outcome
    assert sent.status == "requested" and sent.finding_id == "link:1" and len(daemons.sent) == 24


def test_a_closed_analyzer_settles_a_round_still_out_and_only_then(tmp_path: Path) -> None:
    """A standalone analyzer stopped (SIGTERM) before a live pass saw the probe results: its
    record must still say what came of the round, not leave it 'not back yet' (CI: the results
    were in the store, the record said the round was still out)."""
    from diag.analyzer.core import AnalyzerCore
    from diag.store.run_store import RunStore

    core = AnalyzerCore(RunStore.create(tmp_path / "run"), auto_capture=AutoCaptureConfig())
    assert core.autocapture is not None
    core.autocapture.probe = Daemons()
    assert core.settle() is False  # nothing pending: no final triage
    core.autocapture.step([_link()], None, [0, 1, 2, 3], ADDRESSES)
    assert core.autocapture.pending == 1
    core.close()
    assert core.settle() is True
    done, problems = captures.read(tmp_path / "run")
    assert problems == [] and [c.status for c in done] == ["requested", "decided"]
    assert "undecided when the run ended" in done[-1].outcome
    assert core.autocapture.pending == 0 and core.settle() is False
