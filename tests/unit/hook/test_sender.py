"""FrameSender: no event can stop the stream. Text that is not valid Unicode is sent escaped, an
event the wire cannot hold is dropped and counted, a batch larger than a frame is split, and one
event larger than a frame is dropped and counted; every other event still arrives, in order."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from diag import schema
from diag.hook.sender import FrameSender
from diag.transport import framing
from diag.transport.codec import EventRows
from tests.fakes.hook_sink import FrameSink, of_kind

MIB = 1 << 20
SOURCE = "n0/rank0/7"


@pytest.fixture
def sink() -> Iterator[FrameSink]:
    short = tempfile.mkdtemp(prefix="dh")  # AF_UNIX paths must stay short
    s = FrameSink(Path(short) / "d.sock")
    s.start()
    yield s
    s.close()
    shutil.rmtree(short, ignore_errors=True)


class Events:
    """Events of one hook, numbered as the hook numbers them."""

    def __init__(self) -> None:
        self.seq = 0

    def _env(self) -> dict[str, Any]:
        self.seq += 1
        return {"ts_ns": 1, "host": "n0", "rank": 0, "source": SOURCE, "seq": self.seq - 1}

    def step(self, step: int) -> schema.StepEvent:
        return schema.StepEvent(**self._env(), step=step, start_ns=0, end_ns=10, duration_ns=10)

    def ckpt(self, path: str, num_bytes: int = 5) -> schema.CheckpointEvent:
        return schema.CheckpointEvent(
            **self._env(), op="save", api="save", path=path, num_bytes=num_bytes,
            start_ns=0, duration_ns=1,
        )  # fmt: skip

    def exc(self, message: str) -> schema.ExceptionEvent:
        return schema.ExceptionEvent(**self._env(), pid=7, exc_type="E", message=message)


def send(sink: FrameSink, events: list[schema.Event]) -> tuple[FrameSender, list[schema.Event]]:
    """Send ``events`` through one sender; what the daemon received once the sender closed."""
    sender = FrameSender(sink.path, sender=SOURCE, max_backlog=10_000, reconnect_interval_s=0.01)
    sender.add(events)
    sender.flush()  # never raises
    assert sender.backlog == 0
    sender.close()
    return sender, sink.close()


def test_text_with_a_non_utf8_byte_is_sent_escaped(sink: FrameSink) -> None:
    ev = Events()
    path = os.fsdecode(b"/ck/\xffstep1.pt")  # a file name with a non-UTF-8 byte, as Python has it
    odd = "bad \ud800 surrogate"  # a lone surrogate no byte stands for
    sender, got = send(sink, [ev.step(0), ev.ckpt(path), ev.exc(odd), ev.step(1)])

    assert [e.seq for e in got] == [0, 1, 2, 3]
    (ckpt,) = of_kind(got, schema.CheckpointEvent)
    assert ckpt.path == "/ck/\\xffstep1.pt" and ckpt.num_bytes == 5
    (exc,) = of_kind(got, schema.ExceptionEvent)
    assert exc.message == "bad \\ud800 surrogate"
    assert sender.num_sent == 4 and sender.num_dropped == 0


def test_an_event_the_wire_cannot_hold_is_dropped_and_counted(sink: FrameSink) -> None:
    ev = Events()
    bad_int = ev.ckpt("/ck/a.pt", num_bytes=2**64)  # beyond int64
    not_an_int = cast(int, "1")
    bad_type = schema.StepEvent(
        ts_ns=1, host="n0", source=SOURCE, seq=99, start_ns=0, end_ns=1, duration_ns=not_an_int
    )
    sender, got = send(sink, [ev.step(0), bad_int, ev.step(1), bad_type, ev.step(2)])

    assert [(type(e).kind, e.step) for e in got] == [("step", 0), ("step", 1), ("step", 2)]
    assert (sender.dropped.unencodable, sender.dropped.oversize, sender.num_dropped) == (2, 0, 2)
    assert sender.num_sent == 3
    assert "dropped a step event (unencodable: TypeError" in sender.last_error


def test_a_batch_larger_than_a_frame_is_split_and_an_event_larger_than_one_dropped(
    sink: FrameSink,
) -> None:
    ev = Events()
    big = [ev.exc(f"{i}" + "x" * MIB) for i in range(20)]  # 20 MiB together: above a frame
    huge = ev.exc("y" * (framing.MAX_FRAME_BYTES + 1))  # no frame can hold it alone
    events = [ev.step(0), *big[:10], huge, *big[10:], ev.step(1)]
    sender, got = send(sink, events)

    assert [e.seq for e in got] == [e.seq for e in events if e is not huge]  # all, in order
    assert [e.message[:2] for e in of_kind(got, schema.ExceptionEvent)] == [
        e.message[:2] for e in big
    ]
    assert (sender.dropped.oversize, sender.dropped.unencodable, sender.num_dropped) == (1, 0, 1)
    assert sender.num_sent == len(events) - 1
    assert "dropped a exception event (oversize" in sender.last_error


def test_a_failed_write_keeps_the_batch_for_the_next_connection(tmp_path: Path) -> None:
    """The retry path is unchanged: nothing listening yet, events wait; then all arrive."""
    short = Path(tempfile.mkdtemp(prefix="dh"))
    ev = Events()
    sender = FrameSender(
        str(short / "d.sock"), sender=SOURCE, max_backlog=100, reconnect_interval_s=0.0
    )
    sender.add([ev.step(0), ev.ckpt(os.fsdecode(b"\xfe.pt"))])
    sender.flush()
    assert sender.backlog == 2 and sender.num_dropped == 0
    got = _flush_once_listened(sender, short)
    assert [e.seq for e in got] == [0, 1] and sender.num_dropped == 0


def _flush_once_listened(sender: FrameSender, short: Path) -> list[schema.Event]:
    """Start the daemon's sink at the sender's path, flush, close: what arrived."""
    sink = FrameSink(short / "d.sock")
    sink.start()
    try:
        sender.flush()
        sender.close()
    finally:
        got = sink.close()
        shutil.rmtree(short, ignore_errors=True)
    return got


def test_encoding_pauses_between_events_for_the_training_thread(sink: FrameSink) -> None:
    """The hook thread's GIL slices (diag.hook.gil_share): the sender offers a pause between
    every two events it encodes, and every event still arrives, in order."""
    ticks: list[int] = []
    sender = FrameSender(sink.path, sender=SOURCE, max_backlog=10_000, reconnect_interval_s=0.01,
                         tick=lambda: ticks.append(1))  # fmt: skip
    ev = Events()
    sender.add(ev.step(i) for i in range(250))
    sender.flush()
    sender.close()
    assert len(ticks) == 250
    assert [e.step for e in sink.close()] == list(range(250))


def _rows(first_seq: int, n: int, **odd: dict[str, Any]) -> EventRows:
    """``n`` collectives of one harvest as the hook hands them over (one column block); ``odd``
    maps a row's index (as a string) to payload fields that replace its own."""
    env = {"ts_ns": 1, "host": "n0", "rank": 0, "local_rank": 0, "job_id": "", "source": SOURCE}
    payloads = [
        {"op": "all_reduce", "pg_name": "0", "pg_size": 4, "seq_id": i, "num_bytes": 64,
         "enqueue_ns": 100 + i, "start_ns": None if i % 2 else 100 + i, "state": "completed"}
        | odd.get(str(i), {})
        for i in range(n)
    ]  # fmt: skip
    return EventRows("collective", env, list(range(first_seq, first_seq + n)), [3] * n, payloads)


def test_a_block_of_rows_arrives_as_its_events_and_a_bad_row_costs_only_itself(
    sink: FrameSink,
) -> None:
    rows = _rows(0, 6, **{"2": {"pg_name": "pg \ud800"}, "4": {"num_bytes": 2**64}})
    sender = FrameSender(sink.path, sender=SOURCE, max_backlog=100, reconnect_interval_s=0.01)
    after = Events()
    after.seq = 6
    sender.add_rows(rows)
    sender.add([after.step(3)])
    assert sender.backlog == 7
    sender.flush()
    sender.close()
    got = sorted(sink.close(), key=lambda e: e.seq)
    colls = of_kind(got, schema.CollectiveEvent)
    # the block did not encode as one (a lone surrogate, a value beyond int64): event by event,
    # the text escaped and the one bad row lost, counted
    assert [c.seq for c in colls] == [0, 1, 2, 3, 5]
    assert colls[2].pg_name == "pg \\ud800" and colls[0].pg_name == "0"
    assert [c.start_ns for c in colls] == [100, None, 102, None, None]
    assert [type(e).kind for e in got][-1] == "step"
    assert (sender.num_sent, sender.dropped.unencodable, sender.num_dropped) == (6, 1, 1)
    assert "dropped a collective event (unencodable" in sender.last_error
    # a block that encodes is what its events decode to, optional fields absent where None
    good = _rows(10, 4)
    assert [c.start_ns for c in good.events()] == [100, None, 102, None]


def test_a_block_larger_than_a_frame_is_halved_and_arrives_whole(sink: FrameSink) -> None:
    rows = _rows(0, 100)
    sender = FrameSender(sink.path, sender=SOURCE, max_backlog=1000, reconnect_interval_s=0.01,
                         max_frame_bytes=2000)  # fmt: skip
    sender.add_rows(rows)
    sender.flush()
    sender.close()
    got = sink.close()
    assert sorted(e.seq for e in got) == list(range(100)) and got == rows.events()
    assert sender.num_sent == 100 and sender.num_dropped == 0 and sender.backlog == 0


def test_the_backlog_bound_counts_a_blocks_rows_and_drops_the_oldest(tmp_path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="dh"))
    sender = FrameSender(
        str(short / "d.sock"), sender=SOURCE, max_backlog=10, reconnect_interval_s=0.0
    )
    ev = Events()
    ev.seq = 8
    sender.add_rows(_rows(0, 8))
    sender.add([ev.step(i) for i in range(5)])  # 13 events for 10 places: rows 0-2 go
    sender.flush()  # nothing listens
    assert sender.backlog == 10 and sender.dropped.undelivered == 3
    got = _flush_once_listened(sender, short)
    assert sorted(e.seq for e in got) == list(range(3, 13))
    assert sender.num_sent == 10 and sender.backlog == 0
