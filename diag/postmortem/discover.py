"""Walk a path and read whatever a failed run left there, classified by content, not by name.

Each file is sniffed from its first bytes: a pickle (``0x80``) is a Flight Recorder dump; a JSON
object is an FR dump (``version`` + ``pg_config``/``entries``), a torchelastic error file
(``message``) or something else (ignored); text is a worker log; other binary files are skipped.
A file *named* like a dump (``_dump_3``, ``nccl_trace_rank_3``, ``*.pkl``) or an error file
(``error.json``) that does not read as one is a problem line, as is any dump or error file that is
truncated or corrupt. Nothing raises for one bad file; :class:`~diag.errors.InputError` only when
the path is missing or holds nothing to analyze.

No file can hurt the reading of the others (:mod:`diag.untrusted`): only regular files are opened
(a FIFO, socket or device is a problem line, never blocked on), a dump or JSON file is read whole
only up to a cap (:data:`MAX_JSON_BYTES`, :data:`~diag.postmortem.fr_pickle.MAX_DUMP_BYTES`), a
log is streamed with overlong lines cut, pickles and JSON are parsed with bounded depth, size and
numbers, and anything a reader still raises becomes that file's problem line. File names are
shown with undecodable bytes and control characters escaped (``\xff``), so every problem line is
one printable line. A world size a log claims is checked against what the files show: one above
:data:`~diag.postmortem.records.MAX_WORLD_SIZE`, or not above a rank that left remains, is a
problem line and not used (the analysis holds per-rank state for the whole job).

In a diag run directory its own files (``store/``, ``traces/``, ``run.json``, ``control.json``,
``findings.jsonl``, the daemon's and analyzer's logs) are not remains and are skipped; the job's
output (``logs/job.log``) and any dumps inside are read. Files are visited in sorted order, so
the result (and every finding built on it) is the same on every run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from diag.errors import InputError
from diag.postmortem.elastic import is_error_file, local_rank_from_path, read_error_file
from diag.postmortem.fr_dumps import DUMP_NAME, dump_from_obj, is_fr_json, read_dump_file
from diag.postmortem.fr_pickle import MAX_DUMP_BYTES
from diag.postmortem.logs import LogResult, parse_log
from diag.postmortem.records import MAX_WORLD_SIZE, Clue, RankDump, Remains, fatal_exitcode
from diag.untrusted import (
    OutOfBounds,
    check_json,
    loads_json,
    open_regular,
    printable,
    read_capped,
    text_lines,
)

log = logging.getLogger(__name__)

MAX_FILES = 20_000
#: Largest JSON file read whole (dump or error file); a larger one not named so is read as a log.
MAX_JSON_BYTES = 64 << 20
#: Directory levels walked below the path.
MAX_DIR_DEPTH = 32
_SKIP_DIRS = {".git", "__pycache__", ".venv", "node_modules", ".pytest_cache", ".mypy_cache"}
_SKIP_EXT = (".parquet", ".gz", ".zip", ".tar", ".so", ".pyc", ".png", ".jpg", ".html", ".wal")
_RUN_SKIP = {
    "store",
    "traces",
    "run.json",
    "control.json",
    "findings.jsonl",
    "daemon.log",
    "analyzer.log",
}
#: Keys that make JSON beyond bounds worth a problem line though its name does not claim it.
_REMAINS_KEYS = re.compile(rb'"(version|pg_config|entries|message|extraInfo)"')
_RANK_FILE = re.compile(r"rank[_-]?(\d{1,7})(?!\d)", re.IGNORECASE)


def is_run_dir(path: Path) -> bool:
    """A diag run directory (``diag run`` / ``diag analyzer`` wrote it)."""
    return path.is_dir() and (path / "store").is_dir()


def collect(path: Path) -> Remains:
    """Everything readable under ``path`` (a directory or one file) as :class:`Remains`."""
    shown = printable(str(path))
    if not path.exists():
        raise InputError(f"{shown} does not exist")
    if not (path.is_dir() or path.is_file()):  # a FIFO, socket or device: say which
        try:
            open_regular(path).close()
        except InputError as exc:
            raise InputError(f"{shown}: {exc}") from None
        except OSError as exc:
            raise InputError(f"{shown}: cannot read ({exc.strerror or exc})") from None
    run_dir = is_run_dir(path)
    problems: list[str] = []
    files = [path] if path.is_file() else _walk(path, run_dir, problems)
    if len(files) > MAX_FILES:
        problems.append(f"{shown}: more than {MAX_FILES} files; read the first {MAX_FILES}")
        files = files[:MAX_FILES]
    dumps: dict[int, RankDump] = {}
    clues: list[Clue] = []
    local_to_global: dict[int, int] = {}
    claims: list[tuple[int, str]] = []  # (world size, the file that says so)
    num_logs = num_errors = 0
    seen: set[int] = set()
    seen_local: set[int] = set()
    for f in files:
        display = shown if f == path else printable(os.path.join(path, f.relative_to(path)))
        try:
            kind, payload = _read(f, display)
        except InputError as exc:
            problems.append(f"{display}: {printable(str(exc))}")
            continue
        except OSError as exc:
            problems.append(f"{display}: cannot read ({printable(str(exc.strerror or exc))})")
            continue
        except Exception as exc:  # a reader's bug must cost this file only, never the triage
            log.debug("reading %s failed", display, exc_info=True)
            problems.append(f"{display}: not read ({type(exc).__name__}: {printable(str(exc))})")
            continue
        if kind == "dump":
            assert isinstance(payload, RankDump)
            old = dumps.get(payload.rank)
            if old is not None:
                keep = max((old, payload), key=lambda d: (len(d.entries), d.file))
                problems.append(
                    f"{display}: a second dump of rank {payload.rank}; using {keep.file}"
                )
                payload = keep
            dumps[payload.rank] = payload
        elif kind == "error":
            assert isinstance(payload, Clue)
            clues.append(payload)
            num_errors += 1
        elif kind == "log":
            assert isinstance(payload, LogResult)
            clues.extend(payload.clues)
            local_to_global.update(payload.rendezvous.local_to_global)
            if payload.rendezvous.world_size is not None:
                claims.append((payload.rendezvous.world_size, display))
            seen |= payload.ranks_seen
            seen_local |= payload.locals_seen
            num_logs += 1
            if payload.num_bad_lines:
                problems.append(
                    f"{display}: {payload.num_bad_lines} line(s) not read ({payload.first_bad})"
                )
    ordered = tuple(dumps[r] for r in sorted(dumps))
    known = seen | set(dumps) | {c.rank for c in clues if c.rank is not None}
    known |= set(local_to_global.values())
    world = _claimed_world(claims, known, problems) or _world_from_dumps(ordered)
    seen_local |= {c.local_rank for c in clues if c.local_rank is not None}
    mapping = local_map(local_to_global, world, bool(ordered), seen_local)
    resolved = _resolve(clues, mapping)
    seen |= {d.rank for d in ordered} | {c.rank for c in resolved if c.rank is not None}
    seen |= {mapping[r] for r in seen_local if r in mapping}
    hosts = {c.rank: c.host for c in resolved if c.rank is not None and c.host and c.kind == "exit"}
    remains = Remains(
        root=path,
        dumps=ordered,
        clues=resolved,
        problems=tuple(problems),
        num_logs=num_logs,
        num_error_files=num_errors,
        world_size=world,
        hosts=hosts,
        ranks_seen=tuple(sorted(seen)),
    )
    if remains.empty and not run_dir:
        raise InputError(
            f"{shown}: nothing to triage (no diag run, Flight Recorder dumps, torchelastic error "
            "files or worker logs)"
        )
    return remains


def _claimed_world(
    claims: Iterable[tuple[int, str]], known: set[int], problems: list[str]
) -> int | None:
    """The first world size a file claims that the files bear out (more ranks than the highest
    rank that left remains, at most :data:`MAX_WORLD_SIZE`); each one that is not is a problem
    line."""
    top = max(known, default=-1)
    world = None
    for size, source in claims:
        if size > MAX_WORLD_SIZE:
            what = str(size) if size < 10**18 else f"a {size.bit_length()}-bit number"
            problems.append(
                f"{source}: claims a world size of {what}, more than the {MAX_WORLD_SIZE} ranks "
                "diag analyzes; not used"
            )
        elif size <= top:
            problems.append(
                f"{source}: claims a world size of {size}, but rank {top} left remains; not used"
            )
        elif world is None:
            world = size
    return world


def _walk(root: Path, run_dir: bool, problems: list[str]) -> list[Path]:
    out: list[Path] = []

    def unreadable(exc: OSError) -> None:
        where = printable(str(exc.filename or root))
        problems.append(f"{where}: folder not read ({printable(str(exc.strerror or exc))})")

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        here = Path(dirpath)
        top = here == root
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP_DIRS and not (run_dir and top and d in _RUN_SKIP)
        )
        if dirnames and len(here.relative_to(root).parts) >= MAX_DIR_DEPTH:
            problems.append(
                f"{printable(dirpath)}: folders nest more than {MAX_DIR_DEPTH} levels below "
                f"{printable(str(root))}; not read below here"
            )
            dirnames[:] = []
        for name in sorted(filenames):
            if run_dir and name in _RUN_SKIP:
                continue
            if name.endswith(_SKIP_EXT) or name.startswith(".") or (here / name).is_symlink():
                continue
            out.append(here / name)
        if len(out) > MAX_FILES:
            break
    return out


def _read(f: Path, display: str) -> tuple[str, object]:
    """``(kind, record)``: ``dump`` -> RankDump, ``error`` -> Clue, ``log`` -> LogResult,
    ``skip`` -> None."""
    named_dump = bool(DUMP_NAME.search(f.name))
    named_error = f.name.endswith(".json") and "error" in f.name
    claimed = named_dump or named_error
    with open_regular(f) as fh:
        head = fh.read(4096)
        if not head:
            if named_dump or named_error:
                raise InputError("empty file")
            return "skip", None
        fh.seek(0)
        if head[:1] == b"\x80" or (named_dump and head.lstrip()[:1] != b"{"):
            return "dump", read_dump_file(f, read_capped(fh, MAX_DUMP_BYTES, "dump"), display)
        size = os.fstat(fh.fileno()).st_size
        if head.lstrip()[:1] == b"{" and (size <= MAX_JSON_BYTES or claimed):
            try:
                obj = loads_json(read_capped(fh, MAX_JSON_BYTES, "JSON file"), check=False)
            except InputError as exc:
                # unnamed, it is a problem only as one line (not JSON lines, not a log) that is
                # not JSON, or that is beyond bounds and names a dump's or error file's keys
                one_line = head.count(b"\n") < 2
                if claimed or (
                    one_line and (not isinstance(exc, OutOfBounds) or _REMAINS_KEYS.search(head))
                ):
                    raise
                obj = None  # JSON lines or a log that starts with "{": read as text below
            if obj is not None:
                if is_fr_json(obj):
                    check_json(obj)
                    return "dump", dump_from_obj(f, obj, display)
                if is_error_file(obj):
                    check_json(obj)
                    return "error", read_error_file(f, obj, display)
                if named_error:
                    raise InputError("JSON that is not a torchelastic error file")
                return "skip", None
            fh.seek(0)
        if b"\x00" in head:
            return "skip", None
        m = _RANK_FILE.search(f.name)
        res = parse_log(
            text_lines(fh),
            display,
            rank=int(m.group(1)) if m else None,
            local_rank=local_rank_from_path(f),
        )
    return "log", res


def _world_from_dumps(dumps: tuple[RankDump, ...]) -> int | None:
    sizes = [len(g.ranks) for d in dumps for g in d.groups]
    return max(sizes) if sizes else None


def local_map(
    local_to_global: dict[int, int], world: int | None, have_dumps: bool, locals_seen: set[int]
) -> dict[int, int]:
    """Local -> global rank: torchrun's rendezvous map where a log has it; else the identity
    when the job ran on one node (the local ranks seen cover the whole job, or nothing gives
    its size and no dump says otherwise); else nothing (a local rank alone names no rank)."""
    if local_to_global:
        return dict(local_to_global)
    if (world is not None and len(locals_seen) >= world) or (world is None and not have_dumps):
        return {r: r for r in locals_seen}
    return {}


def _resolve(clues: list[Clue], mapping: dict[int, int]) -> tuple[Clue, ...]:
    """Give clues their global rank: by the local -> global ``mapping``, and an error file's
    from torchrun's failure summary line that names its path."""
    by_file = {
        _tail(c.error_file): c
        for c in clues
        if c.kind == "exit" and c.error_file and c.rank is not None
    }
    out = []
    for c in clues:
        rank, host = c.rank, c.host
        if rank is None and c.error_file and _tail(c.error_file) in by_file:
            summary = by_file[_tail(c.error_file)]
            rank, host = summary.rank, host or summary.host
        if rank is None and c.local_rank is not None:
            rank = mapping.get(c.local_rank)
        out.append(
            dataclasses.replace(c, rank=rank, host=host) if (rank, host) != (c.rank, c.host) else c
        )
    return _own_aborts(out)


def _own_aborts(clues: list[Clue]) -> tuple[Clue, ...]:
    """A native abort's message or a fatal report on a line no prefix ties to a rank (a job's
    output without ``--tee``) belongs to the one rank that died of that signal, if only one
    did (torchrun's exit lines say which)."""
    died: dict[int, set[int]] = {}
    for c in clues:
        if c.kind == "exit" and c.rank is not None and c.exitcode is not None:
            died.setdefault(c.exitcode, set()).add(c.rank)
    out = []
    for c in clues:
        code = fatal_exitcode(c) if c.rank is None else None
        ranks = died.get(code, set()) if code is not None else set()
        out.append(dataclasses.replace(c, rank=next(iter(ranks))) if len(ranks) == 1 else c)
    return tuple(out)


def _tail(path: str) -> str:
    """The last three components of a path (``attempt_0/3/error.json``): a copied run folder
    keeps them when the absolute path changes."""
    return "/".join(Path(path).parts[-3:])
