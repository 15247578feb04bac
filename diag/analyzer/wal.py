"""The ingest write-ahead log: accepted batches on disk before the analyzer acknowledges them.

Files are ``RUN_DIR/store/wal/NNNNNN.wal``, each a sequence of ``diag.recordlog`` records with the
magic ``b"\\xd1WL2"`` (``magic | length | crc32 | payload``), each payload a serialized
``EventBatch``. Every append is written and fsynced before it returns, so an acknowledged event
survives a SIGKILL or a power cut. An append the disk refuses (full, ``EFBIG``, ``EIO``, a short
write) is cut off the file again and raised: nothing of it is acknowledged, and it never sits in
front of later frames.
A process writes only to WAL files it created (numbers above every existing one); a flush of the
store rotates to a new file and then deletes the older ones, whose events are all in Parquet parts.

:func:`read_wal` returns every intact frame of a file. A crash in the middle of an append leaves a
torn last frame; a flipped bit (in a payload or in a length) costs that frame only, the reader
goes on at the next intact one. Either way the file is one recovery had to skip something in:
:func:`keep_damaged` keeps it beside the WAL as ``NNNNNN.wal.damaged`` (never replayed again, never
deleted by diag) and says so in one line.

Files written before the record magic (``length (4 bytes, big-endian) | payload``, no checksum) are
recognized (no intact record of the current format, an intact frame of the old one first) and read
with the old reader, noted in one line; they cannot be resynchronized after damage.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import struct
from dataclasses import dataclass
from io import FileIO
from pathlib import Path

from diag.fsutil import fsync_dir
from diag.recordlog import Damage, RecordFormat, Scan, describe, write_all

log = logging.getLogger(__name__)

_WAL_RE = re.compile(r"^(\d{6,})\.wal$")
_NUMBERED_RE = re.compile(r"^(\d{6,})\.wal")  # a WAL file or one kept aside (.damaged)
#: A length header above this is garbage, not a frame. The WAL takes batches as large as the gRPC
#: message limit (64 MiB), above the 16 MiB cap on hook -> daemon frames, so it has its own bound.
MAX_WAL_FRAME_BYTES = 1 << 30
RECORDS = RecordFormat(b"\xd1WL2", MAX_WAL_FRAME_BYTES)
_LEGACY_HEADER = struct.Struct(">I")
DAMAGED_SUFFIX = ".damaged"


@dataclass(frozen=True, slots=True)
class WalContents:
    """What a WAL file holds: its intact frames; how many bytes after them were unreadable (a torn
    last frame: ``num_trailing_bytes``) or between them (``num_skipped_bytes``); ``damage``, the
    skipped bytes described in one line ("" when nothing was skipped); and whether the file is in
    the format before checksums (``legacy``)."""

    path: Path
    payloads: tuple[bytes, ...]
    num_trailing_bytes: int
    num_skipped_bytes: int = 0
    damage: str = ""
    legacy: bool = False


def wal_paths(wal_dir: Path) -> list[Path]:
    """WAL files in ``wal_dir``, oldest first."""
    if not wal_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in wal_dir.iterdir() if (m := _WAL_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def _scan_legacy(data: bytes) -> Scan:
    """Frames of the format before checksums: length-prefixed, read until the first that does
    not fit (there is no magic to resynchronize on)."""
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos + _LEGACY_HEADER.size <= len(data):
        (size,) = _LEGACY_HEADER.unpack_from(data, pos)
        end = pos + _LEGACY_HEADER.size + size
        if size > MAX_WAL_FRAME_BYTES or end > len(data):
            break
        spans.append((pos + _LEGACY_HEADER.size, end))  # payload spans
        pos = end
    tail = (Damage(pos, len(data), "truncated frame"),) if pos < len(data) else ()
    return Scan(tuple(spans), tail, len(data))


def read_wal(path: Path) -> WalContents:
    """The intact frames of one WAL file; damage is counted and described, never raised."""
    data = path.read_bytes()
    scan = RECORDS.scan(data)
    if not scan.spans and data and not data.startswith(RECORDS.magic):
        old = _scan_legacy(data)
        if old.spans:
            log.info(
                "WAL %s is in the format before checksums; read %d frame(s) with the old reader",
                path,
                len(old.spans),
            )
            trailing = old.num_damaged_bytes
            return WalContents(
                path,
                tuple(data[a:b] for a, b in old.spans),
                trailing,
                damage=f"a torn frame at the end ({trailing} bytes)" if trailing else "",
                legacy=True,
            )
    tail = scan.torn_tail
    trailing = tail.num_bytes if tail is not None else 0
    return WalContents(
        path,
        tuple(RECORDS.payload(data, span) for span in scan.spans),
        trailing,
        scan.num_damaged_bytes - trailing,
        describe(scan),
    )


def keep_damaged(contents: WalContents) -> Path:
    """Keep a WAL file recovery skipped something in beside the WAL, as ``NNNNNN.wal.damaged``
    (a hard link, or a copy: deleting the WAL file leaves it), and log it in one line. Returns
    the path kept; raises ``OSError`` if none could be made (then the WAL file must stay)."""
    path = contents.path
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    n = 0
    while True:
        try:
            os.link(path, aside)
            break
        except FileExistsError:
            if os.path.samefile(path, aside):  # kept by an earlier start that died before the flush
                break
            n += 1
            aside = path.with_name(f"{path.name}{DAMAGED_SUFFIX}.{n}")
        except OSError:  # no hard links here
            shutil.copyfile(path, aside)
            with open(aside, "rb") as fh:
                os.fsync(fh.fileno())
            break
    fsync_dir(path.parent)
    log.warning(
        "WAL %s: %s; replayed its %d intact frame(s); the file is kept as %s",
        path,
        contents.damage,
        len(contents.payloads),
        aside.name,
    )
    return aside


class WalWriter:
    """Appends fsynced frames to the current WAL file; opens a new numbered file after a rotate."""

    def __init__(self, wal_dir: Path) -> None:
        self.wal_dir = wal_dir
        self._fh: FileIO | None = None
        self._path: Path | None = None
        self.num_write_errors = 0  # appends the disk refused (raised to the caller)
        numbers = []
        if wal_dir.is_dir():
            numbers = [
                int(m.group(1)) for p in wal_dir.iterdir() if (m := _NUMBERED_RE.match(p.name))
            ]
        self._next = max(numbers) + 1 if numbers else 0

    @property
    def current(self) -> Path | None:
        return self._path

    def append(self, payload: bytes) -> None:
        """Write one frame and make it durable. On an ``OSError`` the file is cut back to its last
        whole frame and the error raised; a file with frames in it is closed (the next append
        starts a new one)."""
        data = RECORDS.encode(payload)
        fh = self._open()
        start = fh.tell()
        try:
            write_all(fh.fileno(), data)
            os.fsync(fh.fileno())
        except OSError:
            self.num_write_errors += 1
            # Never leave a torn frame in front of later ones: cut it off, or start a new file.
            cut = False
            with contextlib.suppress(OSError):
                fh.truncate(start)
                fh.seek(start)
                cut = True
            if start > 0 or not cut:
                self.rotate()
            raise

    def _open(self) -> FileIO:
        if self._fh is None:
            self.wal_dir.mkdir(parents=True, exist_ok=True)
            path = self.wal_dir / f"{self._next:06d}.wal"
            self._next += 1
            self._fh = open(path, "ab", buffering=0)  # noqa: SIM115 - kept open across appends
            self._path = path
            fsync_dir(self.wal_dir)
        return self._fh

    def rotate(self) -> None:
        """Close the current file; the next append starts a new one."""
        if self._fh is not None:
            try:
                self._fh.close()
            finally:
                self._fh = None
                self._path = None

    def delete_closed(self) -> int:
        """Delete every WAL file but the one open for appends; returns how many were deleted."""
        n = 0
        for path in wal_paths(self.wal_dir):
            if path != self._path:
                path.unlink(missing_ok=True)
                n += 1
        if n:
            fsync_dir(self.wal_dir)
        return n

    def close(self) -> None:
        self.rotate()
