"""The daemon's on-disk spool: every batch is written here before it is sent, and stays until acked.

Layout of ``spool_dir``::

    seg-00000000000000000007.spool   segment files, appended in order, rolled at ``segment_bytes``
    cursor                           "<segment> <offset>": the first byte not yet acknowledged,
                                     replaced atomically (write + rename) after every ack
    lock                             flock'ed by the daemon that owns the directory
    seg-*.spool.corrupt              a damaged segment as found, moved aside (its intact records
                                     are kept in its place)

A record is ``diag.recordlog``'s, with the magic ``b"\\xd1SP2"``: ``magic | length | crc32 |
payload``, the payload one serialized ``EventBatch``. A damaged record costs that record only: the
reader goes on at the next intact one. Records are read back in the order they were appended, so
a daemon restarted on the same directory replays what the analyzer never acknowledged, in order.
Delivery is at-least-once: an ack lost in a crash replays a batch the analyzer then drops as a
duplicate by ``(source, seq)``.

Segments written before the magic (``length (4 bytes, big-endian) | crc32 of the payload |
payload``) are recognized by their first record and read as such, with the old reader: damage in
one of them still costs the rest of that segment (no magic to resynchronize on), moved aside.

An append the disk refuses (full, ``EFBIG``, ``EIO``, a short write) cuts the segment back to its
last whole record, and the next append goes to a new segment: a failed batch never leaves bytes in
front of later ones. It is counted (:attr:`Spool.num_write_errors`) and raised as the ``OSError``
it is, for the caller to count the batch as lost; appends succeed again once the disk takes them.

The spool is bounded by ``max_bytes`` of unacknowledged records; beyond it the oldest are dropped,
counted (:attr:`Spool.num_dropped`) and logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import struct
import threading
import zlib
from dataclasses import dataclass
from io import FileIO
from pathlib import Path

from diag.errors import ConfigError
from diag.fsutil import atomic_write
from diag.recordlog import Damage, Framing, RecordFormat, Scan, describe, write_all

log = logging.getLogger(__name__)

#: A record larger than this is damage, not data (the analyzer takes at most 64 MiB messages).
MAX_RECORD_BYTES = 64 * 1024 * 1024
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
_PREFIX, _SUFFIX = "seg-", ".spool"
RECORDS = RecordFormat(b"\xd1SP2", MAX_RECORD_BYTES)


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One unacknowledged batch: bytes ``offset`` to ``end`` of segment number ``segment``."""

    segment: int
    offset: int
    end: int
    payload: bytes


class _LegacyRecords:
    """Segments of diag before the record magic: ``length | crc32(payload) | payload``. Read only;
    without a magic a reader cannot resynchronize, so damage ends the segment."""

    _HEADER = struct.Struct(">II")
    header_bytes = _HEADER.size

    def record_size(self, header: bytes) -> int:
        (size, _) = self._HEADER.unpack_from(header)
        return self.header_bytes + size if size <= MAX_RECORD_BYTES else self.header_bytes

    def check(self, data: bytes | memoryview, pos: int) -> int | str:
        view = memoryview(data)
        if len(view) - pos < self.header_bytes:
            return "truncated record header"
        size, crc = self._HEADER.unpack_from(view, pos)
        if size > MAX_RECORD_BYTES:
            return f"record length {size} is implausible"
        body = pos + self.header_bytes
        if len(view) < body + size:
            return f"truncated record ({len(view) - body} of {size} bytes)"
        if zlib.crc32(view[body : body + size]) != crc:
            return "checksum mismatch"
        return body + size

    def scan(self, data: bytes, start: int = 0) -> Scan:
        spans: list[tuple[int, int]] = []
        pos = start
        while pos < len(data):
            end = self.check(data, pos)
            if isinstance(end, str):
                return Scan(tuple(spans), (Damage(pos, len(data), end),), len(data))
            spans.append((pos, end))
            pos = end
        return Scan(tuple(spans), (), len(data))

    def payload(self, data: bytes, span: tuple[int, int]) -> bytes:
        return data[span[0] + self.header_bytes : span[1]]


LEGACY_RECORDS = _LegacyRecords()


def _is_legacy(data: bytes) -> bool:
    """A segment written before the magic: its first record checks out in the old format."""
    return not data.startswith(RECORDS.magic) and isinstance(LEGACY_RECORDS.check(data, 0), int)


def _segment_name(index: int) -> str:
    return f"{_PREFIX}{index:020d}{_SUFFIX}"


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
        self.num_corrupt_segments = 0  # segments in which damage was found (moved aside/skipped)
        self.num_replayed = 0  # records found on disk at start-up, left by a previous daemon
        self.num_write_errors = 0  # appends the disk refused (each batch lost, raised as OSError)
        self._failing = False  # the last append failed: log the next failure only once it works
        self._cursor_error = ""  # the last cursor write error logged (not logged again)
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
        self._legacy: set[int] = set()  # segments in the format before the record magic
        self._read = (0, 0)
        self.pending_bytes = 0  # bytes of unacknowledged records
        self.pending_records = 0
        self._write_file: FileIO | None = None
        cursor_seg = self._recover()
        # Always a fresh segment: never append after a previous daemon's possibly torn tail.
        self._write_index = max([cursor_seg, *self._segments])
        self._open_segment(self._write_index + 1)
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
        legacy = []
        for index in found:
            path = self.directory / _segment_name(index)
            if index < cursor_seg:
                path.unlink(missing_ok=True)
                continue
            start = cursor_off if index == cursor_seg else 0
            data = path.read_bytes()
            start = min(start, len(data))
            framing: Framing = RECORDS
            if _is_legacy(data):
                framing = LEGACY_RECORDS
                self._legacy.add(index)
                legacy.append(path.name)
            scan = framing.scan(data, start)
            count = len(scan.spans)
            end = len(data)
            if scan.damage:
                end = self._quarantine(path, data, start, scan)
            if end <= start:
                path.unlink(missing_ok=True)
                self._legacy.discard(index)
                continue
            if not self._segments:
                self._read = (index, start)
            self._segments.append(index)
            self._sizes[index] = end
            self.pending_bytes += end - start
            self.pending_records += count
        if legacy:
            log.info(
                "spool %s: %d segment(s) in the format before record magics (%s...); read as such",
                self.directory,
                len(legacy),
                legacy[0],
            )
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

    def _quarantine(self, path: Path, data: bytes, start: int, scan: Scan) -> int:
        """Keep a damaged segment as found beside it (``*.corrupt``) and, in its place, its bytes
        before ``start`` (acknowledged: the cursor points past them) and then its intact records.
        Returns the segment's size now: where no copy can be made, the file stays as it is and
        the reader skips its damage when it gets there."""
        self.num_corrupt_segments += 1
        aside = path.with_name(path.name + ".corrupt")
        end = start + sum(b - a for a, b in scan.spans)
        try:
            aside.unlink(missing_ok=True)
            try:
                os.link(path, aside)
            except OSError:  # no hard links here
                shutil.copyfile(path, aside)
            if end > start:
                atomic_write(path, data[:start] + b"".join(data[a:b] for a, b in scan.spans))
        except OSError as exc:
            log.error(
                "spool segment %s is damaged: %s; it could not be set aside (%s): its %d intact "
                "record(s) are read in place",
                path,
                describe(scan),
                exc,
                len(scan.spans),
            )
            return len(data)
        log.error(
            "spool segment %s is damaged: %s; kept its %d intact record(s), and the file as found "
            "as %s",
            path,
            describe(scan),
            len(scan.spans),
            aside.name,
        )
        return end

    # -- writing ----------------------------------------------------------------------------------

    def _open_segment(self, index: int) -> None:
        """Start appending to segment ``index``; on an ``OSError`` no segment is open (the next
        append tries again)."""
        f = open(self.directory / _segment_name(index), "ab", buffering=0)  # noqa: SIM115
        self._write_file, self._write_index = f, index
        self._segments.append(index)
        self._sizes[index] = f.tell()

    def _roll(self) -> None:
        if self._write_file is not None:
            f, self._write_file = self._write_file, None
            f.close()
        self._open_segment(self._write_index + 1)

    def append(self, payload: bytes) -> None:
        """Add a batch at the end (durably if ``fsync``); drop the oldest beyond ``max_bytes``.

        Raises ``ValueError`` for a batch above :data:`MAX_RECORD_BYTES`, and ``OSError`` when the
        disk refuses it: then nothing of the batch is kept and later appends are unaffected.
        """
        if len(payload) > MAX_RECORD_BYTES:
            raise ValueError(
                f"batch of {len(payload)} bytes exceeds the spool's {MAX_RECORD_BYTES}"
            )
        record = RECORDS.encode(payload)
        with self._lock:
            try:
                size = self._sizes[self._write_index]
                if self._write_file is None:
                    self._open_segment(self._write_index + 1)
                elif size > 0 and size + len(record) > self.segment_bytes:
                    self._roll()
                assert self._write_file is not None
                write_all(self._write_file.fileno(), record)
                if self._fsync:
                    os.fsync(self._write_file.fileno())
            except OSError as exc:
                self._append_failed(exc)
                raise
            if self._failing:
                self._failing = False
                log.warning(
                    "spool %s takes batches again (%d append(s) failed so far)",
                    self.directory,
                    self.num_write_errors,
                )
            self._sizes[self._write_index] += len(record)
            self.pending_bytes += len(record)
            self.pending_records += 1
            self._enforce_bound()

    def _append_failed(self, exc: OSError) -> None:
        """Count a refused append; cut the segment back to its last whole record and go on in a
        new segment (the same one when it is empty and the cut worked: a full disk must not
        leave a new file per attempt)."""
        self.num_write_errors += 1
        f, size = self._write_file, self._sizes[self._write_index]
        cut = False
        if f is not None:
            with contextlib.suppress(OSError):
                f.truncate(size)
                cut = True
        if not self._failing:
            self._failing = True
            if f is None:
                what = "no new segment could be opened"
            elif cut:
                what = f"segment {self._write_index} cut back to its {size} bytes of whole records"
            else:
                what = f"segment {self._write_index} keeps a torn record (skipped when read)"
            log.warning(
                "spool %s: an append failed (%s), the batch is lost; %s; later appends go on",
                self.directory,
                exc,
                what,
            )
        if f is None or (size == 0 and cut):
            return
        with contextlib.suppress(OSError):  # then no segment is open: the next append retries
            self._roll()

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
                    # Everything up to here is read: whatever damage skipped, nothing is pending.
                    self.pending_bytes = self.pending_records = 0
                    return None
                self._retire(seg)
                continue
            framing: Framing = LEGACY_RECORDS if seg in self._legacy else RECORDS
            try:
                with open(self.directory / _segment_name(seg), "rb") as f:
                    f.seek(off)
                    limit = size - off
                    buf = f.read(min(framing.header_bytes, limit))
                    if len(buf) == framing.header_bytes:
                        buf += f.read(min(framing.record_size(buf), limit) - len(buf))
                    end = framing.check(buf, 0)
                    if isinstance(end, int):
                        return SpoolRecord(seg, off, off + end, framing.payload(buf, (0, end)))
                    f.seek(off)
                    rest = f.read(limit)
            except FileNotFoundError:  # deleted under us: all of it is gone
                rest = b""
            scan = framing.scan(rest, 0)
            if scan.spans and scan.spans[0][0] == 0:  # it reads back whole this time
                return SpoolRecord(
                    seg, off, off + scan.spans[0][1], framing.payload(rest, scan.spans[0])
                )
            self._damaged_while_running(seg, off, scan)

    def _damaged_while_running(self, seg: int, off: int, scan: Scan) -> None:
        """A record that was valid when written no longer reads back: skip to the next intact one
        (``scan`` is of the rest of the segment, from ``off``)."""
        size = self._sizes[seg]
        stretch = scan.damage[0] if scan.damage else Damage(0, 0, "gone")
        # Damage up to the end of what is left (a file cut short under us) loses all to the end.
        nxt = off + stretch.end if stretch.end < scan.size else size
        self.num_corrupt_segments += 1
        log.error(
            "spool segment %s is damaged at offset %d (%s): skipped %d byte(s) to %s",
            self.directory / _segment_name(seg),
            off,
            stretch.reason,
            nxt - off,
            "the next intact record" if nxt < size else "its end",
        )
        self.pending_bytes = max(self.pending_bytes - (nxt - off), 0)
        self.pending_records = max(self.pending_records - 1, 0)
        self._read = (seg, nxt)
        self._save_cursor()

    def _retire(self, seg: int) -> None:
        """Every record of a finished segment is acknowledged or dropped: delete it."""
        (self.directory / _segment_name(seg)).unlink(missing_ok=True)
        self._segments.remove(seg)
        del self._sizes[seg]
        self._legacy.discard(seg)
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
        # For the same reason a cursor the disk refuses is logged (once), never raised.
        try:
            atomic_write(self.directory / "cursor", f"{self._read[0]} {self._read[1]}\n")
        except OSError as exc:
            if str(exc) != self._cursor_error:
                self._cursor_error = str(exc)
                log.warning(
                    "spool cursor in %s not saved (%s): a restart would resend acknowledged "
                    "batches (dropped as duplicates)",
                    self.directory,
                    exc,
                )
        else:
            self._cursor_error = ""

    def close(self) -> None:
        """Close files, release the directory; unacknowledged batches stay for the next daemon."""
        with self._lock:
            if self._write_file is not None:
                self._write_file.close()
                self._write_file = None
            self._save_cursor()
            self._lock_file.close()
