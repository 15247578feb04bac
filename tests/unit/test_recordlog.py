"""diag.recordlog: records that check themselves, and a reader that resynchronizes after damage
(the spool's and the WAL's own tests: tests/unit/daemon/test_spool.py, tests/unit/analyzer/)."""

from __future__ import annotations

import errno
import fcntl
import os
import random

import pytest

from diag.recordlog import HEADER_BYTES, RecordFormat, describe, write_all

FORMAT = RecordFormat(b"\xd1TS1", 1 << 20)


def _file(sizes: list[int]) -> tuple[bytes, list[bytes], list[int]]:
    """Records of the given payload sizes: the bytes, the payloads, each record's offset."""
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    offsets, data = [], b""
    for p in payloads:
        offsets.append(len(data))
        data += FORMAT.encode(p)
    return data, payloads, offsets


def test_every_single_bit_flip_costs_the_record_it_hits_only() -> None:
    rng = random.Random(7)
    sizes = [0, 1, 17, 300, 5, 64, 1000, 12, 2]
    data, payloads, offsets = _file(sizes)
    ends = [*offsets[1:], len(data)]
    for _ in range(400):
        bit = rng.randrange(len(data) * 8)
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        hit = max(i for i, off in enumerate(offsets) if off <= bit // 8)
        scan = FORMAT.scan(bytes(damaged))
        got = [FORMAT.payload(bytes(damaged), span) for span in scan.spans]
        assert got == [p for i, p in enumerate(payloads) if i != hit], (bit, hit)
        (d,) = scan.damage
        assert (d.offset, d.end) == (offsets[hit], ends[hit])


def test_two_damaged_records_and_a_torn_tail_are_described_in_one_line() -> None:
    data, payloads, offsets = _file([40] * 6)
    damaged = bytearray(data[:-10])
    damaged[offsets[1] + HEADER_BYTES + 3] ^= 0x01  # a payload
    damaged[offsets[3] + 5] ^= 0x80  # a length: now implausible
    scan = FORMAT.scan(bytes(damaged))
    assert [FORMAT.payload(bytes(damaged), s) for s in scan.spans] == [
        payloads[0],
        payloads[2],
        payloads[4],
    ]
    line = describe(scan)
    assert "\n" not in line
    assert "skipped 104 damaged byte(s) in 2 place(s) (the first at offset 52: checksum" in line
    assert line.endswith(
        "a torn record at the end (42 bytes at 260: truncated record (30 of 40 bytes))"
    )


def test_a_magic_inside_a_payload_is_not_taken_for_a_record() -> None:
    inner = FORMAT.encode(b"inner")
    data, _, offsets = _file([10])
    data += FORMAT.encode(b"x" * 7 + inner + b"y")
    damaged = bytearray(data)
    damaged[offsets[0] + 4] ^= 0x01  # resync lands on the second record, not inside it
    scan = FORMAT.scan(bytes(damaged))
    assert [FORMAT.payload(bytes(damaged), s) for s in scan.spans] == [b"x" * 7 + inner + b"y"]


def test_bounds() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        RecordFormat(b"\xd1TS1", 10).encode(b"x" * 11)
    with pytest.raises(ValueError, match="0xD1"):
        RecordFormat(b"WAL1", 10)


def test_write_all_raises_the_error_after_a_short_write() -> None:
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
        size = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ: the pipe takes this many bytes, then EAGAIN
        with pytest.raises(OSError) as exc:
            write_all(w, b"x" * (size + 100))
        assert exc.value.errno == errno.EAGAIN
        assert len(os.read(r, size + 100)) == size  # the short write happened first
    finally:
        os.close(r)
        os.close(w)
