"""What a failed run leaves behind, as typed records: the readers' output, the analysis' input.

* :class:`RankDump`: one rank's Flight Recorder (FR) dump (pickle or JSON; NCCL or gloo): its
  process groups (``pg_config``), per-group progress (``pg_status``) and buffered entries.
* :class:`Clue`: one fact found in a worker log or a torchelastic error file, tied to a rank where
  the text says which: a Python exception with its stack, a CUDA, NCCL or Xid error, a watchdog
  timeout with the sequence number it stuck at, a process's exit code or signal.
* :class:`Remains`: everything found under a path, plus one line per file that could not be read
  (``"<file>: <why>"``), so a corrupt file never hides the rest.

Sequence numbers follow c10d: ``seq_id`` is a process group's collective counter (the same value
on every member for the same collective); ``last_enqueued``/``last_completed`` are the highest
collective a rank issued / saw finish in that group (``None``: unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: Ranks diag analyzes: a rank is ``0 .. MAX_WORLD_SIZE - 1``; a file claiming a larger job is
#: not believed (the analysis holds per-rank state for the whole job).
MAX_WORLD_SIZE = 1 << 18


@dataclass(frozen=True, slots=True, kw_only=True)
class StackFrame:
    """One frame of a Python traceback or of an FR entry's stack."""

    file: str
    line: int
    func: str
    code: str = ""

    def text(self) -> str:
        """``file:line in func`` (the form a traceback's last frame is quoted in)."""
        return f"{self.file}:{self.line} in {self.func}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FrEntry:
    """One FR entry: a collective or p2p operation as one rank recorded it.

    ``state`` is ``scheduled`` (issued, its kernel not seen starting: FR without timing never says
    more until completion), ``started`` or ``completed``. ``created_ns`` is wall-clock time of
    issue. ``peer`` is the global rank at the other end of a p2p op (``None`` if unknown).
    """

    pg_name: str
    pg_desc: str
    pg_uid: int
    seq_id: int
    p2p_seq_id: int
    is_p2p: bool
    op: str
    profiling_name: str
    state: str
    created_ns: int
    input_sizes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    record_id: int = -1
    thread: str = ""
    peer: int | None = None
    frames: tuple[StackFrame, ...] = ()

    @property
    def pending(self) -> bool:
        return self.state != "completed"

    def shape(self) -> str:
        """``[[4096, 5120]] BFloat16``: what the op moved, for evidence notes."""
        sizes = ", ".join("[" + ", ".join(str(d) for d in s) + "]" for s in self.input_sizes)
        return f"[{sizes}] {'/'.join(self.input_dtypes)}".strip()


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInfo:
    """A process group as a dump declares it: name (c10d's guid), description, member ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]

    def label(self) -> str:
        return f"{self.desc} (pg {self.name})" if self.desc else f"pg {self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStatus:
    """FR's ``pg_status`` for one group on one rank (collective sequence numbers)."""

    last_enqueued: int | None
    last_completed: int | None
    last_started: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RankDump:
    """One rank's FR dump. ``status`` maps group names to :class:`GroupStatus` (only groups whose
    FR ``pg_id`` the dump's own entries tie to a name); ``entries`` are in record order."""

    rank: int
    file: str
    version: str = ""
    backend: str = ""
    groups: tuple[GroupInfo, ...] = ()
    entries: tuple[FrEntry, ...] = ()
    status: Mapping[str, GroupStatus] = field(default_factory=dict)


#: Kinds of :class:`Clue`.
CLUE_KINDS = (
    "exception",  # a Python traceback's last line, a C++ exception's what(), an error file
    "error",  # an error line outside a traceback: CUDA error, NCCL WARN, watchdog termination
    "oom",  # CUDA out of memory (also the host's OOM killer)
    "xid",  # an NVIDIA Xid line (kernel log)
    "timeout",  # a collective/recv timed out on this rank: it was waiting
    "pg_status",  # the watchdog's "last enqueued work: E, last completed work: C"
    "barrier",  # monitoredBarrier named ranks that did not arrive
    "exit",  # torchrun saw the worker exit (exit code, signal)
    "abort",  # a native abort's message: a failed heap check or C assertion, stack smashing
    "fatal",  # faulthandler's report of a fatal signal, with the crashing thread's stack
)

#: The exit code (minus the signal) each fatal signal faulthandler names ends the process with.
FATAL_SIGNALS = {
    "Segmentation fault": -11,
    "Aborted": -6,
    "Bus error": -7,
    "Floating point exception": -8,
    "Illegal instruction": -4,
}


def fatal_exitcode(clue: Clue) -> int | None:
    """The exit code an ``abort`` or ``fatal`` clue's process died with (``None``: unknown)."""
    if clue.kind == "abort":
        return -6
    if clue.kind == "fatal":
        name = clue.text.removeprefix("Fatal Python error: ").strip()
        return FATAL_SIGNALS.get(name)
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Clue:
    """One fact from a log line (or an error file), tied to ``rank`` when the text says which.

    ``rank`` is the global rank; ``local_rank`` the rank on its node when only that is known.
    ``seq``/``op``/``pg`` describe the collective a timeout names; ``last_enqueued``/
    ``last_completed`` come from the watchdog's PG status line; ``peers`` are the ranks a
    monitoredBarrier or dump signal names; ``exitcode`` is torchrun's (negative: killed by that
    signal). ``root`` marks torchrun's "Root Cause (first observed failure)". ``ts_s`` is Unix
    seconds where the text carries a full date.
    """

    kind: str
    source: str
    line_no: int = 0
    rank: int | None = None
    local_rank: int | None = None
    host: str = ""
    text: str = ""
    detail: str = ""
    exc_type: str = ""
    stack: tuple[StackFrame, ...] = ()
    seq: int | None = None
    op: str = ""
    pg: str = ""
    last_enqueued: int | None = None
    last_completed: int | None = None
    peers: tuple[int, ...] = ()
    exitcode: int | None = None
    pid: int | None = None
    error_file: str = ""
    root: bool = False
    ts_s: float | None = None

    def where(self) -> str:
        """``file:line`` (or just the file) for evidence notes."""
        return f"{self.source}:{self.line_no}" if self.line_no else self.source


@dataclass(frozen=True, slots=True, kw_only=True)
class Remains:
    """Everything read under ``root``: dumps (one per rank), clues, and the files that failed.

    ``problems`` are one line each, ``"<file>: <why>"``. ``world_size`` is the job's size where
    something said it (torchrun's rendezvous line, a dump's group of all ranks); ``hosts`` maps
    ranks to host names where known; ``ranks_seen`` are the global ranks some log line or dump
    speaks for (alive at some point, even if it logged no error).
    """

    root: Path
    dumps: tuple[RankDump, ...] = ()
    clues: tuple[Clue, ...] = ()
    problems: tuple[str, ...] = ()
    num_logs: int = 0
    num_error_files: int = 0
    world_size: int | None = None
    hosts: Mapping[int, str] = field(default_factory=dict)
    ranks_seen: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.dumps or self.num_logs or self.num_error_files or self.problems)
