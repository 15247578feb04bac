"""Read Flight Recorder dumps (pickle or JSON, NCCL or gloo) into :class:`RankDump` records.

Formats (torch's ``FlightRecorder::dump`` and ``dump_json``): a dict with ``version``,
``pg_config`` (group name -> ``{"name", "desc", "ranks": "[0, 1]"}``), ``pg_status`` (FR's
per-group id -> last enqueued/started/completed collective; strings in JSON) and ``entries``
(absent from a JSON dump with none). JSON writes ``0`` where a pickle has ``None`` for the
``time_discovered_*`` fields and has no stack frames. Gloo's recorder writes the same layout with
``gloo:`` profiling names.

Pickles are parsed only by :func:`diag.postmortem.fr_pickle.load_plain_pickle` (plain containers,
numbers and strings, bounded in time and memory by the file's size; anything else is refused, never
built), JSON only by :func:`diag.untrusted.loads_json` (bounded depth and numbers). A value of the
wrong type anywhere (an entry that is a number, ranks that are not integers) makes the dump a
problem line, as does a rank outside ``0 .. MAX_WORLD_SIZE - 1``.

The rank of a dump: the dump's own ``rank`` field if it has one, else the number that ends the file
name (``_dump_12``, ``nccl_trace_rank_3``, ``rank_7.json``). ``pg_status`` is keyed by FR's
per-rank group id, so it is tied to a group name only through the dump's own entries; for a group
with point-to-point traffic it counts p2p operations too and is not used (collective sequence
numbers come from the entries there).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from diag.errors import InputError
from diag.flight_recorder import normalize_op
from diag.postmortem.fr_pickle import load_plain_pickle
from diag.postmortem.records import (
    MAX_WORLD_SIZE,
    FrEntry,
    GroupInfo,
    GroupStatus,
    RankDump,
    StackFrame,
)
from diag.untrusted import loads_json, printable

#: File names that say "Flight Recorder dump" (a file so named that is not one is a problem).
DUMP_NAME = re.compile(r"(_dump_\d+|nccl_trace_rank_\d+|fr_trace|flight_recorder|\.pkl$|\.pickle$)")
_RANK_IN_NAME = re.compile(r"(\d+)$")
_P2P = re.compile(r"(?:send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")
_SUFFIXES = (".json", ".pkl", ".pickle")
#: What a malformed value raises when converted (an int() of a list, a .get() on a number).
_MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError)


def is_fr_json(obj: Any) -> bool:
    """True for a JSON object laid out like an FR dump."""
    return isinstance(obj, dict) and "version" in obj and ("pg_config" in obj or "entries" in obj)


def rank_from_name(name: str) -> int | None:
    """The rank a dump's file name ends with (extensions ignored), else ``None``."""
    stem = name
    for suffix in _SUFFIXES:
        stem = stem.removesuffix(suffix)
    m = _RANK_IN_NAME.search(stem)
    return int(m.group(1)) if m and len(m.group(1)) <= 9 else None


def read_dump_file(path: Path, data: bytes, display: str) -> RankDump:
    """One dump file's bytes -> :class:`RankDump`; :class:`InputError` (one line, no file name)
    when it is not a readable dump or its rank cannot be told."""
    head = data.lstrip()[:1]
    if head == b"{":
        try:
            obj = loads_json(data)
        except InputError as exc:
            raise InputError(f"not a readable Flight Recorder JSON dump: {exc}") from None
        if not is_fr_json(obj):
            raise InputError("JSON without Flight Recorder keys (version, pg_config, entries)")
    elif data[:1] == b"\x80":
        obj = load_plain_pickle(data)
    elif not data:
        raise InputError("empty file, not a Flight Recorder dump")
    else:
        raise InputError("not a Flight Recorder dump (neither a pickle nor JSON)")
    return dump_from_obj(path, obj, display)


def dump_from_obj(path: Path, obj: Mapping[str, Any], display: str) -> RankDump:
    """A loaded dump (a plain dict, checked by :func:`~diag.untrusted.check_plain`) ->
    :class:`RankDump`; its rank from its ``rank`` field, else from ``path``'s name."""
    rank = obj.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool):
        rank = rank_from_name(path.name)
    if rank is None:
        raise InputError("cannot tell which rank wrote it (no rank field, no rank in the name)")
    if not 0 <= rank < MAX_WORLD_SIZE:
        raise InputError(f"rank {_short(rank)} is not a rank (0 .. {MAX_WORLD_SIZE - 1})")
    return parse_dump(obj, rank=rank, display=display)


def _short(value: object, limit: int = 60) -> str:
    """A value for a one-line message, cut to ``limit`` characters (an integer too long to
    print as digits is named by its size)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = printable(str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_dump(obj: Mapping[str, Any], *, rank: int, display: str) -> RankDump:
    """A loaded dump dict -> :class:`RankDump`; :class:`InputError` (one line) when its parts
    are malformed or of the wrong type."""
    try:
        return _parse_dump(obj, rank=rank, display=display)
    except _MALFORMED as exc:
        raise InputError(f"malformed dump: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_short(exc, 200)}"


def _parse_dump(obj: Mapping[str, Any], *, rank: int, display: str) -> RankDump:
    groups = _groups(obj.get("pg_config"))
    members = {g.name: g.ranks for g in groups}
    raw_entries = obj.get("entries") or []
    if not isinstance(raw_entries, list):
        raise InputError("'entries' is not a list")
    entries = []
    for i, raw in enumerate(raw_entries):
        try:
            entries.append(_entry(raw, members))
        except _MALFORMED as exc:
            raise InputError(f"entry {i} is malformed: {_why(exc)}") from None
    backends = {e.profiling_name.split(":", 1)[0] for e in entries if ":" in e.profiling_name}
    backend = ",".join(sorted(backends)) or ("nccl" if "nccl_version" in obj else "")
    return RankDump(
        rank=rank,
        file=display,
        version=str(obj.get("version", "")),
        backend=backend,
        groups=groups,
        entries=tuple(entries),
        status=_status(obj.get("pg_status"), entries),
    )


def _groups(cfg: Any) -> tuple[GroupInfo, ...]:
    if not isinstance(cfg, Mapping):
        return ()
    out = []
    for key, val in cfg.items():
        if not isinstance(val, Mapping):
            continue
        name = str(val.get("name", key))
        ranks = val.get("ranks", "")
        found = ranks if isinstance(ranks, (list, tuple)) else re.findall(r"-?\d+", str(ranks))
        if len(found) > MAX_WORLD_SIZE:
            raise InputError(f"group {_short(name)} lists more than {MAX_WORLD_SIZE} ranks")
        nums = tuple(_rank(r, name) for r in found)
        out.append(GroupInfo(name=name, desc=str(val.get("desc", "")), ranks=nums))
    return tuple(sorted(out, key=lambda g: g.name))


def _rank(value: Any, group: str) -> int:
    """A member rank of ``group`` (an int, or digits); :class:`InputError` when it is not one."""
    if isinstance(value, str) and len(value) <= 9:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_WORLD_SIZE:
        return value
    raise InputError(f"group {_short(group)} lists {_short(value)} as a rank")


def _int(value: Any) -> int:
    """An FR number (an int, a float, or digits in JSON strings) that fits 64 bits."""
    if isinstance(value, str) and len(value) > 24:
        raise ValueError(f"{_short(value)} is not a 64-bit number")
    num = int(value)
    if not -(1 << 63) <= num < 1 << 64:
        raise ValueError(f"{_short(num)} does not fit 64 bits")
    return num


def _opt_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return _int(value)


def _entry(raw: Mapping[str, Any], members: Mapping[str, tuple[int, ...]]) -> FrEntry:
    if not isinstance(raw, Mapping):
        raise TypeError(f"{type(raw).__name__} where an object belongs")
    pg = raw.get("process_group") or ("", "")
    pg_name, pg_desc = str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
    name = str(raw["profiling_name"])
    started = _opt_int(raw.get("time_discovered_started_ns")) or None  # JSON writes 0 for none
    completed = _opt_int(raw.get("time_discovered_completed_ns")) or None
    state = str(raw.get("state") or "")
    if not state:
        state = "completed" if completed else ("started" if started else "scheduled")
    if raw.get("retired") is True:
        # retired: the work finished and left the watchdog's list. gloo records no CUDA events,
        # so its entries keep "scheduled" to the end: a healthy job's last collectives read as
        # all pending (the triage page drew them so), but retired is its completion
        state = "completed"
    is_p2p = bool(raw.get("is_p2p", False))
    peer = None
    m = _P2P.search(name)
    if m and pg_name in members:
        idx = int(m.group(3))
        ranks = members[pg_name]
        peer = ranks[idx] if 0 <= idx < len(ranks) else None
        is_p2p = True
    frames = tuple(
        StackFrame(
            file=str(f.get("filename", "")),
            line=_int(f.get("line", 0)),
            func=str(f.get("name", "")),
        )
        for f in raw.get("frames") or ()
        if isinstance(f, Mapping)
    )
    return FrEntry(
        pg_name=pg_name,
        pg_desc=pg_desc,
        pg_uid=_int(raw.get("pg_id", -1)),
        seq_id=_int(raw.get("collective_seq_id", -1)),
        p2p_seq_id=_int(raw.get("p2p_seq_id", -1)),
        is_p2p=is_p2p,
        op=normalize_op(name),
        profiling_name=name,
        state=state,
        created_ns=_int(raw.get("time_created_ns") or 0),
        input_sizes=tuple(tuple(_int(d) for d in s) for s in raw.get("input_sizes") or ()),
        input_dtypes=tuple(str(d) for d in raw.get("input_dtypes") or ()),
        record_id=_int(raw.get("record_id", -1)),
        thread=str(raw.get("thread_name", "")),
        peer=peer,
        frames=frames,
    )


def _status(raw: Any, entries: list[FrEntry]) -> dict[str, GroupStatus]:
    """``pg_status`` by group name, for the groups the entries tie to an id and that carry no p2p
    traffic in this dump (their counters then mean collective sequence numbers)."""
    if not isinstance(raw, Mapping):
        return {}
    names: dict[int, str] = {}
    p2p: set[str] = set()
    for e in entries:
        names.setdefault(e.pg_uid, e.pg_name)
        if e.is_p2p:
            p2p.add(e.pg_name)
    out: dict[str, GroupStatus] = {}
    for key, val in raw.items():
        try:
            uid = _int(key)
        except (TypeError, ValueError, OverflowError):
            continue
        name = names.get(uid)
        if name is None or name in p2p or not isinstance(val, Mapping):
            continue
        try:
            status = GroupStatus(
                last_enqueued=_opt_int(val.get("last_enqueued_collective")),
                last_started=_opt_int(val.get("last_started_collective")),
                last_completed=_opt_int(val.get("last_completed_collective")),
            )
        except (TypeError, ValueError, OverflowError):
            continue
        if _consistent(status, [e for e in entries if e.pg_name == name]):
            out[name] = status
    return out


def _consistent(status: GroupStatus, entries: list[FrEntry]) -> bool:
    """The status agrees with the entries: nothing enqueued beyond it, nothing pending at or
    below its last completed (a status that disagrees is ignored, the entries are used)."""
    if status.last_enqueued is None or status.last_completed is None:
        return False
    for e in entries:
        if e.seq_id > status.last_enqueued:
            return False
        if e.pending and e.seq_id <= status.last_completed:
            return False
    return True
