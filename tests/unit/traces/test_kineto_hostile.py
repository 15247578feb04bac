"""Kineto traces that try to hurt the reader: a gzip bomb, a FIFO, fields of the wrong type,
huge numbers. Each is one line naming the file, within a time and memory budget."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path

import pytest

from diag.errors import InputError
from diag.traces.kineto import load_trace, max_inflated
from tests.fakes.bounded import bounded, in_thread


def _bomb(path: Path, inflated_mib: int) -> Path:
    """A gzip trace of ``inflated_mib`` MiB of JSON (mostly spaces), ~1 KB per MiB on disk."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    spaces = b" " * (1 << 20)
    with open(path, "wb") as fh:
        fh.write(deflate.compress(b'{"traceEvents": [], "pad": "'))
        for _ in range(inflated_mib):
            fh.write(deflate.compress(spaces))
        fh.write(deflate.compress(b'"}') + deflate.flush())
    return path


def test_a_gzip_bomb_stops_at_the_inflate_cap(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "rank0.json.gz", 256)
    assert bomb.stat().st_size < 300_000
    assert max_inflated(bomb.stat().st_size) == 64 << 20
    with bounded(seconds=20, max_mib=160), pytest.raises(InputError) as info:
        load_trace(bomb)
    assert str(info.value) == (
        f"{bomb} is not a readable Kineto trace: gzip stream inflates to more than 64 MiB"
    )
    # below the cap, streamed inflation reads a trace as before (several gzip members too)
    event = {"ph": "X", "name": "k", "cat": "kernel", "ts": 1, "dur": 2, "pid": 0, "tid": 7}
    body = json.dumps({"traceEvents": [event]}).encode()
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(body[:10]) + gzip.compress(body[10:]))
    trace = load_trace(path)
    assert trace.rank == 3 and [e.name for e in trace.events] == ["k"]


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "rank0.json"
    os.mkfifo(fifo)

    def unblock() -> None:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    with pytest.raises(InputError, match="a FIFO, not a regular file"):
        in_thread(lambda: load_trace(fifo), 10, unblock=unblock)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1e400}]}', "a number out of range (1e400)"),
        (
            '{"traceEvents": [], "x": ' + "9" * 5000 + "}",
            "an integer of 5000 digits (more than 32)",
        ),
        ('{"traceEvents": [{"ph": "X", "ts": NaN}]}', "NaN, not a number JSON allows"),
    ],
)
def test_numbers_are_bounded(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        load_trace(path)
    assert str(info.value) == f"{path} is not a readable Kineto trace: JSON holds {reason}"


def test_fields_of_the_wrong_type_are_read_as_empty(tmp_path: Path) -> None:
    deep = "[" * 900 + "]" * 900
    events = [
        '{"ph": "M", "name": "thread_name", "pid": [1], "tid": {"a": 1}, "args": {"name": [2]}}',
        '{"ph": "M", "name": "process_labels", "pid": [1], "args": {"labels": ' + deep + "}}",
        '{"ph": "X", "name": ' + deep + ', "cat": {"k": 1}, "ts": 5, "dur": 2, "pid": [1], '
        '"tid": {"a": 1}, "args": {"Input Dims": ' + deep + "}}",
    ]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    with bounded(seconds=10, max_mib=32):
        trace = load_trace(path)
    (event,) = trace.events
    assert (event.name, event.cat, event.pid, event.tid) == ("", "", "", "")
    assert trace.track_name(event) == ""
