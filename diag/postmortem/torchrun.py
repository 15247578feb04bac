"""torchrun's own reports in a log: its failure summary and its rendezvous result.

The failure summary (``ChildFailedError``'s message) lists each failed worker::

    Root Cause (first observed failure):
    [0]:
      time      : 2025-11-21_10:02:09
      host      : node7
      rank      : 2 (local_rank: 2)
      exitcode  : 1 (pid: 5103)
      error_file: /tmp/torchelastic_.../attempt_0/2/error.json
      traceback : Traceback (most recent call last): ...   (or "Signal 9 (SIGKILL) received by PID")

Each block becomes an ``exit`` :class:`Clue` (exit code negative for a signal; ``root`` for the
"Root Cause" block) and, when its traceback is there, an ``exception`` clue with its frames. The
rendezvous result (``local_ranks=[0, 1]``, ``global_ranks=[4, 5]``, ``global_world_sizes=[8,
8]``, one field a line) maps this node's local ranks to global ones and gives the job's size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime

from diag.postmortem.records import MAX_WORLD_SIZE, Clue
from diag.postmortem.tracebacks import HEADER, parse_traceback

_RDZV_LIST = re.compile(r"\b(local_ranks|global_ranks|global_world_sizes)=\[([\d, ]*)\]")
_RDZV_LINE = re.compile(r"^\s+(local_ranks|global_ranks|global_world_sizes)=\[[\d, ]*\]\s*$")
_IDX = re.compile(r"^\s*\[(\d+)\]:\s*$")
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_RANK_FIELD = re.compile(r"(-?\d{1,7})(?:\s*\(local_rank:\s*(\d{1,7})\))?(?!\d)")
_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID (\d+)")


@dataclass(slots=True)
class Rendezvous:
    """What torchrun's rendezvous lines said: the job's size, local -> global ranks."""

    world_size: int | None = None
    local_to_global: dict[int, int] = field(default_factory=dict)
    _locals: list[int] = field(default_factory=list)

    def feed(self, text: str) -> None:
        """A rendezvous line (or one field of the multi-line form)."""
        lists = {k: [int(x) for x in re.findall(r"\d+", v)] for k, v in _RDZV_LIST.findall(text)}
        ranks = lists.get("local_ranks", []) + lists.get("global_ranks", [])
        if any(r >= MAX_WORLD_SIZE for r in ranks):
            raise ValueError(f"a rank beyond {MAX_WORLD_SIZE - 1} in the rendezvous result")
        if lists.get("global_world_sizes"):
            self.world_size = lists["global_world_sizes"][0]
        if "local_ranks" in lists:
            self._locals = lists["local_ranks"]
        if "global_ranks" in lists:
            self.local_to_global.update(zip(self._locals, lists["global_ranks"], strict=False))

    def feed_field(self, raw: str) -> bool:
        """True (and read) if ``raw`` is one indented field line of the multi-line form."""
        if not _RDZV_LINE.match(raw):
            return False
        self.feed(raw)
        return True


@dataclass(slots=True)
class _Block:
    root: bool
    line_no: int
    fields: dict[str, str] = field(default_factory=dict)
    tb: list[str] = field(default_factory=list)


@dataclass(slots=True)
class SummaryReader:
    """Reads the failure summary out of a log, line by line: :meth:`feed` says whether it took
    the line; :meth:`close` returns the clues of the blocks read."""

    source: str
    clues: list[Clue] = field(default_factory=list)
    active: bool = False
    block: _Block | None = None

    def feed(self, raw: str, no: int) -> bool:
        stripped = raw.strip()
        if "Root Cause (first observed failure)" in raw or stripped == "Failures:":
            self._flush()
            self.block, self.active = _Block(root="Root Cause" in raw, line_no=no), True
            return True
        if not self.active:
            return False
        if stripped.startswith(("=" * 10, "-" * 10)):
            self._flush()
            self.block, self.active = None, not stripped.startswith("=")
            return True
        if _IDX.match(raw):
            root = bool(self.block and self.block.root and not self.block.fields)
            self._flush()
            self.block = _Block(root=root, line_no=no)
            return True
        if self.block is not None:
            m = _FIELD.match(raw)
            if m and m.group(1) not in self.block.fields:
                self.block.fields[m.group(1)] = m.group(2).strip()
            elif "traceback" in self.block.fields:
                self.block.tb.append(raw[2:] if raw.startswith("  ") else raw)
        return True

    def close(self) -> list[Clue]:
        self._flush()
        self.active = False
        return self.clues

    def _flush(self) -> None:
        """A finished block -> an ``exit`` clue (and an ``exception`` one for its traceback)."""
        block, self.block = self.block, None
        if block is None or "rank" not in block.fields:
            return
        f = block.fields
        rank_m = _RANK_FIELD.match(f.get("rank", ""))
        code_m = re.match(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", f.get("exitcode", ""))
        ts = None
        with contextlib.suppress(ValueError):
            ts = datetime.strptime(f.get("time", ""), "%Y-%m-%d_%H:%M:%S").timestamp()
        tb_first = f.get("traceback", "")
        signal = _SIGNAL.search(tb_first)
        error_file = f.get("error_file", "")
        exit_clue = Clue(
            kind="exit",
            source=self.source,
            line_no=block.line_no,
            rank=int(rank_m.group(1)) if rank_m else None,
            local_rank=int(rank_m.group(2)) if rank_m and rank_m.group(2) else None,
            host=f.get("host", ""),
            root=block.root,
            ts_s=ts,
            text=(signal.group(0) if signal else tb_first)[:500],
            exitcode=int(code_m.group(1)) if code_m else None,
            pid=int(code_m.group(2)) if code_m and code_m.group(2) else None,
            error_file="" if error_file == "<N/A>" else error_file,
        )
        self.clues.append(exit_clue)
        if tb_first.startswith(HEADER):
            frames, etype, eline = parse_traceback("\n".join([tb_first, *block.tb]))
            if etype:
                self.clues.append(
                    dataclasses.replace(
                        exit_clue,
                        kind="exception",
                        text=eline[:500],
                        exc_type=etype,
                        stack=frames,
                        exitcode=None,
                        pid=None,
                        error_file="",
                    )
                )
