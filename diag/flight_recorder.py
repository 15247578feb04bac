"""PyTorch Flight Recorder (FR) dumps: a safe loader and the mapping of entries to collectives.

A Flight Recorder dump is a pickle of plain containers (``torch._C._distributed_c10d.
_dump_fr_trace()`` or the ``_dump_<rank>`` files NCCL jobs write on a timeout). Pickles can run
code, so :func:`load_fr_dump` admits only dicts, lists, tuples, sets, strings, bytes, numbers, bools
and ``None``: any class reference, extension code or persistent id is refused with
:class:`~diag.errors.InputError` (one line), as is truncated or corrupt data.

:func:`entry_to_collective` is pure: one FR entry (plus the dump's ``pg_config``) becomes the
payload keyword arguments of a :class:`diag.schema.CollectiveEvent` (the caller adds the envelope
and step).
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections.abc import Mapping
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


def load_fr_dump(data: bytes, *, validate: bool = True) -> dict[str, Any]:
    """Parse a Flight Recorder dump (pickle bytes) into a dict; :class:`InputError` if not one.

    ``validate`` walks the result to check every value is plain data (defence in depth: the
    unpickler already cannot build anything else); the hook skips the walk on its own dumps.
    """
    if not data:
        raise InputError("Flight Recorder dump is empty")
    if _has_ext_opcode(data):
        raise InputError("Flight Recorder dump uses pickle extension codes (refused)")
    try:
        # through a buffered reader: the C unpickler prefetches from a stream that can peek, and
        # reads opcode by opcode from one that cannot (a bare BytesIO: ~2.8x slower)
        obj = _PlainUnpickler(io.BufferedReader(io.BytesIO(data))).load()
    except InputError:
        raise
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(
            f"not a readable Flight Recorder dump ({len(data)} bytes): {msg}"
        ) from None
    if not isinstance(obj, dict):
        raise InputError(f"Flight Recorder dump is a {type(obj).__name__}, expected a dict")
    if validate:
        _check_plain(obj)
    if "entries" in obj and not isinstance(obj["entries"], list):
        raise InputError("Flight Recorder dump 'entries' is not a list")
    return obj


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
