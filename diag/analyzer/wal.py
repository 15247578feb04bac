"""The ingest write-ahead log: accepted batches on disk before the analyzer acknowledges them.

Files are ``RUN_DIR/store/wal/NNNNNN.wal``, each a sequence of frames in the hook -> daemon
format (as ``diag.transport.framing``: 4-byte big-endian length + a serialized ``EventBatch``).
Every append is flushed and fsynced before it returns, so an acknowledged event survives a
SIGKILL or a power cut.
A process writes only to WAL files it created (numbers above every existing one); a flush of the
store rotates to a new file and then deletes the older ones, whose events are all in Parquet parts.

A crash in the middle of an append leaves a truncated last frame: :func:`read_wal` keeps the intact
frames before it (those are the only ones that can have been acknowledged) and reports the rest.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from diag.fsutil import fsync_dir

log = logging.getLogger(__name__)

_WAL_RE = re.compile(r"^(\d{6,})\.wal$")
_HEADER = struct.Struct(">I")
#: A length header above this is garbage, not a frame. The WAL takes batches as large as the gRPC
#: message limit (64 MiB), above the 16 MiB cap on hook -> daemon frames, so it has its own bound.
MAX_WAL_FRAME_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class WalContents:
    """What a WAL file holds: its whole frames, and how many bytes after them were unreadable."""

    path: Path
    payloads: tuple[bytes, ...]
    num_trailing_bytes: int


def wal_paths(wal_dir: Path) -> list[Path]:
    """WAL files in ``wal_dir``, oldest first."""
    if not wal_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in wal_dir.iterdir() if (m := _WAL_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def read_wal(path: Path) -> WalContents:
    """The intact frames of one WAL file; a torn or garbled tail is counted, not raised."""
    data = path.read_bytes()
    payloads: list[bytes] = []
    pos = 0
    while pos + _HEADER.size <= len(data):
        (size,) = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + size
        if size > MAX_WAL_FRAME_BYTES or end > len(data):
            break
        payloads.append(data[pos + _HEADER.size : end])
        pos = end
    return WalContents(path, tuple(payloads), len(data) - pos)


class WalWriter:
    """Appends fsynced frames to the current WAL file; opens a new numbered file after a rotate."""

    def __init__(self, wal_dir: Path) -> None:
        self.wal_dir = wal_dir
        self._fh: BinaryIO | None = None
        self._path: Path | None = None
        existing = wal_paths(wal_dir)
        self._next = int(existing[-1].name.split(".")[0]) + 1 if existing else 0

    @property
    def current(self) -> Path | None:
        return self._path

    def append(self, payload: bytes) -> None:
        """Write one frame and make it durable. On failure the file is cut back and closed."""
        data = _HEADER.pack(len(payload)) + payload
        fh = self._open()
        start = fh.tell()
        try:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        except OSError:
            # Never leave a torn frame in front of later ones: cut it off, then start a new file.
            try:
                fh.truncate(start)
            finally:
                self.rotate()
            raise

    def _open(self) -> BinaryIO:
        if self._fh is None:
            self.wal_dir.mkdir(parents=True, exist_ok=True)
            self._path = self.wal_dir / f"{self._next:06d}.wal"
            self._next += 1
            self._fh = open(self._path, "ab")  # noqa: SIM115 - kept open across appends
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
