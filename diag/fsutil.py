"""Files written whole or not at all: the one tmp-file-then-rename write of the project.

A reader of a file diag writes (a run's findings, a Parquet part, the control board, a port file,
a status file, a report) sees the old version or the new one, never a part: the bytes go to a
hidden temporary file beside the target (``.<name>.<pid>.tmp``, same directory, so the rename is
atomic), which replaces the target only once complete. ``durable=True`` also fsyncs the file and
its directory, so the new version survives a power loss (the store, the WAL's neighbours, the
findings); without it a crash may leave the old version, never a torn one. On any failure the
temporary file is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new file in directory ``path`` durable (a no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_path(path: str | os.PathLike[str]) -> Path:
    """The hidden temporary name :func:`atomic_open` writes ``path`` through."""
    target = Path(path)
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: str = "w", *, durable: bool = False, **kwargs: Any
) -> Iterator[IO[Any]]:
    """Open a temporary file for writing (``mode`` "w" or "wb"); on a clean exit it replaces
    ``path``; on an exception it is removed and ``path`` is left as it was."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode {mode!r} is not 'w' or 'wb'")
    target = Path(path)
    tmp = temp_path(target)
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    try:
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(target.parent)


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, durable: bool = False) -> Path:
    """Replace ``path`` with ``data`` (text as UTF-8) in one step; returns ``path``."""
    mode = "wb" if isinstance(data, bytes) else "w"
    with atomic_open(path, mode, durable=durable) as fh:
        fh.write(data)
    return Path(path)
