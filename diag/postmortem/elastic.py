"""torchelastic error files (``TORCHELASTIC_ERROR_FILE``) -> :class:`Clue` records.

``@record`` (``torch.distributed.elastic.multiprocessing.errors``) writes, on an uncaught
exception in a worker::

    {"message": {"message": "ValueError: bad batch",
                 "extraInfo": {"py_callstack": "Traceback (most recent call last): ...",
                               "timestamp": "1700000000"}}}

and the agent may add ``"errorCode"`` (the exit code) when it copies a child's file to its own; an
older or hand-written file has ``{"message": "<text>", "timestamp": N}``. The file names no rank:
torchrun puts it at ``<log dir>/<run id>/attempt_<n>/<local rank>/error.json``, so the local rank
is the parent directory's number; a ``[rankN]`` or ``Rank N]`` in the message (c10d's format)
gives the global rank, and torchrun's failure summary in a log (``error_file: ...``) ties the
path to a global rank later (:mod:`diag.postmortem.analyze`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from diag.errors import InputError
from diag.postmortem.records import Clue
from diag.postmortem.tracebacks import exception_type, parse_traceback

_RANK_IN_TEXT = re.compile(
    r"\[rank(\d{1,7})\]|\[Rank (\d{1,7})\]|PG GUID 0\(default_pg\) Rank (\d{1,7})\]"
)
_ATTEMPT = re.compile(r"^attempt_\d+$")


def is_error_file(obj: Any) -> bool:
    """True for a JSON object laid out like a torchelastic error file."""
    if not isinstance(obj, dict) or "message" not in obj:
        return False
    msg = obj["message"]
    return isinstance(msg, str) or (isinstance(msg, Mapping) and "message" in msg)


def local_rank_from_path(path: Path) -> int | None:
    """torchrun's ``attempt_<n>/<local rank>/error.json`` layout -> the local rank."""
    parent = path.parent
    if parent.name.isdigit() and len(parent.name) <= 7 and _ATTEMPT.match(parent.parent.name):
        return int(parent.name)
    return None


def rank_in_text(text: str) -> int | None:
    """A global rank the text names (``[rank3]:`` prefixes, default-group ``Rank 3]``)."""
    m = _RANK_IN_TEXT.search(text)
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))


def read_error_file(path: Path, obj: Any, display: str) -> Clue:
    """One parsed error file -> an ``exception`` :class:`Clue`; :class:`InputError` if the
    layout is not torchelastic's."""
    if not is_error_file(obj):
        raise InputError("not a torchelastic error file (no message)")
    msg = obj["message"]
    callstack = ""
    ts: Any = obj.get("timestamp")
    code: Any = None
    if isinstance(msg, Mapping):
        extra = msg.get("extraInfo") or {}
        if not isinstance(extra, Mapping):
            extra = {}
        callstack = str(extra.get("py_callstack") or "")
        ts = extra.get("timestamp", ts)
        code = msg.get("errorCode")
        text = str(msg.get("message") or "")
    else:
        text = str(msg)
    frames, exc_type, exc_line = parse_traceback(callstack)
    first = text.strip().splitlines()[0] if text.strip() else exc_line
    rank = rank_in_text(text) if rank_in_text(text) is not None else rank_in_text(callstack)
    try:
        ts_s: float | None = float(ts) if ts not in (None, "") else None
    except (TypeError, ValueError):
        ts_s = None
    if ts_s is not None and not math.isfinite(ts_s):
        ts_s = None
    try:
        exitcode = int(code) if code is not None else None
    except (TypeError, ValueError, OverflowError):
        exitcode = None
    if exitcode is not None and not -(1 << 31) <= exitcode < 1 << 31:
        exitcode = None  # not an exit status
    return Clue(
        kind="exception",
        source=display,
        rank=rank,
        local_rank=local_rank_from_path(path),
        text=first[:500],
        detail="\n".join(text.strip().splitlines()[1:6])[:2000],
        exc_type=exc_type or exception_type(first),
        stack=frames,
        ts_s=ts_s,
        exitcode=exitcode,
        error_file=str(path),
    )
