"""The daemon's spool: order, acks, restarts, damage (one damaged record costs that record only),
segments of the format before record magics, and its bound (a writer killed mid-write, and a disk
that refuses appends: tests/integration/test_spool_crash.py)."""

from __future__ import annotations

import logging
import os
import struct
import zlib
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


RECORD = 112  # 12-byte record header + 100-byte payload


def _flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def test_bit_flip_in_a_payload_costs_that_record_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, segment_bytes=1000, fsync=False)
    for i in range(27):
        spool.append(payload(i))
    spool.close()
    first, second, *_ = segments(tmp_path)
    per_segment = first.stat().st_size // RECORD
    _flip(second, RECORD * 2 + 50)  # the third record of the second segment
    with caplog.at_level(logging.ERROR, logger="diag.daemon.spool"):
        spool = Spool(tmp_path, segment_bytes=1000, fsync=False)
    (line,) = [r.getMessage() for r in caplog.records]
    assert str(second) in line and f"offset {RECORD * 2}: checksum mismatch" in line
    assert f"kept its {per_segment - 1} intact record(s)" in line
    assert (tmp_path / (second.name + ".corrupt")).exists()
    assert spool.num_replayed == 26
    assert drain(spool) == [payload(i) for i in range(27) if i != per_segment + 2]


@pytest.mark.parametrize("bit", [0, 3, 8, 20, 31])  # 4 bytes big-endian: bit 31 is the top one
def test_bit_flip_in_a_length_costs_that_record_only(tmp_path: Path, bit: int) -> None:
    spool = Spool(tmp_path, segment_bytes=100_000, fsync=False)
    for i in range(9):
        spool.append(payload(i))
    spool.close()
    (seg,) = segments(tmp_path)
    length_at = RECORD * 4 + 4  # magic (4 bytes), then the length of record 4
    _flip(seg, length_at + 3 - bit // 8, 1 << (bit % 8))
    spool = Spool(tmp_path, segment_bytes=100_000, fsync=False)
    assert spool.num_corrupt_segments == 1
    assert drain(spool) == [payload(i) for i in range(9) if i != 4]


def test_damaged_segment_that_cannot_be_set_aside_is_read_in_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, fsync=False)
    for i in range(5):
        spool.append(payload(i))
    spool.close()
    (seg,) = segments(tmp_path)
    _flip(seg, RECORD + 40)
    (tmp_path / (seg.name + ".corrupt")).mkdir()  # the name it would be kept under is taken
    with caplog.at_level(logging.ERROR, logger="diag.daemon.spool"):
        spool = Spool(tmp_path, fsync=False)
        assert spool.num_replayed == 4
        assert drain(spool) == [payload(i) for i in range(5) if i != 1]
    first, second = caplog.messages
    assert "could not be set aside" in first and "read in place" in first
    assert f"offset {RECORD} (checksum mismatch)" in second


def test_torn_last_record_keeps_every_whole_one(tmp_path: Path) -> None:
    spool = Spool(tmp_path, fsync=False)
    for i in range(5):
        spool.append(payload(i))
    spool.close()
    (seg,) = segments(tmp_path)
    seg.write_bytes(seg.read_bytes()[:-40])  # the last append torn by a crash
    spool = Spool(tmp_path, fsync=False)
    assert spool.num_replayed == 4 and spool.num_corrupt_segments == 1
    spool.append(payload(5))
    assert drain(spool) == [payload(i) for i in range(6) if i != 4]


def test_damage_in_a_record_while_running_costs_that_record_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, segment_bytes=100_000, fsync=False)
    for i in range(6):
        spool.append(payload(i))
    (seg,) = segments(tmp_path)
    _flip(seg, RECORD * 2 + 30)  # under the running daemon
    with caplog.at_level(logging.ERROR, logger="diag.daemon.spool"):
        got = drain(spool)
    assert got == [payload(i) for i in range(6) if i != 2]
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"offset {RECORD * 2} (checksum mismatch)" in line and "next intact record" in line
    assert spool.pending_records == 0 and spool.pending_bytes == 0
    spool.append(payload(6))
    assert drain(spool) == [payload(6)]


def _legacy_record(data: bytes) -> bytes:
    return struct.pack(">II", len(data), zlib.crc32(data)) + data


def test_segments_of_the_format_before_the_magic_are_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = tmp_path / "seg-00000000000000000003.spool"
    old.write_bytes(b"".join(_legacy_record(payload(i)) for i in range(4)))
    (tmp_path / "cursor").write_text(f"3 {108}\n")  # the first one was acknowledged
    with caplog.at_level(logging.INFO, logger="diag.daemon.spool"):
        spool = Spool(tmp_path, fsync=False)
    assert "format before record magics" in caplog.text
    assert spool.num_replayed == 3 and spool.num_corrupt_segments == 0
    spool.append(payload(4))
    assert drain(spool) == [payload(i) for i in range(1, 5)]


def test_damaged_segment_of_the_old_format_keeps_its_prefix(tmp_path: Path) -> None:
    old = tmp_path / "seg-00000000000000000000.spool"
    data = bytearray(b"".join(_legacy_record(payload(i)) for i in range(4)))
    data[108 * 2 + 50] ^= 0xFF
    old.write_bytes(bytes(data))
    spool = Spool(tmp_path, fsync=False)
    assert spool.num_corrupt_segments == 1 and (tmp_path / (old.name + ".corrupt")).exists()
    assert drain(spool) == [payload(0), payload(1)]  # no magic to resynchronize on


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


def test_segment_deleted_while_running_is_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=250, fsync=False)
    for i in range(6):
        spool.append(payload(i))
    segments(tmp_path)[1].unlink()  # records 2 and 3
    assert drain(spool) == [payload(i) for i in (0, 1, 4, 5)]
    assert spool.num_corrupt_segments == 1 and spool.pending_records == 0
