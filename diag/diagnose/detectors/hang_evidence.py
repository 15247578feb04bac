"""Reading the hang evidence: each rank's state at a stall, what its stack says, which errors are
only the echo of another rank's failure. Pure helpers for :mod:`diag.diagnose.detectors.hang`.

Stacks are :class:`~diag.schema.StackDump` text: one frame per line, innermost first,
``"<file>:<line> <function>"``; diag's own frames (its wrappers around the job's calls) are
skipped. A stack's *cause* is the category of its innermost frame that has one:

- ``checkpoint``: ``torch/serialization.py``, ``torch/distributed/checkpoint/``;
- ``data``: ``torch/utils/data/``, or a function named ``__getitem__``, ``__getitems__``,
  ``_next_data`` or ``__next__``;
- ``collective``: ``torch/distributed/distributed_c10d.py`` and native ``c10d::``/``gloo::``/
  ``nccl`` frames (DDP's reducer waiting for its all-reduce included);
- none of these: ``compute``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pandas as pd

CHECKPOINT_FILES = ("torch/serialization.py", "torch/distributed/checkpoint/")
DATA_FILES = ("torch/utils/data/",)
DATA_FUNCS = ("__getitem__", "__getitems__", "_next_data", "__next__")
COLLECTIVE_FILES = ("torch/distributed/distributed_c10d.py", "torch/distributed/c10d_logger.py")
COLLECTIVE_NATIVE = ("c10d::", "gloo::", "nccl", "ProcessGroup")
#: diag's own frames in a stack (``agent/``: where the hook lived before the layout of 0.2)
OWN_FRAMES = ("/diag/hook/", "/diag/agent/")
LIBRARY_PATHS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")

#: Error messages that are the echo of a peer's failure (its connection dropped, a collective
#: timed out waiting for it), not a failure of their own.
ECHO_PATTERNS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "timed out",
    "timeout",
    "remote worker",
    "communicator was aborted",
    "socket closed",
)
ECHO_TYPES = ("KeyboardInterrupt",)
TEARDOWN_SIGNALS = (1, 2, 15)  # SIGHUP, SIGINT, SIGTERM: torchrun stopping the other workers


@dataclass(frozen=True, slots=True)
class TailEntry:
    """One Flight Recorder entry of a rank's report (its signature is op and sizes)."""

    pg: str
    seq: int
    op: str
    sizes: str
    done: bool


@dataclass(frozen=True, slots=True)
class RankState:
    """One rank at its newest stall report (times wall-clock ns)."""

    rank: int
    host: str
    ts_ns: int
    stalled_since_ns: int
    stall_ns: int
    threshold_ns: int
    step: int
    last_step: int
    pg: str
    seq: int  # the oldest collective in flight; -1: none
    op: str
    sizes: str
    status: dict[str, tuple[int, int]]  # pg -> (last enqueued, last completed)
    tail: tuple[TailEntry, ...]

    @property
    def signature(self) -> tuple[str, str]:
        return self.op, self.sizes

    def enqueued(self, pg: str) -> int:
        return self.status.get(pg, (-1, -1))[0]


def _json(text: str, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


def _sizes(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def rank_states(hangs: pd.DataFrame) -> dict[int, RankState]:
    """The newest report of every rank."""
    out: dict[int, RankState] = {}
    if hangs.empty:
        return out
    for row in hangs.sort_values("ts_ns", kind="stable").itertuples():
        status = {str(k): (int(v[0]), int(v[1])) for k, v in _json(row.pg_status_json, {}).items()}
        tail = tuple(
            TailEntry(str(t["pg"]), int(t["seq"]), str(t["op"]), _sizes(t["sizes"]), t["done"])
            for t in _json(row.fr_tail_json, [])
        )
        sizes = _sizes(_json(row.input_sizes, [])) if row.input_sizes else ""
        out[int(row.rank)] = RankState(
            rank=int(row.rank), host=str(row.host), ts_ns=int(row.ts_ns),
            stalled_since_ns=int(row.stalled_since_ns), stall_ns=int(row.stall_ns),
            threshold_ns=int(row.threshold_ns), step=int(row.step), last_step=int(row.last_step),
            pg=str(row.pg_name), seq=int(row.seq_id), op=str(row.op), sizes=sizes,
            status=status, tail=tail,
        )  # fmt: skip
    return out


def breaks_pattern(state: RankState) -> bool | None:
    """Does the rank's collective in flight differ from what its own recent collectives on that
    group predict? The prediction is the entry one period earlier, the period being the shortest
    ``p`` (up to 16) for which each of the newest ``2p + 2`` completed entries equals the one
    ``p`` before it (earlier entries may differ: start-up broadcasts). None when no period shows
    or nothing is in flight."""
    if state.seq < 0:
        return None
    sigs = {t.seq: (t.op, t.sizes) for t in state.tail if t.pg == state.pg and t.done}
    seqs = sorted(sigs)
    for period in range(1, min(16, len(seqs) // 2) + 1):
        recent = seqs[-(2 * period + 2) :]
        pairs = [(s, s - period) for s in recent if s - period in sigs]
        if len(pairs) >= period + 1 and all(sigs[a] == sigs[b] for a, b in pairs):
            expected = sigs.get(state.seq - period)
            return None if expected is None else expected != state.signature
    return None


def frames_of(text: str) -> list[str]:
    """A stack's frames, innermost first, without diag's own."""
    return [f for f in text.splitlines() if f and not any(o in f for o in OWN_FRAMES)]


def _where(frame: str) -> tuple[str, str]:
    path, _, func = frame.partition(" ")
    return path.rsplit(":", 1)[0], func


def stack_cause(frames: list[str]) -> tuple[str, str]:
    """(cause, the frame that shows it) of a stack: see the module docstring."""
    for frame in frames:
        path, func = _where(frame)
        if any(p in path for p in CHECKPOINT_FILES):
            return "checkpoint", frame
        if any(p in path for p in DATA_FILES) or func.rsplit(".", 1)[-1] in DATA_FUNCS:
            return "data", frame
        if any(p in path for p in COLLECTIVE_FILES) or any(n in func for n in COLLECTIVE_NATIVE):
            return "collective", frame
    return "compute", frames[0] if frames else ""


def user_frame(frames: list[str]) -> str:
    """The innermost frame of the job's own code (not a library, not native); else the
    innermost."""
    for frame in frames:
        path, _ = _where(frame)
        if not frame.split(" ", 1)[0].endswith(":0") and not any(p in path for p in LIBRARY_PATHS):
            return short(frame)
    return short(frames[0]) if frames else ""


def compact(frame: str) -> str:
    """A frame with a library's path cut to its package: ``.../site-packages/torch/x.py:3 f``
    -> ``torch/x.py:3 f``."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in frame:
            return frame.split(marker, 1)[1]
    return frame


def short(frame: str) -> str:
    """``/a/b/train.py:12 f`` -> ``train.py:12 f``."""
    path, _, func = frame.partition(" ")
    return f"{path.rsplit('/', 1)[-1]} {func}".strip()


def main_stack(stacks: pd.DataFrame, rank: int, after_ns: int = 0) -> tuple[list[str], str]:
    """(frames, origin) of the rank's main thread, newest dump after ``after_ns``: the hook's
    Python stack first, py-spy's (native frames too) when the hook sent none."""
    if stacks.empty:
        return [], ""
    mine = stacks[(stacks["rank"] == rank) & stacks["is_main"] & (stacks["ts_ns"] >= after_ns)]
    for origin in ("python", "py-spy"):
        rows = mine[mine["origin"] == origin]
        if len(rows):
            return frames_of(str(rows.iloc[-1]["frames"])), origin
    return [], ""


def is_echo(exc_type: str, message: str) -> bool:
    """Is this exception the echo of another rank's failure (see :data:`ECHO_PATTERNS`)?"""
    text = message.lower()
    return exc_type.rsplit(".", 1)[-1] in ECHO_TYPES or any(p in text for p in ECHO_PATTERNS)


def majority(values: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The value held by more than half of ``values``, if one is."""
    if not values:
        return None
    value, count = Counter(values).most_common(1)[0]
    return value if count * 2 > len(values) else None
