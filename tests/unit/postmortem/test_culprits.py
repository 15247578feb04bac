"""The culprit rules on synthetic dumps: a rank stuck in Python behind a chain of victims, a
circular wait, a mismatched collective, a kernel that never started, a rank that left no dump."""

from __future__ import annotations

from pathlib import Path

from diag.postmortem.analyze import analyze
from diag.postmortem.discover import collect
from tests.fakes.fr_dumps import dump, entry, write_pickle

GROUPS = {"0": [0, 1, 2, 3], "1": [0, 1], "2": [2, 3], "3": [1, 3]}


def _done(pg: str, upto: int, n: int = 3) -> list[dict]:
    return [entry(pg, s) for s in range(upto - n + 1, upto + 1)]


def test_rank_stuck_in_python_is_the_root_not_its_victims(tmp_path: Path) -> None:
    # rank 3 stopped before DP seq 10 and TP seq 20; rank 1 blocks in DP seq 10 (waiting for 3)
    # and so never issues TP seq 21, which rank 0 waits in; rank 2 waits for 3 in TP seq 20.
    write_pickle(
        tmp_path / "_dump_0", dump(GROUPS, [*_done("1", 20), entry("1", 21, state="scheduled")])
    )
    write_pickle(
        tmp_path / "_dump_1",
        dump(GROUPS, [*_done("1", 20), *_done("3", 9), entry("3", 10, state="scheduled")]),
    )
    write_pickle(
        tmp_path / "_dump_2", dump(GROUPS, [*_done("2", 19), entry("2", 20, state="scheduled")])
    )
    write_pickle(tmp_path / "_dump_3", dump(GROUPS, [*_done("2", 19), *_done("3", 9)]))
    report = analyze(collect(tmp_path))
    (top,) = report.findings
    assert top.ranks == (3,)
    assert top.symptom == "hang" and top.cause == "unknown"
    assert "never issued" in top.summary
    assert report.culprits.waiting == (0, 1, 2)
    assert 0.65 <= top.confidence <= 0.8
    assert any("no worker logs" in m for m in report.missing)


def test_circular_wait_is_a_program_error(tmp_path: Path) -> None:
    groups = {"a": [0, 1], "b": [0, 1]}
    write_pickle(
        tmp_path / "_dump_0",
        dump(groups, [*_done("a", 4), entry("a", 5, state="scheduled"), *_done("b", 6)]),
    )
    write_pickle(
        tmp_path / "_dump_1",
        dump(groups, [*_done("a", 4), *_done("b", 6), entry("b", 7, state="scheduled")]),
    )
    (top,) = analyze(collect(tmp_path)).findings
    assert top.ranks == (0, 1) and top.cause == "program"
    assert "each other" in top.summary


def test_mismatched_sizes_at_one_seq(tmp_path: Path) -> None:
    groups = {"0": [0, 1, 2]}
    for r in range(3):
        size = [[2048]] if r == 2 else [[1024]]
        write_pickle(
            tmp_path / f"_dump_{r}",
            dump(groups, [*_done("0", 4), entry("0", 5, state="scheduled", sizes=size)]),
        )
    findings = analyze(collect(tmp_path)).findings
    odd = next(f for f in findings if f.id.startswith("mismatch"))
    assert odd.ranks == (2,) and odd.cause == "program"
    assert "[[2048]]" in odd.summary and "seq 5" in odd.summary


def test_kernel_that_never_started(tmp_path: Path) -> None:
    groups = {"0": [0, 1, 2]}
    for r in range(3):
        state = "scheduled" if r == 1 else "started"
        write_pickle(
            tmp_path / f"_dump_{r}", dump(groups, [*_done("0", 4), entry("0", 5, state=state)])
        )
    (top,) = analyze(collect(tmp_path)).findings
    assert top.ranks == (1,) and top.cause == "node"


def test_rank_without_dump_is_blamed_only_when_nothing_else_explains(tmp_path: Path) -> None:
    groups = {"0": [0, 1, 2]}
    for r in range(2):
        write_pickle(
            tmp_path / f"_dump_{r}",
            dump(groups, [*_done("0", 7), entry("0", 8, state="scheduled")]),
        )
    report = analyze(collect(tmp_path))
    (top,) = report.findings
    assert top.ranks == (2,) and top.confidence <= 0.5
    assert "left no dump" in top.summary
    assert any("no Flight Recorder dump from rank 2 (of 3)" in m for m in report.missing)


def test_uniform_hang_says_no_culprit(tmp_path: Path) -> None:
    groups = {"0": [0, 1]}
    for r in range(2):
        write_pickle(
            tmp_path / f"_dump_{r}",
            dump(groups, [*_done("0", 7), entry("0", 8, state="scheduled")]),
        )
    (top,) = analyze(collect(tmp_path)).findings
    assert top.ranks == () and top.id == "hang-unknown" and top.confidence <= 0.3
