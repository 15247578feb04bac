"""The ingest WAL's files: a torn last frame, a flipped bit in a payload or in a length (each costs
that frame only), files of the format before checksums, and damaged files kept aside (the
analyzer's recovery over them: test_core.py; a disk that refuses appends:
tests/integration/test_wal_crash.py)."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from diag.analyzer.wal import WalWriter, keep_damaged, read_wal, wal_paths
from tests.fakes.spools import payload

FRAME = 112  # 12-byte record header + 100-byte payload


def _wal(tmp_path: Path, n: int) -> Path:
    writer = WalWriter(tmp_path)
    for i in range(n):
        writer.append(payload(i))
    writer.close()
    (path,) = wal_paths(tmp_path)
    return path


def _flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def test_intact_file_reads_back_whole(tmp_path: Path) -> None:
    contents = read_wal(_wal(tmp_path, 5))
    assert contents.payloads == tuple(payload(i) for i in range(5))
    assert contents.num_trailing_bytes == 0 and contents.damage == "" and not contents.legacy


def test_torn_last_frame_keeps_every_whole_one(tmp_path: Path) -> None:
    path = _wal(tmp_path, 5)
    path.write_bytes(path.read_bytes()[:-40])
    contents = read_wal(path)
    assert contents.payloads == tuple(payload(i) for i in range(4))
    assert contents.num_trailing_bytes == FRAME - 40 and contents.num_skipped_bytes == 0
    assert contents.damage.startswith("a torn record at the end (72 bytes at 448: truncated")


def test_bit_flip_in_a_payload_costs_that_frame_only(tmp_path: Path) -> None:
    path = _wal(tmp_path, 7)
    _flip(path, FRAME * 3 + 60)
    contents = read_wal(path)
    assert contents.payloads == tuple(payload(i) for i in range(7) if i != 3)
    assert contents.num_skipped_bytes == FRAME and contents.num_trailing_bytes == 0
    assert "offset 336: checksum mismatch" in contents.damage


@pytest.mark.parametrize("bit", [0, 5, 9, 17, 24, 30, 31])  # 4 bytes big-endian: 31 is the top
def test_bit_flip_in_a_length_costs_that_frame_only(tmp_path: Path, bit: int) -> None:
    path = _wal(tmp_path, 7)
    _flip(path, FRAME * 3 + 4 + 3 - bit // 8, 1 << (bit % 8))  # after the 4-byte magic
    contents = read_wal(path)
    assert contents.payloads == tuple(payload(i) for i in range(7) if i != 3)
    assert contents.damage and contents.num_trailing_bytes == 0


def test_bit_flips_in_the_last_frame_and_in_the_first(tmp_path: Path) -> None:
    path = _wal(tmp_path, 4)
    _flip(path, 1)  # the first frame's magic
    _flip(path, FRAME * 3 + 6, 0x01)  # the last frame's length + 256: past the end of the file
    contents = read_wal(path)
    assert contents.payloads == (payload(1), payload(2))
    assert contents.num_skipped_bytes == FRAME and contents.num_trailing_bytes == FRAME


def test_files_of_the_format_before_checksums_are_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "000004.wal"
    frames = [struct.pack(">I", len(payload(i))) + payload(i) for i in range(3)]
    path.write_bytes(b"".join(frames) + frames[0][:30])  # and a torn last frame
    with caplog.at_level(logging.INFO, logger="diag.analyzer.wal"):
        contents = read_wal(path)
    assert contents.legacy and contents.payloads == tuple(payload(i) for i in range(3))
    assert contents.num_trailing_bytes == 30 and "torn" in contents.damage
    (line,) = caplog.messages
    assert "format before checksums" in line and "3 frame(s)" in line
    writer = WalWriter(tmp_path)
    writer.append(payload(9))
    assert writer.current == tmp_path / "000005.wal"  # numbered above the old file
    writer.close()


def test_damaged_file_is_kept_aside_and_survives_the_delete(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _wal(tmp_path, 3)
    _flip(path, FRAME + 20)
    damaged = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="diag.analyzer.wal"):
        aside = keep_damaged(read_wal(path))
        assert keep_damaged(read_wal(path)) == aside  # a second start keeps the same one
    assert aside == tmp_path / "000000.wal.damaged"
    line = caplog.messages[0]
    assert str(path) in line and "checksum mismatch" in line and "000000.wal.damaged" in line
    assert "\n" not in line and "2 intact frame(s)" in line
    assert WalWriter(tmp_path).delete_closed() == 1
    assert wal_paths(tmp_path) == [] and aside.read_bytes() == damaged
    writer = WalWriter(tmp_path)
    writer.append(payload(9))
    assert writer.current == tmp_path / "000001.wal"  # never reuses a number kept aside
    writer.close()
