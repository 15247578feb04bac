"""Reading files diag did not write (a failed run's remains, other tools' traces) so that no
file can hang, exhaust or crash the reader: each refusal is an :class:`~diag.errors.InputError`
with one line saying why, for the caller to report against that file and go on.

* **Files**: only regular files are opened (:func:`open_regular`: ``O_NONBLOCK`` then ``fstat``,
  so a FIFO, socket or device is refused before anything blocks on it), and whole-file reads
  stop at a cap (:func:`read_capped`).
* **JSON** (:func:`loads_json`): integers of more than :data:`MAX_INT_DIGITS` digits, numbers a
  float cannot hold (``1e400``) and ``NaN``/``Infinity`` are refused while parsing (the parse
  hooks, not ``sys.set_int_max_str_digits``, which is process-wide); nesting deep enough to
  exhaust the parser's recursion is refused, and the result is walked by :func:`check_plain`.
* **Plain data** (:func:`check_plain`): containers of containers, each shared object walked once,
  at most :data:`MAX_DEPTH` deep and :data:`MAX_VALUES` values counting a shared object once per
  reference (what code iterating the data will visit), never a cycle.
* **gzip** (:func:`gunzip`): streamed, stopping at a cap on the bytes it inflates to.
* **Text** (:func:`printable`): what a file or file name holds, safe to print: lone surrogates
  (undecodable bytes of a file name, shown ``\\xff``), control and other unprintable characters
  are escaped, so a name can neither break UTF-8 output nor drive a terminal.

Standard library only.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import stat
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

from diag.errors import InputError

#: Nesting of containers in one JSON document or pickle (FR dumps nest 5 deep).
MAX_DEPTH = 64
#: Values (containers and leaves) in one document, a shared object counted at each reference.
MAX_VALUES = 1 << 24
#: Digits of a JSON integer (a uint64 has 20).
MAX_INT_DIGITS = 32
#: Characters of a JSON number with a fraction or exponent.
MAX_FLOAT_CHARS = 64

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)
_LEAVES = frozenset({str, bytes, bytearray, int, float, bool, type(None)})
_CONTAINERS = frozenset({dict, list, tuple, set, frozenset})


def mib(num_bytes: int) -> str:
    """``64 MiB`` (whole MiB; a smaller cap in bytes)."""
    return f"{num_bytes >> 20} MiB" if num_bytes >= 1 << 20 else f"{num_bytes} bytes"


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; :class:`InputError` if it is not (a
    FIFO, socket, device or directory: refused without blocking), ``OSError`` if it cannot be
    opened."""
    mode = os.stat(path).st_mode  # before opening: opening a device can have effects
    if not stat.S_ISREG(mode):
        raise InputError(f"{_kind(mode)}, not a regular file; not read")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode  # the path may have been swapped since the stat
        if not stat.S_ISREG(mode):
            raise InputError(f"{_kind(mode)}, not a regular file; not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(fh: BinaryIO, max_bytes: int, what: str = "file") -> bytes:
    """All of ``fh`` from where it stands; :class:`InputError` when it holds more than
    ``max_bytes`` (read stops there)."""
    chunks: list[bytes] = []
    total = 0
    # read(n) allocates n bytes up front: ask for what the file says it holds, then for more
    # in bounded chunks (a file may grow, or say 0 like those under /proc)
    want = os.fstat(fh.fileno()).st_size - fh.tell()
    while chunk := fh.read(min(max(want, 1 << 16), max_bytes + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise InputError(f"larger than {mib(max_bytes)}, more than diag reads from one {what}")
        want = 1 << 20
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_regular(path: str | os.PathLike[str], max_bytes: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`, :func:`read_capped`)."""
    with open_regular(path) as fh:
        return read_capped(fh, max_bytes, what)


def text_lines(fh: BinaryIO, max_chars: int = 64 << 10) -> Iterator[str]:
    """The lines of a binary file as text (UTF-8, bad bytes replaced), each cut at ``max_chars``
    (the rest of an overlong line is skipped, never held in memory whole)."""
    text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace")
    while line := text.readline(max_chars):
        if len(line) == max_chars and not line.endswith("\n"):
            while (rest := text.readline(max_chars)) and not rest.endswith("\n"):
                pass
            line += "\n"
        yield line


class OutOfBounds(InputError):
    """JSON that is well formed but beyond the bounds of the module docstring (a reader may
    tell it apart from JSON that is not JSON at all)."""


class _Refused(ValueError):
    """A JSON value refused by a parse hook (its message is the reason)."""


def _parse_int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text)} digits (more than {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > MAX_FLOAT_CHARS:
        raise _Refused(f"a number of {len(text)} characters (more than {MAX_FLOAT_CHARS})")
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"a number out of range ({text})")
    return value


def _parse_constant(name: str) -> Any:
    raise _Refused(f"{name}, not a number JSON allows")


def loads_json(data: bytes | str, *, check: bool = True) -> Any:
    """Parse JSON with the bounds of the module docstring; :class:`InputError` (one line) if it
    is not valid or exceeds them. ``check=False`` skips the walk of :func:`check_plain` (for
    large traces whose readers check each value's type themselves)."""
    try:
        obj = json.loads(
            data,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except RecursionError:
        raise OutOfBounds("JSON nests too deeply") from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        where = "truncated JSON" if exc.pos >= len(data.rstrip()) else "bad JSON"
        raise InputError(f"{where} at line {exc.lineno} column {exc.colno} ({exc.msg})") from None
    except _Refused as exc:
        raise OutOfBounds(f"JSON holds {exc}") from None
    except ValueError as exc:  # e.g. a \u escape json cannot decode
        raise InputError(f"bad JSON ({printable(str(exc))})") from None
    if check:
        check_json(obj)
    return obj


def check_json(obj: Any) -> None:
    """:func:`check_plain` of parsed JSON; :class:`OutOfBounds` (``JSON nests deeper than 64
    levels``) when it fails."""
    try:
        check_plain(obj)
    except InputError as exc:
        raise OutOfBounds(f"JSON {exc}") from None


def check_plain(obj: Any, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> int:
    """The number of values in ``obj`` counting a shared object at each reference (what
    iterating it visits); :class:`InputError` if it holds anything but plain containers, numbers,
    strings, bytes and ``None``, refers to itself, nests deeper than ``max_depth`` or counts more
    than ``max_values``. Each container is walked once, however often it is shared."""
    if type(obj) in _LEAVES:
        return 1
    if type(obj) not in _CONTAINERS:
        raise InputError(f"holds a {type(obj).__name__}, not plain data")
    done: dict[int, tuple[int, int]] = {}  # id -> (values, height) of a walked container
    on_path = {id(obj)}
    # frames: [container, its child containers, values so far, height so far]
    leaves, subs = _split(obj)
    stack: list[list[Any]] = [[obj, iter(subs), 1 + leaves, 0]]
    while stack:
        frame = stack[-1]
        for child in frame[1]:
            cid = id(child)
            got = done.get(cid)
            if got is None:
                if cid in on_path:
                    raise InputError("holds itself (a reference cycle)")
                leaves, subs = _split(child)
                if subs:  # walk it; one of leaves only is done at once
                    if len(stack) >= max_depth:
                        raise InputError(f"nests deeper than {max_depth} levels")
                    on_path.add(cid)
                    stack.append([child, iter(subs), 1 + leaves, 0])
                    break
                got = done[cid] = (1 + leaves, 0)
            frame[2] += got[0]
            frame[3] = max(frame[3], got[1] + 1)
            if frame[2] > max_values or len(stack) + 1 + got[1] > max_depth:
                raise _too_big(frame[2], max_values, max_depth)
        else:
            stack.pop()
            on_path.discard(id(frame[0]))
            done[id(frame[0])] = (frame[2], frame[3])
            if not stack:
                return int(frame[2])
            parent = stack[-1]
            parent[2] += frame[2]
            parent[3] = max(parent[3], frame[3] + 1)
            if parent[2] > max_values:
                raise _too_big(parent[2], max_values, max_depth)
    raise AssertionError("unreachable")  # pragma: no cover


def _split(container: Any) -> tuple[int, list[Any]]:
    """``(number of leaves, child containers)`` of a container (a dict's keys and values both);
    :class:`InputError` for a child that is neither. Types are gathered at C speed; only a
    container that holds containers is looped over in Python."""
    if type(container) is dict:
        kinds = set(map(type, itertools.chain(container, container.values())))
        size = 2 * len(container)
    else:
        kinds = set(map(type, container))
        size = len(container)
    if kinds <= _LEAVES:
        return size, []
    odd = kinds - _LEAVES - _CONTAINERS
    if odd:
        raise InputError(f"holds a {min(k.__name__ for k in odd)}, not plain data")
    if type(container) is dict:
        subs = [v for kv in container.items() for v in kv if type(v) in _CONTAINERS]
    else:
        subs = [v for v in container if type(v) in _CONTAINERS]
    return size - len(subs), subs


def _too_big(values: int, max_values: int, max_depth: int) -> InputError:
    if values > max_values:
        return InputError(
            f"expands to more than {max_values} values (shared references repeat containers)"
        )
    return InputError(f"nests deeper than {max_depth} levels")


def gunzip(data: bytes, max_bytes: int) -> bytes:
    """Inflate gzip ``data`` (one or more members), streaming; :class:`InputError` when it is
    truncated, corrupt, or inflates to more than ``max_bytes`` (inflating stops there)."""
    out: list[bytes] = []
    total = 0
    rest = data
    try:
        while rest[:2] == b"\x1f\x8b":
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pending = rest
            while not inflater.eof:
                chunk = inflater.decompress(pending, max_bytes + 1 - total)
                total += len(chunk)
                out.append(chunk)
                if total > max_bytes:
                    raise InputError(f"gzip stream inflates to more than {mib(max_bytes)}")
                pending = inflater.unconsumed_tail
                if not chunk and not pending:
                    raise InputError("truncated gzip stream")
            rest = inflater.unused_data
    except zlib.error as exc:
        raise InputError(f"corrupt gzip stream ({printable(str(exc))})") from None
    if not out:
        raise InputError("not a gzip stream")
    return b"".join(out)


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str, *, newlines: bool = False) -> str:
    """``text`` safe to print or write as UTF-8: undecodable bytes of a file name (lone
    surrogates from :func:`os.fsdecode`) as ``\\xff``, other surrogates, control and unprintable
    characters as ``\\n``, ``\\x1b``, ``\\u200b``; ``newlines`` keeps line breaks and tabs (for
    multi-line text such as a stack)."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or (newlines and ch in "\n\t"):
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)
