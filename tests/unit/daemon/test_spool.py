"""The daemon's spool: order, acks, restarts, damage and its bound (a writer killed mid-write:
tests/integration/test_spool_crash.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from diag.daemon.spool import Spool
from diag.errors import ConfigError
from tests.fakes.spools import drain, payload


def segments(d: Path) -> list[Path]:
    return sorted(d.glob("seg-*.spool"))


def test_fifo_with_ack_and_segments_rolled_and_deleted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=1000, fsync=False)
    for i in range(25):
        spool.append(payload(i))
    assert spool.pending_records == 25
    assert len(segments(tmp_path)) >= 3
    rec = spool.peek()
    assert rec is not None and rec.payload == payload(0)
    assert spool.peek() == rec  # peek does not consume
    assert drain(spool) == [payload(i) for i in range(25)]
    assert spool.pending_records == 0 and spool.pending_bytes == 0
    assert len(segments(tmp_path)) == 1  # only the segment being written is left
    spool.close()


def test_reopen_replays_only_unacknowledged_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=1000, fsync=False)
    for i in range(20):
        spool.append(payload(i))
    for _ in range(7):
        rec = spool.peek()
        assert rec is not None
        spool.ack(rec)
    spool.close()
    again = Spool(tmp_path, segment_bytes=1000, fsync=False)
    assert again.num_replayed == 13
    again.append(payload(99))  # new batches go after the replayed ones
    assert drain(again) == [payload(i) for i in range(7, 20)] + [payload(99)]
    again.close()
    assert Spool(tmp_path).pending_records == 0


def test_ack_of_a_stale_record_is_ignored(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync=False)
    spool.append(payload(0))
    spool.append(payload(1))
    rec = spool.peek()
    assert rec is not None
    spool.ack(rec)
    spool.ack(rec)  # a second ack must not skip batch 1
    assert drain(spool) == [payload(1)]


def test_second_daemon_on_the_same_spool_is_refused(tmp_path: Path) -> None:
    first = Spool(tmp_path)
    with pytest.raises(ConfigError, match="used by another daemon"):
        Spool(tmp_path)
    first.close()
    Spool(tmp_path).close()


def test_bound_drops_the_oldest_and_counts_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, max_bytes=1000, segment_bytes=300, fsync=False)
    with caplog.at_level(logging.WARNING, logger="diag.daemon.spool"):
        for i in range(30):
            spool.append(payload(i))
    assert spool.pending_bytes <= 1000
    assert spool.num_dropped == 30 - spool.pending_records
    assert "dropped the" in caplog.text
    assert drain(spool) == [payload(i) for i in range(spool.num_dropped, 30)]


def test_corrupt_middle_segment_keeps_prefix_and_later_segments(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, segment_bytes=1000, fsync=False)
    for i in range(27):
        spool.append(payload(i))
    spool.close()
    first, second, *_ = segments(tmp_path)
    per_segment = first.stat().st_size // 108  # 8-byte header + 100-byte payload
    data = bytearray(second.read_bytes())
    data[108 * 2 + 50] ^= 0xFF  # damage the third record of the second segment
    second.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR, logger="diag.daemon.spool"):
        spool = Spool(tmp_path, segment_bytes=1000, fsync=False)
    (line,) = [r.getMessage() for r in caplog.records]
    assert str(second) in line and "offset 216" in line and "checksum mismatch" in line
    assert "kept 2 intact record(s)" in line
    assert (tmp_path / (second.name + ".corrupt")).exists()
    lost = set(range(per_segment + 2, 2 * per_segment))
    assert drain(spool) == [payload(i) for i in range(27) if i not in lost]


def test_unreadable_cursor_replays_everything(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync=False)
    spool.append(payload(0))
    spool.close()
    (tmp_path / "cursor").write_text("garbage")
    assert drain(Spool(tmp_path, fsync=False)) == [payload(0)]


def test_damage_found_while_running_is_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=250, fsync=False)
    for i in range(6):
        spool.append(payload(i))
    first = segments(tmp_path)[0]
    with open(first, "r+b") as f:  # someone truncates a segment under the running daemon
        f.truncate(150)
    got = drain(spool)
    assert got[0] == payload(0) and payload(1) not in got and got[-1] == payload(5)
    assert spool.num_corrupt_segments == 1
    assert os.path.exists(tmp_path / "cursor")
