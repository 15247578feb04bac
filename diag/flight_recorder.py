"""PyTorch Flight Recorder (FR) dumps: a safe loader and the mapping of entries to collectives.

A Flight Recorder dump is a pickle of plain containers (``torch._C._distributed_c10d.
_dump_fr_trace()`` or the ``_dump_<rank>`` files NCCL jobs write on a timeout); the hook's
opt-in control-plane harvest reads the same recorder as JSON (:func:`load_fr_json`). Pickles
can run code, so :func:`load_fr_dump` admits only dicts, lists, tuples, sets, strings, bytes,
numbers, bools and ``None``: any class reference, extension code or persistent id is refused with
:class:`~diag.errors.InputError` (one line), as is truncated or corrupt data.

:func:`entry_to_collective` is pure: one FR entry (plus the dump's ``pg_config``) becomes the
payload keyword arguments of a :class:`diag.schema.CollectiveEvent` (the caller adds the envelope
and step).
"""

from __future__ import annotations

import copyreg
import io
import json
import pickle
import re
from collections.abc import Callable, Mapping
from typing import Any

from diag.errors import InputError

#: Bytes per element of the dtype names FR writes (``input_dtypes``), for ``num_bytes``.
DTYPE_BYTES: dict[str, int] = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
}

_PLAIN = (dict, list, tuple, set, frozenset, str, bytes, bytearray, int, float, bool, type(None))


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that cannot reach any class or function: plain data only."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused reference to {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def _has_ext_opcode(data: bytes) -> bool:
    """True if the pickle may use EXT opcodes that could resolve to a registered extension.

    EXT opcodes resolve through copyreg's extension registry (and its cache, which bypasses
    ``find_class``). With the registry empty (the normal case) they can only fail, so the opcode
    scan (pure Python, ~30 ms per 200 KB) is needed only when some code registered extensions.
    """
    if not (copyreg._inverted_registry or copyreg._extension_cache):  # type: ignore[attr-defined]
        return False
    import pickletools

    try:
        return any(op.name.startswith("EXT") for op, _, _ in pickletools.genops(data))
    except Exception:
        return True


def _check_plain(obj: Any, depth: int = 0) -> None:
    if depth > 64:
        raise InputError("Flight Recorder dump nests deeper than 64 levels")
    if not isinstance(obj, _PLAIN):
        raise InputError(f"Flight Recorder dump holds a {type(obj).__name__}, not plain data")
    if isinstance(obj, dict):
        for key, value in obj.items():
            _check_plain(key, depth + 1)
            _check_plain(value, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for item in obj:
            _check_plain(item, depth + 1)


#: Bytes the unpickler gets per read when the caller paces it (``load_fr_dump``'s ``tick``):
#: ~25 us of unpickling each, one tick between two.
PACED_CHUNK = 4096


class _PacedReader:
    """``data`` as a stream the C unpickler prefetches from (``peek``) ``chunk`` bytes at a
    time, calling ``tick()`` before each: the unpickling is then a C call that comes back to
    Python every ``chunk`` bytes, where the caller may release the GIL (``tick``)."""

    def __init__(self, data: bytes, chunk: int, tick: Callable[[], None]) -> None:
        self._view = memoryview(data)
        self._pos = 0
        self._chunk = max(1, chunk)
        self._tick = tick

    def peek(self, n: int = 0) -> bytes:
        self._tick()
        return bytes(self._view[self._pos : self._pos + self._chunk])

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + n)
        out = bytes(self._view[self._pos : end])
        self._pos = end
        return out

    def readinto(self, buf: Any) -> int:
        target = memoryview(buf).cast("B")
        n = min(len(target), len(self._view) - self._pos)
        target[:n] = self._view[self._pos : self._pos + n]
        self._pos += n
        return n

    def readline(self) -> bytes:
        rest = self._view[self._pos :]
        i = bytes(rest).find(b"\n")
        return self.read(len(rest) if i < 0 else i + 1)


def load_fr_dump(
    data: bytes, *, validate: bool = True, tick: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Parse a Flight Recorder dump (pickle bytes) into a dict; :class:`InputError` if not one.

    ``validate`` walks the result to check every value is plain data (defence in depth: the
    unpickler already cannot build anything else); the hook skips the walk on its own dumps.
    ``tick``: called every :data:`PACED_CHUNK` bytes of the unpickling (the hook thread's GIL
    pacing, :mod:`diag.hook.gil_share`): a 512-entry dump is then ~15 pieces of ~25 us instead
    of one C call of ~0.7-2 ms holding the GIL.
    """
    if not data:
        raise InputError("Flight Recorder dump is empty")
    if _has_ext_opcode(data):
        raise InputError("Flight Recorder dump uses pickle extension codes (refused)")
    try:
        # through a reader that can peek: the C unpickler prefetches from such a stream, and
        # reads opcode by opcode from one that cannot (a bare BytesIO: ~2.8x slower)
        stream: Any = (
            io.BufferedReader(io.BytesIO(data))
            if tick is None
            else _PacedReader(data, PACED_CHUNK, tick)
        )
        obj = _PlainUnpickler(stream).load()
    except InputError:
        raise
    except Exception as exc:
        raise _unreadable("dump", data, exc) from None
    if not isinstance(obj, dict):
        raise InputError(f"Flight Recorder dump is a {type(obj).__name__}, expected a dict")
    if validate:
        _check_plain(obj)
    if "entries" in obj and not isinstance(obj["entries"], list):
        raise InputError("Flight Recorder dump 'entries' is not a list")
    return obj


def _unreadable(what: str, data: bytes, exc: Exception) -> InputError:
    """The one-line error of a dump its parser refused."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return InputError(f"not a readable Flight Recorder {what} ({len(data)} bytes): {msg}")


#: Entry fields a JSON dump writes as ``0`` where a pickle has ``None`` (not seen by FR).
_JSON_ZERO_IS_NONE = ("time_discovered_started_ns", "time_discovered_completed_ns")
#: Entries parsed between two ``tick()`` calls of :func:`load_fr_json` (~3-4 us each).
_JSON_TICK_EVERY = 16
_JSON_ENTRIES = re.compile(r'"entries"\s*:\s*\[')
_JSON_SPACE = " \t\n\r"


def load_fr_json(data: bytes, *, tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """A JSON Flight Recorder dump (``dump_json``: torch's control-plane ``fr_trace_json``
    handler) as :func:`load_fr_dump` returns the pickle of the same recorder: entries'
    ``process_group`` a tuple, ``time_discovered_*_ns`` ``None`` where JSON wrote ``0``,
    ``pg_status`` counters integers (strings in JSON), ``entries`` present (JSON leaves it out
    when there are none). :class:`InputError` if not such a dump.

    ``tick``: called every :data:`_JSON_TICK_EVERY` entries; the entries are then decoded one
    at a time (``raw_decode``) instead of in one C call holding the GIL (~1.4 ms for a
    512-entry ring's ~240 KB).
    """
    try:
        text = data.decode("utf-8")
        obj = _json_paced(text, tick) if tick is not None else None
        if obj is None:
            obj = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _unreadable("JSON dump", data, exc) from None
    if not isinstance(obj, dict):
        raise InputError(f"Flight Recorder JSON dump is a {type(obj).__name__}, not an object")
    entries = obj.setdefault("entries", [])
    if not isinstance(entries, list):
        raise InputError("Flight Recorder JSON dump 'entries' is not a list")
    for i, entry in enumerate(entries):
        if isinstance(entry, dict):
            _entry_as_pickled(entry)
        if tick is not None and i % (4 * _JSON_TICK_EVERY) == 0:
            tick()
    status = obj.get("pg_status")
    if isinstance(status, dict):
        for group in status.values():
            if isinstance(group, dict):
                for key, value in group.items():
                    if isinstance(value, str) and value.lstrip("-").isdigit():
                        group[key] = int(value)
    return obj


def _entry_as_pickled(entry: dict[str, Any]) -> None:
    pg = entry.get("process_group")
    if isinstance(pg, list):
        entry["process_group"] = tuple(pg)
    for key in _JSON_ZERO_IS_NONE:
        if entry.get(key) == 0:
            entry[key] = None


def _json_paced(text: str, tick: Callable[[], None]) -> Any:
    """``text`` decoded with its ``entries`` array taken one entry at a time, ``tick()``
    between every :data:`_JSON_TICK_EVERY`; ``None`` when the text is not laid out so (the
    caller then decodes it whole, as it would any JSON)."""
    found = _JSON_ENTRIES.search(text)
    if found is None:
        return None
    at = found.start()
    decode = _DECODER.raw_decode
    pos = _after_space(text, found.end())
    entries: list[Any] = []
    while pos < len(text) and text[pos] != "]":
        if entries:
            if text[pos] != ",":
                return None
            pos = _after_space(text, pos + 1)
        entry, pos = decode(text, pos)
        entries.append(entry)
        if len(entries) % _JSON_TICK_EVERY == 0:
            tick()
        pos = _after_space(text, pos)
    if pos >= len(text):
        return None
    rest = json.loads(text[:at] + '"entries":[]' + text[pos + 1 :])
    if not isinstance(rest, dict) or rest.get("entries") != []:
        return None  # the array taken was not the top level's (a nested "entries" first)
    rest["entries"] = entries
    return rest


def _after_space(text: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not JSON whitespace."""
    while pos < len(text) and text[pos] in _JSON_SPACE:
        pos += 1
    return pos


_DECODER = json.JSONDecoder()


def normalize_op(profiling_name: str) -> str:
    """``'nccl:send 0->3'`` -> ``'send'``, ``'gloo:all_reduce'`` -> ``'all_reduce'``."""
    name = profiling_name.split(" ", 1)[0]
    return name.split(":", 1)[1] if ":" in name else name


def pg_sizes(pg_config: Mapping[str, Any]) -> dict[str, int]:
    """Process-group name -> number of ranks, from a dump's ``pg_config`` (``ranks`` a string)."""
    sizes: dict[str, int] = {}
    for key, cfg in pg_config.items():
        if not isinstance(cfg, Mapping):
            continue
        ranks = str(cfg.get("ranks", "")).strip("[] ")
        size = len([r for r in ranks.split(",") if r.strip()]) if ranks else 0
        name = str(cfg.get("name", key))
        if name and size:
            sizes[name] = size
    return sizes


def _num_bytes(sizes: Any, dtypes: Any) -> int:
    total = 0
    if not isinstance(sizes, (list, tuple)) or not isinstance(dtypes, (list, tuple)):
        return 0
    for shape, dtype in zip(sizes, dtypes, strict=False):
        numel = 1
        for dim in shape if isinstance(shape, (list, tuple)) else ():
            numel *= int(dim)
        total += numel * DTYPE_BYTES.get(str(dtype), 0)
    return total


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def entry_to_collective(entry: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
    """The :class:`~diag.schema.CollectiveEvent` payload (no envelope, no step) of one FR entry.

    ``sizes`` maps process-group names to their size (:func:`pg_sizes`). ``start_ns`` is FR's
    ``time_discovered_started_ns`` and ``end_ns`` its completion time when FR saw them (NCCL with
    timing enabled); ``duration_ns`` is FR's ``duration_ms`` when present, else end - start.
    ``enqueue_ns`` is ``time_created_ns`` (wall clock, when the rank issued the operation).
    Raises :class:`InputError` on an entry missing its identity fields.
    """
    try:
        pg = entry.get("process_group") or ("", "")
        pg_name, pg_desc = str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
        dtypes = entry.get("input_dtypes") or []
        start = _opt_int(entry.get("time_discovered_started_ns"))
        end = _opt_int(entry.get("time_discovered_completed_ns"))
        duration_ms = entry.get("duration_ms")
        if duration_ms is not None:
            duration: int | None = int(float(duration_ms) * 1_000_000)
        elif start is not None and end is not None:
            duration = end - start
        else:
            duration = None
        return {
            "op": normalize_op(str(entry["profiling_name"])),
            "pg_name": pg_name,
            "pg_desc": pg_desc,
            "pg_size": int(sizes.get(pg_name, 0)),
            "seq_id": int(entry.get("collective_seq_id", -1)),
            "p2p_seq_id": int(entry.get("p2p_seq_id", -1)),
            "is_p2p": bool(entry.get("is_p2p", False)),
            "num_bytes": _num_bytes(entry.get("input_sizes"), dtypes),
            "dtype": str(dtypes[0]) if dtypes else "",
            "enqueue_ns": int(entry["time_created_ns"]),
            "start_ns": start,
            "end_ns": end,
            "duration_ns": duration,
            # retired = finished (gloo leaves "scheduled" to the end: no CUDA events)
            "state": "completed" if entry.get("retired") is True else str(entry.get("state", "")),
            "origin": "fr",
        }
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"malformed Flight Recorder entry: {type(exc).__name__}: {exc}") from None
