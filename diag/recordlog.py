"""Checksummed, self-synchronizing records for the append-only files diag keeps on disk: the
daemon's spool and the analyzer's write-ahead log.

A record is::

    magic (4 bytes) | payload length (4 bytes, big-endian) | crc32 (4 bytes, big-endian) | payload

The crc32 (zlib's) covers the magic, the length and the payload, so one flipped bit anywhere in a
record, its length included, fails that record's check. A reader that meets a record that fails
looks for the next magic whose record checks out and goes on from there: damage costs the
damaged record only, never the ones after it. Lengths are bounded (``max_payload``), so a garbled
length can neither make a reader allocate gigabytes nor hide the records behind it.

Each kind of file has its own magic. All of them start with the byte 0xD1: read as a big-endian
length, a magic (even with any one of its bits flipped) is above 1 GiB, so a file of this format
is never mistaken for one of the earlier length-prefixed formats (see ``diag.daemon.spool`` and
``diag.analyzer.wal``), whose lengths are at most 1 GiB.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Protocol

_HEAD = struct.Struct(">4sI")  # magic, payload length: the part the crc is chained over first
_CRC = struct.Struct(">I")
HEADER_BYTES = _HEAD.size + _CRC.size


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes ``offset`` to ``end`` of a file hold no intact record; ``reason`` says what failed at
    ``offset`` (``end`` is the next intact record, or the end of the data)."""

    offset: int
    end: int
    reason: str

    @property
    def num_bytes(self) -> int:
        return self.end - self.offset


@dataclass(frozen=True, slots=True)
class Scan:
    """What a walk over a file's bytes found: the intact records as ``(offset, end)`` spans, in
    order, and the damaged stretches between or after them."""

    spans: tuple[tuple[int, int], ...]
    damage: tuple[Damage, ...]
    size: int

    @property
    def num_damaged_bytes(self) -> int:
        return sum(d.num_bytes for d in self.damage)

    @property
    def torn_tail(self) -> Damage | None:
        """The damage that runs to the end of the data (a crash mid-append looks like this)."""
        if self.damage and self.damage[-1].end == self.size:
            return self.damage[-1]
        return None


class Framing(Protocol):
    """A record format a reader can walk: this module's, or a file kind's earlier one."""

    header_bytes: int

    def record_size(self, header: bytes) -> int:
        """The whole record's size given its header (bounded; ``header_bytes`` if it is bad)."""
        ...

    def check(self, data: bytes | memoryview, pos: int) -> int | str:
        """The end of the intact record at ``pos``, or why there is none there."""
        ...

    def scan(self, data: bytes, start: int = 0) -> Scan:
        """Every record from ``start``: intact spans and damaged stretches."""
        ...

    def payload(self, data: bytes, span: tuple[int, int]) -> bytes:
        """The payload of the intact record at ``span``."""
        ...


class RecordFormat:
    """The records of one kind of file (its ``magic``), with payloads up to ``max_payload``."""

    def __init__(self, magic: bytes, max_payload: int) -> None:
        if len(magic) != 4 or magic[0] != 0xD1:
            raise ValueError(f"a record magic is 4 bytes starting with 0xD1, not {magic!r}")
        self.magic = magic
        self.max_payload = max_payload
        self.header_bytes = HEADER_BYTES

    def record_size(self, header: bytes) -> int:
        magic, size = _HEAD.unpack_from(header)
        if magic != self.magic or size > self.max_payload:
            return HEADER_BYTES
        return HEADER_BYTES + size

    def encode(self, payload: bytes) -> bytes:
        """One record holding ``payload``."""
        if len(payload) > self.max_payload:
            raise ValueError(f"a record of {len(payload)} bytes exceeds {self.max_payload}")
        head = _HEAD.pack(self.magic, len(payload))
        return b"".join((head, _CRC.pack(zlib.crc32(payload, zlib.crc32(head))), payload))

    def check(self, data: bytes | memoryview, pos: int) -> int | str:
        """The end of the intact record at ``pos``, or why there is none there."""
        view = data if isinstance(data, memoryview) else memoryview(data)
        left = len(view) - pos
        if left < HEADER_BYTES:
            return f"truncated record header ({left} of {HEADER_BYTES} bytes)"
        magic, size = _HEAD.unpack_from(view, pos)
        if magic != self.magic:
            return "no record header"
        if size > self.max_payload:
            return f"record length {size} is implausible"
        body = pos + HEADER_BYTES
        if len(view) < body + size:
            return f"truncated record ({len(view) - body} of {size} bytes)"
        (crc,) = _CRC.unpack_from(view, pos + _HEAD.size)
        if zlib.crc32(view[body : body + size], zlib.crc32(view[pos : pos + _HEAD.size])) != crc:
            return "checksum mismatch"
        return body + size

    def payload(self, data: bytes, span: tuple[int, int]) -> bytes:
        """The payload of the intact record at ``span`` (from :meth:`scan`)."""
        return data[span[0] + HEADER_BYTES : span[1]]

    def resync(self, data: bytes, pos: int) -> int:
        """The first intact record after ``pos``, or ``len(data)``."""
        at = data.find(self.magic, pos + 1)
        while at != -1:
            if isinstance(self.check(data, at), int):
                return at
            at = data.find(self.magic, at + 1)
        return len(data)

    def scan(self, data: bytes, start: int = 0) -> Scan:
        """Walk the records from ``start``, skipping each damaged stretch to the next intact
        record."""
        spans: list[tuple[int, int]] = []
        damage: list[Damage] = []
        view = memoryview(data)
        pos = start
        while pos < len(data):
            end = self.check(view, pos)
            if isinstance(end, int):
                spans.append((pos, end))
                pos = end
                continue
            nxt = self.resync(data, pos)
            damage.append(Damage(pos, nxt, end))
            pos = nxt
        return Scan(tuple(spans), tuple(damage), len(data))


def describe(scan: Scan) -> str:
    """The damage a scan found, in one line ("" when there is none)."""
    tail = scan.torn_tail
    middle = [d for d in scan.damage if d is not tail]
    parts = []
    if middle:
        first = middle[0]
        parts.append(
            f"skipped {sum(d.num_bytes for d in middle)} damaged byte(s) in {len(middle)} "
            f"place(s) (the first at offset {first.offset}: {first.reason})"
        )
    if tail is not None:
        what = "a torn record" if tail.reason.startswith("truncated") else "damage"
        parts.append(f"{what} at the end ({tail.num_bytes} bytes at {tail.offset}: {tail.reason})")
    return "; ".join(parts)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``: a short write is retried; the error after one is raised
    (``ENOSPC`` if the system wrote nothing and gave no reason)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, "short write", None)
        view = view[n:]
