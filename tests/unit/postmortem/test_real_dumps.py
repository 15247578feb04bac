"""The 16 real NCCL Flight Recorder dumps of one failed job (shared data): the top finding names
exactly the ranks the fault injection hit, once, and bad copies of dumps are reported by name."""

from __future__ import annotations

import os
import pickle
import re
import shutil
from pathlib import Path

import pytest

from diag.flight_recorder import load_fr_dump
from diag.postmortem.analyze import analyze
from diag.postmortem.discover import collect
from tests.fakes.fr_dumps import REAL_NCCL_DUMPS, write_json

REAL = REAL_NCCL_DUMPS
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"{REAL} not present")


def _truth() -> list[int]:
    text = (REAL / "fault_injection.log").read_text()
    m = re.search(r"Fault ranks: \[([\d, ]+)\]", text)
    assert m
    return [int(x) for x in m.group(1).split(",")]


def test_top_finding_names_exactly_the_faulty_ranks_once() -> None:
    report = analyze(collect(REAL))
    top = report.findings[0]
    assert list(top.ranks) == _truth() == [12, 14]
    # one answer for the job, not one per process group
    assert [f.id for f in report.findings if set(f.ranks) & {12, 14}] == [top.id]
    assert top.symptom == "hang" and top.cause == "node"
    assert top.confidence >= 0.85
    notes = " ".join(e.note for e in top.evidence)
    assert "_dump_12" in notes and "_dump_14" in notes
    stalled = [e for e in top.evidence if e.metric == "last_completed_seq"]
    assert {e.subject.split(":")[0] for e in stalled} == {"rank 12", "rank 14"}
    assert all(e.reference is not None and e.value < e.reference for e in stalled)
    waiting = next(e for e in top.evidence if e.metric == "waiting_ranks")
    assert waiting.value == 14
    assert report.problems == ()
    assert analyze(collect(REAL)).to_json() == report.to_json()  # deterministic


def test_truncated_and_foreign_files_are_named_and_the_rest_analyzed(tmp_path: Path) -> None:
    for f in REAL.iterdir():
        shutil.copy(f, tmp_path / f.name)
    data = (REAL / "_dump_3").read_bytes()
    (tmp_path / "_dump_3").write_bytes(data[: len(data) // 2])
    (tmp_path / "nccl_trace_rank_7").write_text("this is not a dump\n")
    report = analyze(collect(tmp_path))
    assert len(report.problems) == 2
    trunc = next(p for p in report.problems if "_dump_3" in p)
    assert trunc.startswith(str(tmp_path / "_dump_3") + ": ") and "not a readable" in trunc
    assert any(
        "nccl_trace_rank_7" in p and "not a Flight Recorder dump" in p for p in report.problems
    )
    assert list(report.findings[0].ranks) == [12, 14]
    assert report.run["num_dumps"] == 15
    assert any("no Flight Recorder dump from rank 3 (of 16)" in m for m in report.missing)


def test_malicious_pickle_is_refused_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "_dump_0").write_bytes(pickle.dumps({"version": "2.9", "entries": [Evil()]}))
    shutil.copy(REAL / "_dump_1", dumps / "_dump_1")
    report = analyze(collect(dumps))
    assert not marker.exists()
    assert len(report.problems) == 1 and "_dump_0" in report.problems[0]
    assert "refused" in report.problems[0]
    assert report.run["dump_ranks"] == [1]


def test_json_dumps_read_like_pickles(tmp_path: Path) -> None:
    for r in range(16):
        obj = load_fr_dump((REAL / f"_dump_{r}").read_bytes())
        write_json(tmp_path / f"nccl_trace_rank_{r}.json", obj)
    report = analyze(collect(tmp_path))
    assert report.problems == ()
    assert list(report.findings[0].ranks) == [12, 14]
    assert report.findings[0].cause == "node"
