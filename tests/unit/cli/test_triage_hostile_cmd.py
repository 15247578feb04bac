"""``diag triage`` on remains that try to hurt it: it exits 0 with one ``unreadable`` line per
bad file and the crash the rest shows, never a traceback, a hang or markup read from the inputs.

A FIFO or a pickle that expands to 2**38 values would hang a broken reader: the command runs
under :func:`~tests.fakes.bounded.bounded` (a deadline that interrupts a blocked ``open`` too, and
a memory budget), so a regression fails the test instead of hanging the suite."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
from pathlib import Path

from rich.console import Console

from diag.cli.render.tables import findings_table, trace_table
from diag.findings import Finding
from tests.fakes.bounded import bounded
from tests.fakes.cli import CliResult, run_cli
from tests.fakes.torchrun_logs import write_crash

#: file name -> what its problem line says
HOSTILE: dict[str, str] = {
    "rank0.log": "a FIFO, not a regular file; not read",
    "_dump_0": "expands to more than",
    "_dump_1": "memo index 67108863 beyond the 0 values stored so far",
    "_dump_2.json": "JSON nests too deeply",
    "nccl_trace_rank_3.json": "entry 0 is malformed: TypeError: int where an object belongs",
    "error.json": "JSON holds a number out of range (1e400)",
    "worker.log": "1 line(s) not read (line 1: ",
    "agent.log": "claims a world size of 1000000000, more than the 262144 ranks diag analyzes",
    "_dump_\\xff4": "not a readable Flight Recorder dump",
}


def _hostile(root: Path) -> None:
    write_crash(root)  # rank 2 crashes: what the rest of the remains shows
    os.mkfifo(root / "rank0.log")
    inner: list[object] = []
    for _ in range(38):
        inner = [inner, inner]
    (root / "_dump_0").write_bytes(pickle.dumps({"version": "2.9", "x": inner}, 2))
    (root / "_dump_1").write_bytes(b"\x80\x04}r" + struct.pack("<I", (1 << 26) - 1) + b".")
    (root / "_dump_2.json").write_text('{"version": 1, "entries": ' + "[" * 100_000 + "}")
    (root / "nccl_trace_rank_3.json").write_text('{"version": "2.9", "entries": [1]}')
    (root / "error.json").write_text('{"message": {"message": "x", "errorCode": 1e400}}')
    timeout = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum={}, OpType=ALLREDUCE\n"
    (root / "worker.log").write_text(timeout.format("9" * 5000))
    (root / "agent.log").write_text("  global_world_sizes=[1000000000]\n")
    with open(os.fsencode(root) + b"/_dump_\xff4", "wb") as fh:
        fh.write(b"\x80\x04\x95garbage")


def _diag(*args: str) -> CliResult:
    with bounded(seconds=30, max_mib=256):
        res = run_cli(*args)
    assert "Traceback" not in res.stdout + res.stderr
    return res


def test_hostile_remains_json(tmp_path: Path) -> None:
    root = tmp_path / "remains"
    root.mkdir()
    _hostile(root)
    res = _diag("triage", str(root), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert "crash-r2" in [f["id"] for f in out["findings"]]
    by_file = {p.split(": ", 1)[0]: p.split(": ", 1)[1] for p in out["problems"]}
    assert set(by_file) == {f"{root}/{name}" for name in HOSTILE}
    for name, why in HOSTILE.items():
        assert why in by_file[f"{root}/{name}"], name


def test_hostile_remains_table_and_html(tmp_path: Path) -> None:
    root = tmp_path / "remains"
    root.mkdir()
    _hostile(root)
    page = tmp_path / "r.html"
    res = _diag("triage", str(root), "--html", str(page))
    assert res.returncode == 0, res.stderr
    assert "r2" in res.stdout and "ValueError" in res.stdout
    unreadable = [line for line in res.stdout.splitlines() if line.startswith("unreadable: ")]
    assert len(unreadable) == len(HOSTILE)  # one line each, however long
    assert f"unreadable: {root}/_dump_\\xff4: " in res.stdout
    text = page.read_text(encoding="utf-8")
    assert "_dump_\\xff4" in text and "rank0.log: a FIFO" in text


def test_markup_in_paths_and_messages_is_printed_as_text(tmp_path: Path) -> None:
    root = tmp_path / "[" / "lr=0.1]"  # a run folder named "[/lr=0.1]"
    root.mkdir(parents=True)
    (root / "rank1.log").write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/data/[/lr=0.1]/train.py", line 10, in <module>\n'
        "[rank1]: ValueError: bad [bold]batch[/bold]\n"
    )
    res = _diag("triage", str(root))
    assert res.returncode == 0, res.stderr
    assert "/data/[/lr=0.1]/train.py:10" in res.stdout
    quiet = tmp_path / "[bold]run"
    quiet.mkdir()
    (quiet / "_dump_0").write_bytes(b"\x80\x04\x1b[2Jgarbage")
    res = _diag("triage", str(quiet))
    assert res.returncode == 0, res.stderr
    assert "no findings in run [bold]run" in res.stdout
    assert "\x1b" not in res.stdout


def test_non_utf8_file_name_with_html(tmp_path: Path) -> None:
    root = tmp_path / "remains"
    root.mkdir()
    with open(os.fsencode(root) + b"/rank0\xff.log", "wb") as fh:
        fh.write(b"[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    page = tmp_path / "r.html"
    res = _diag("triage", str(root), "--html", str(page))
    assert res.returncode == 0, res.stderr
    text = page.read_text(encoding="utf-8")
    assert "rank0\\xff.log" in text
    res = _diag("triage", str(root), "--json")
    assert "rank0\\\\xff.log" in res.stdout  # JSON of the escaped name, no lone surrogate


def _render(renderable: object) -> str:
    out = io.StringIO()
    Console(width=200, file=out, color_system=None).print(renderable)
    return out.getvalue()


def test_tables_render_data_as_text() -> None:
    finding = Finding(
        id="crash-r1",
        symptom="crash",
        cause="program",
        severity="critical",
        ranks=(1,),
        confidence=0.9,
        summary="failed at /data/[/lr=0.1]/train.py \x1b[31mred",
    )
    text = _render(findings_table([finding]))
    assert "/data/[/lr=0.1]/train.py \\x1b[31mred" in text and "\x1b" not in text
    summary = {
        "path": "/runs/[/lr=0.1]/rank0.json",
        "top": [{"name": "void kernel<[bold]>", "category": "kernel", "num_calls": 1}],
    }
    text = _render(trace_table(summary))
    assert "/runs/[/lr=0.1]/rank0.json" in text and "kernel<[bold]>" in text
