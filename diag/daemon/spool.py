"""The daemon's on-disk spool: every batch is written here before it is sent, and stays until acked.

Layout of ``spool_dir``::

    seg-00000000000000000007.spool   segment files, appended in order, rolled at ``segment_bytes``
    cursor                           "<segment> <offset>": the first byte not yet acknowledged,
                                     replaced atomically (write + rename) after every ack
    lock                             flock'ed by the daemon that owns the directory
    seg-*.spool.corrupt              a damaged segment moved aside (its intact prefix is kept)

A record is ``length (4 bytes, big-endian) | crc32 of the payload (4 bytes) | payload``; the payload
is one serialized ``EventBatch``. Records are read back in the order they were appended, so a
daemon restarted on the same directory replays what the analyzer never acknowledged, in order.
Delivery is at-least-once: an ack lost in a crash replays a batch the analyzer then drops as a
duplicate by ``(source, seq)``.

The spool is bounded by ``max_bytes`` of unacknowledged records; beyond it the oldest are dropped,
counted (:attr:`Spool.num_dropped`) and logged.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from diag.errors import ConfigError
from diag.fsutil import atomic_write

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")
#: A record larger than this is damage, not data (the analyzer takes at most 64 MiB messages).
MAX_RECORD_BYTES = 64 * 1024 * 1024
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
_PREFIX, _SUFFIX = "seg-", ".spool"


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One unacknowledged batch: bytes ``offset`` to ``end`` of segment number ``segment``."""

    segment: int
    offset: int
    end: int
    payload: bytes


def _segment_name(index: int) -> str:
    return f"{_PREFIX}{index:020d}{_SUFFIX}"


def _scan(data: bytes, start: int) -> tuple[int, int, str]:
    """Walk the records of a segment from ``start``: (end of the intact prefix, records, damage)."""
    pos, count = start, 0
    while pos < len(data):
        if len(data) - pos < _HEADER.size:
            return pos, count, "truncated record header"
        size, crc = _HEADER.unpack_from(data, pos)
        if size > MAX_RECORD_BYTES:
            return pos, count, f"record length {size} is implausible"
        body = pos + _HEADER.size
        if len(data) < body + size:
            return pos, count, f"truncated record ({len(data) - body} of {size} bytes)"
        if zlib.crc32(data[body : body + size]) != crc:
            return pos, count, "checksum mismatch"
        pos, count = body + size, count + 1
    return pos, count, ""


class Spool:
    """A bounded, crash-safe FIFO of batches on disk. Thread-safe (one appender, one sender)."""

    def __init__(
        self,
        directory: str | Path,
        *,
        max_bytes: int = 1024 * 1024 * 1024,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        fsync: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self._fsync = fsync
        self._lock = threading.Lock()
        self.num_dropped = 0  # records dropped because the spool was over max_bytes
        self.num_corrupt_segments = 0  # damaged segments moved aside
        self.num_replayed = 0  # records found on disk at start-up, left by a previous daemon
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.directory / "lock", "a+b")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise ConfigError(
                f"spool directory {self.directory} is used by another daemon"
            ) from None
        self._segments: list[int] = []  # live segment indices, ascending; the last is written
        self._sizes: dict[int, int] = {}
        self._read = (0, 0)
        self.pending_bytes = 0  # bytes of unacknowledged records
        self.pending_records = 0
        cursor_seg = self._recover()
        # Always a fresh segment: never append after a previous daemon's possibly torn tail.
        self._open_segment(max([cursor_seg, *self._segments]) + 1)
        if len(self._segments) == 1:
            self._read = (self._write_index, 0)
        self._save_cursor()
        if self.pending_records:
            self.num_replayed = self.pending_records
            log.info(
                "spool %s: %d batch(es), %d bytes left by a previous daemon; replaying them",
                self.directory,
                self.pending_records,
                self.pending_bytes,
            )

    # -- start-up ---------------------------------------------------------------------------------

    def _recover(self) -> int:
        """Read the cursor, delete acknowledged segments, validate the rest, quarantine damage.

        Returns the cursor's segment index (new segments are numbered above it).
        """
        cursor_seg, cursor_off = self._load_cursor()
        found = sorted(
            int(p.name[len(_PREFIX) : -len(_SUFFIX)])
            for p in self.directory.glob(f"{_PREFIX}*{_SUFFIX}")
            if p.name[len(_PREFIX) : -len(_SUFFIX)].isdigit()
        )
        for index in found:
            path = self.directory / _segment_name(index)
            if index < cursor_seg:
                path.unlink(missing_ok=True)
                continue
            start = cursor_off if index == cursor_seg else 0
            data = path.read_bytes()
            start = min(start, len(data))
            end, count, damage = _scan(data, start)
            if damage:
                self._quarantine(path, data, end, count, damage)
            if end <= start:
                path.unlink(missing_ok=True)
                continue
            if not self._segments:
                self._read = (index, start)
            self._segments.append(index)
            self._sizes[index] = end
            self.pending_bytes += end - start
            self.pending_records += count
        return cursor_seg

    def _load_cursor(self) -> tuple[int, int]:
        path = self.directory / "cursor"
        try:
            seg, off = path.read_text().split()
            return int(seg), int(off)
        except FileNotFoundError:
            return 0, 0
        except (OSError, ValueError):
            log.warning("spool cursor %s is unreadable; replaying the whole spool", path)
            return 0, 0

    def _quarantine(self, path: Path, data: bytes, end: int, count: int, damage: str) -> None:
        """Move a damaged segment aside as ``*.corrupt`` and keep its intact prefix in its place."""
        self.num_corrupt_segments += 1
        aside = path.with_name(path.name + ".corrupt")
        log.error(
            "spool segment %s is damaged at offset %d (%s): kept %d intact record(s) before it, "
            "moved the file aside to %s",
            path,
            end,
            damage,
            count,
            aside.name,
        )
        os.replace(path, aside)
        if end > 0:
            atomic_write(path, data[:end])

    # -- writing ----------------------------------------------------------------------------------

    def _open_segment(self, index: int) -> None:
        self._write_index = index
        self._write_file = open(self.directory / _segment_name(index), "ab")  # noqa: SIM115
        self._segments.append(index)
        self._sizes[index] = self._write_file.tell()

    def append(self, payload: bytes) -> None:
        """Add a batch at the end (durably if ``fsync``); drop the oldest beyond ``max_bytes``."""
        if len(payload) > MAX_RECORD_BYTES:
            raise ValueError(
                f"batch of {len(payload)} bytes exceeds the spool's {MAX_RECORD_BYTES}"
            )
        record = _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        with self._lock:
            size = self._sizes[self._write_index]
            if size > 0 and size + len(record) > self.segment_bytes:
                self._write_file.close()
                self._open_segment(self._write_index + 1)
            self._write_file.write(record)
            self._write_file.flush()
            if self._fsync:
                os.fsync(self._write_file.fileno())
            self._sizes[self._write_index] += len(record)
            self.pending_bytes += len(record)
            self.pending_records += 1
            self._enforce_bound()

    def _enforce_bound(self) -> None:
        dropped = 0
        while self.pending_bytes > self.max_bytes and self.pending_records > 1:
            record = self._peek_locked()
            if record is None:
                break
            self._advance(record)
            dropped += 1
        if dropped:
            self.num_dropped += dropped
            log.warning(
                "spool %s is over its bound of %d bytes: dropped the %d oldest batch(es) "
                "(%d dropped so far)",
                self.directory,
                self.max_bytes,
                dropped,
                self.num_dropped,
            )
            self._save_cursor()

    # -- reading ----------------------------------------------------------------------------------

    def peek(self) -> SpoolRecord | None:
        """The oldest unacknowledged batch, or ``None`` when everything was acknowledged."""
        with self._lock:
            return self._peek_locked()

    def _peek_locked(self) -> SpoolRecord | None:
        while True:
            seg, off = self._read
            size = self._sizes.get(seg, 0)
            if off >= size:
                if seg == self._write_index:
                    return None
                self._retire(seg)
                continue
            path = self.directory / _segment_name(seg)
            with open(path, "rb") as f:
                f.seek(off)
                header = f.read(_HEADER.size)
                length, crc = _HEADER.unpack(header) if len(header) == _HEADER.size else (0, 0)
                payload = f.read(length) if len(header) == _HEADER.size else b""
            if (
                len(header) == _HEADER.size
                and len(payload) == length
                and zlib.crc32(payload) == crc
            ):
                return SpoolRecord(seg, off, off + _HEADER.size + length, payload)
            self._damaged_while_running(seg, off)

    def _damaged_while_running(self, seg: int, off: int) -> None:
        """A record that was valid when written no longer reads back: skip the rest of it."""
        path = self.directory / _segment_name(seg)
        self.num_corrupt_segments += 1
        lost = self._sizes[seg] - off
        log.error(
            "spool segment %s is damaged at offset %d: skipping its last %d bytes", path, off, lost
        )
        self.pending_bytes -= lost
        self.pending_records = max(self.pending_records - 1, 0)
        if seg == self._write_index:
            self._read = (seg, self._sizes[seg])
        else:
            self._retire(seg)

    def _retire(self, seg: int) -> None:
        """Every record of a finished segment is acknowledged or dropped: delete it."""
        (self.directory / _segment_name(seg)).unlink(missing_ok=True)
        self._segments.remove(seg)
        del self._sizes[seg]
        self._read = (self._segments[0], 0)
        self._save_cursor()

    def ack(self, record: SpoolRecord) -> None:
        """The analyzer acknowledged ``record``: advance the cursor past it (if not already)."""
        with self._lock:
            if (record.segment, record.offset) == self._read:
                self._advance(record)
                self._save_cursor()

    def _advance(self, record: SpoolRecord) -> None:
        self._read = (record.segment, record.end)
        self.pending_bytes -= record.end - record.offset
        self.pending_records -= 1

    def _save_cursor(self) -> None:
        # Not fsynced: a stale cursor only replays batches the analyzer already holds (dropped).
        atomic_write(self.directory / "cursor", f"{self._read[0]} {self._read[1]}\n")

    def close(self) -> None:
        """Close files, release the directory; unacknowledged batches stay for the next daemon."""
        with self._lock:
            self._write_file.close()
            self._save_cursor()
            self._lock_file.close()
