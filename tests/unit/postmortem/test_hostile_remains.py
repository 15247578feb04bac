"""Remains that try to hurt the reader (crafted pickles, JSON, logs, names, a FIFO): each bad file
is one problem line naming it, read within a time and memory budget, and the rest of the remains
(a crash on rank 2, :func:`~tests.fakes.torchrun_logs.write_crash`) is still triaged."""

# ruff: noqa: E501 (log lines are kept verbatim, as long as torch prints them)

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path

import pytest

from diag.errors import InputError
from diag.postmortem.analyze import RemainsReport, analyze
from diag.postmortem.discover import collect
from diag.postmortem.fr_pickle import load_plain_pickle
from diag.postmortem.records import MAX_WORLD_SIZE
from tests.fakes.bounded import bounded, in_thread
from tests.fakes.fr_dumps import dump, entry
from tests.fakes.torchrun_logs import write_crash

TIMEOUT = (
    "[rank0]:[E1121 10:12:11.512847125 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.\n"
)


def _remains(tmp_path: Path) -> Path:
    root = tmp_path / "remains"
    root.mkdir()
    write_crash(root)
    return root


def _triage(root: Path, *, seconds: float = 10.0, max_mib: float = 32.0) -> RemainsReport:
    with bounded(seconds, max_mib):
        report = analyze(collect(root))
    assert "crash-r2" in [f.id for f in report.findings]  # the rest is still triaged
    return report


def _problem(report: RemainsReport, name: str) -> str:
    """The one problem line about file ``name`` (one line, naming the file first)."""
    lines = [p for p in report.problems if name in p.split(": ", 1)[0]]
    assert len(lines) == 1, f"not one problem line about {name}: {report.problems}"
    assert lines[0].isprintable()  # one line, nothing a terminal would act on
    return lines[0]


def _shared(levels: int) -> bytes:
    """A pickle whose lists each hold the previous one twice: ~9 bytes a level, 2**levels
    values once shared references are expanded."""
    inner: list[object] = []
    for _ in range(levels):
        inner = [inner, inner]
    return pickle.dumps({"version": "2.9", "pg_config": {}, "entries": [], "x": inner}, 2)


def test_shared_references_are_walked_once(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    data = _shared(38)
    assert len(data) < 400
    (root / "_dump_0").write_bytes(data)
    line = _problem(_triage(root, seconds=10, max_mib=8), "_dump_0")
    assert "refused" in line and "expands to more than" in line


def test_memo_index_is_bounded_by_the_values_stored(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    # PROTO 4, EMPTY_DICT, LONG_BINPUT 2**26-1, STOP: nine bytes the C unpickler makes 1 GB of
    (root / "_dump_0").write_bytes(b"\x80\x04}r" + struct.pack("<I", (1 << 26) - 1) + b".")
    # BINPUT 0, then LONG_BINGET of an index never stored
    (root / "_dump_1").write_bytes(b"\x80\x04}q\x00j" + struct.pack("<I", 0xFFFFFFFF) + b".")
    report = _triage(root, max_mib=8)
    assert "memo index 67108863 beyond the 0 values stored" in _problem(report, "_dump_0")
    assert "memo index 4294967295 was never stored" in _problem(report, "_dump_1")


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        (
            "_dump_0.json",
            '{"version": "2.9", "entries": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "nests too deeply",
        ),
        (
            "_dump_0.json",
            '{"version": "2.9", "pg_config": {"0": {"name": ' + "[" * 900 + "]" * 900 + "}}}",
            "nests deeper than 64",
        ),
        (
            "error.json",
            '{"message": {"message": "x", "extraInfo": ' + "[" * 5000 + "]" * 5000 + "}}",
            "nests too deeply",
        ),
        (
            "_dump_0.json",
            '{"version": "2.9", "rank": ' + "9" * 5000 + ', "entries": []}',
            "an integer of 5000 digits",
        ),
        (
            "_dump_0.json",
            '{"version": "2.9", "pg_config": {}, "entries": [], "rank": 1e400}',
            "out of range (1e400)",
        ),
        ("_dump_0.json", '{"version": "2.9", "pg_config": {}, "entries": [], "x": NaN}', "NaN"),
    ],
)
def test_json_depth_and_numbers_are_bounded(
    tmp_path: Path, name: str, content: str, why: str
) -> None:
    root = _remains(tmp_path)
    (root / name).write_text(content)
    assert why in _problem(_triage(root), name)


@pytest.mark.parametrize(
    ("dump", "why"),
    [
        ({"entries": [1, "two"]}, "entry 0 is malformed: TypeError: int where an object belongs"),
        ({"pg_config": {"0": {"ranks": [["x"]]}}}, "group 0 lists ['x'] as a rank"),
        (
            {"pg_config": {"0": {"ranks": "[0, 99999999999]"}}},
            "group 0 lists 99999999999 as a rank",
        ),
        (
            {"pg_config": {"0": "x"}, "rank": 10**12},
            f"rank 1000000000000 is not a rank (0 .. {MAX_WORLD_SIZE - 1})",
        ),
        (
            {"entries": [{"profiling_name": "nccl:all_reduce", "collective_seq_id": 1e300}]},
            "does not fit 64 bits",
        ),
        (
            {"entries": [["nccl:all_reduce"]]},
            "entry 0 is malformed: TypeError: list where an object belongs",
        ),
    ],
)
def test_fr_json_of_wrong_types_is_a_problem_line(
    tmp_path: Path, dump: dict[str, object], why: str
) -> None:
    root = _remains(tmp_path)
    (root / "nccl_trace_rank_0.json").write_text(json.dumps({"version": "2.9", **dump}))
    assert why in _problem(_triage(root), "nccl_trace_rank_0.json")


def test_error_file_numbers_out_of_range(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    bad = root / "other" / "attempt_0" / "3"
    bad.mkdir(parents=True)
    (bad / "error.json").write_text('{"message": {"message": "boom", "errorCode": 1e400}}')
    odd = root / "other" / "attempt_0" / "4"
    odd.mkdir(parents=True)
    (odd / "error.json").write_text(
        '{"message": {"message": "boom", "errorCode": 10000000000000000000000}, "timestamp": "1e400"}'
    )
    report = _triage(root)
    assert "a number out of range (1e400)" in _problem(report, "3/error.json")
    assert not [p for p in report.problems if "4/error.json" in p]  # read: the odd fields dropped
    clue = next(c for c in report.remains.clues if c.source.endswith("4/error.json"))
    assert clue.exitcode is None and clue.ts_s is None


def test_numbers_of_thousands_of_digits_in_logs(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    digits = "9" * 5000
    (root / "worker.log").write_text(
        f"[rank{digits}]: RuntimeError: boom\n"
        + TIMEOUT.format(seq=digits)
        + f'  File "x.py", line {digits}, in f\n'
        + TIMEOUT.format(seq=7)
    )
    report = _triage(root)
    line = _problem(report, "worker.log")
    assert "1 line(s) not read (line 2: " in line
    assert any(c.kind == "timeout" and c.seq == 7 for c in report.remains.clues)


def test_world_size_claims_are_checked_and_capped(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    (root / "agent.log").write_text(
        "  local_ranks=[0, 1]\n  global_ranks=[0, 1]\n  global_world_sizes=[1000000000, 1000000000]\n"
        + TIMEOUT.format(seq=5)
    )
    (root / "small.log").write_text("  global_world_sizes=[2, 2]\n")
    report = _triage(root, max_mib=32)
    assert _problem(report, "agent.log").endswith(
        f"claims a world size of 1000000000, more than the {MAX_WORLD_SIZE} ranks diag analyzes; not used"
    )
    assert _problem(report, "small.log").endswith(
        "claims a world size of 2, but rank 3 left remains; not used"
    )
    assert report.remains.world_size == 4  # job.log's claim, which the files bear out


def test_a_fifo_is_a_problem_line_never_a_hang(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    fifo = root / "rank0.log"
    os.mkfifo(fifo)

    def unblock() -> None:  # a reader stuck in open() returns once a writer opens the FIFO
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    report = in_thread(lambda: analyze(collect(root)), 10, unblock=unblock)
    assert _problem(report, "rank0.log").endswith("rank0.log: a FIFO, not a regular file; not read")
    assert "crash-r2" in [f.id for f in report.findings]


def test_a_fifo_given_as_the_path_is_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "remains"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="a FIFO, not a regular file"):
        in_thread(lambda: collect(fifo), 10, unblock=lambda: None)


def test_undecodable_and_control_characters_in_file_names_are_escaped(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    raw = os.fsencode(root)
    with open(raw + b"/rank0\xff\x1b[2J.log", "wb") as fh:
        fh.write(b"[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    with open(raw + b"/_dump_\xfe1", "wb") as fh:
        fh.write(b"\x80\x04garbage")
    report = _triage(root)
    assert _problem(report, "_dump_\\xfe1")
    sources = {c.source for c in report.remains.clues}
    assert str(root / "rank0\\xff\\x1b[2J.log") in sources
    json.dumps(report.to_json(), ensure_ascii=False).encode("utf-8")  # no lone surrogates


def test_an_overlong_log_line_is_cut_not_held(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    with open(root / "worker.log", "w") as fh:
        fh.write("x" * (48 << 20) + "\n")
        fh.write(TIMEOUT.format(seq=9))
    report = _triage(root, seconds=20, max_mib=16)
    assert any(c.kind == "timeout" and c.seq == 9 for c in report.remains.clues)


def test_dict_keys_that_all_hash_alike_are_refused(tmp_path: Path) -> None:
    root = _remains(tmp_path)
    # {k * (2**61 - 1): 0 for k in 1..100000}: every key hashes to 0, so a dict of them costs
    # n**2 / 2 comparisons to build (minutes); written opcode by opcode, never built here
    keys = b"".join(
        b"\x8a\x0b" + (k * ((1 << 61) - 1)).to_bytes(11, "little", signed=True) + b"K\x00"
        for k in range(1, 100_001)
    )
    (root / "_dump_0").write_bytes(b"\x80\x02}(" + keys + b"u.")
    line = _problem(_triage(root, seconds=10, max_mib=64), "_dump_0")
    assert line.endswith("refused: a dict key or set item of type int beyond 64 bits")


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_the_plain_reader_reads_what_pickle_writes(protocol: int) -> None:
    frames = [{"name": "f", "filename": "/x.py", "line": 3}]
    obj = dump(
        {"0": [0, 1]},
        [entry("0", s, frames=frames, sizes=[[2**40, 3]]) for s in range(300)],
        rank=1,
        extra={"s": "\u00e9" * 300, "f": -1.5, "big": -(2**70), "t": (), "n": None},
    )
    if protocol >= 3:  # protocol 2 writes bytes as a call to codecs.encode: refused
        obj["b"] = b"\x00" * 300
    assert load_plain_pickle(pickle.dumps(obj, protocol=protocol)) == obj


def test_an_error_that_names_its_line_is_not_said_to_have_no_traceback(tmp_path: Path) -> None:
    """A crash finding quoted 'File "train.py", line 42' and the missing lines said that "no log
    holds their traceback" beside it."""
    from diag.diagnose.triage import triage_remains

    (tmp_path / "worker.log").write_text(
        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered (File "
        '"train.py", line 42, in step)\n'
    )
    result, _ = triage_remains(tmp_path)
    assert result.findings and result.findings[0].ranks == (1,)
    assert 'File "train' in result.findings[0].summary  # (the summary's quote is cut short)
    missing = " | ".join(result.missing)
    assert "no log holds their traceback" not in missing
    assert "no whole stack for rank 1: its error names only the line that raised" in missing
