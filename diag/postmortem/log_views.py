"""Process-group standings from logs alone, when no Flight Recorder dump was written.

c10d's watchdog logs, per rank, the collective it timed out on (``WorkNCCL(SeqNum=S,
OpType=OP ...)``) and, since torch 2.4, the group's ``last enqueued work: E, last completed
work: C``; the ``[PG ID i PG GUID g(desc) Rank k]`` tag names the group. Those lines give each
reporting rank a :class:`~diag.postmortem.groups.Member` (stuck at ``S``; ``C = S - 1`` when only
the timeout was logged: the watchdog reports the oldest unfinished collective), so the same rules
as for dumps apply (:func:`~diag.postmortem.groups.analyze_group`). The default group's members are
every rank of the job when its size is known; other groups' members are the ranks that reported.
A member that logged nothing about the group but logged something else was alive and never
issued the collective (``absent``); one that logged nothing at all has ``no record``.

Gloo's "Timed out waiting Nms for recv operation to complete" names no collective:
:func:`silent_ranks` then says which ranks of the job did *not* time out while others did. When
every rank timed out (a busy host: the rank that skipped a collective waits in the next one and
times out too, before the launcher stops it), :func:`odd_call_sites` compares where in the job's
own code each rank's timed-out call was made: the ranks away from the others' call site were not
in the same collective.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from diag.postmortem.groups import GroupView, Member, Stuck, analyze_group
from diag.postmortem.records import Clue, GroupInfo, StackFrame

_WAITING = ("timeout", "pg_status")


def _default(pg: str) -> bool:
    return pg == "" or pg.startswith("0(")


def views_from_clues(clues: Sequence[Clue], world_size: int | None) -> list[GroupView]:
    """One view per group named by the watchdog's lines (rules in the module docstring)."""
    rows = [c for c in clues if c.kind in _WAITING and c.seq is not None and c.rank is not None]
    speakers = {c.rank for c in clues if c.rank is not None}
    out = []
    for pg in sorted({c.pg for c in rows}):
        mine = [c for c in rows if c.pg == pg]
        ranks = {c.rank for c in mine if c.rank is not None}
        if _default(pg) and world_size:
            ranks |= set(range(world_size))
        if len(ranks) < 2:
            continue
        by_rank: dict[int, list[Clue]] = {}
        for c in mine:
            if c.rank is not None:
                by_rank.setdefault(c.rank, []).append(c)
        members = []
        for r in sorted(ranks):
            said = by_rank.get(r, [])
            if not said:
                members.append(Member(rank=r, has_record=r in speakers))
                continue
            seq = min(c.seq for c in said if c.seq is not None)
            op = next((c.op for c in said if c.op), "collective")
            enq = max((c.last_enqueued for c in said if c.last_enqueued is not None), default=None)
            comp = min(
                (c.last_completed for c in said if c.last_completed is not None), default=seq - 1
            )
            members.append(
                Member(
                    rank=r,
                    has_record=True,
                    last_enqueued=enq,
                    last_completed=comp,
                    stuck=Stuck(seq=seq, op=op, state="scheduled"),
                    source=said[0].where(),
                )
            )
        name, _, desc = pg.partition("(")
        group = GroupInfo(
            name=name or "0", desc=desc.rstrip(")") or "default_pg", ranks=tuple(sorted(ranks))
        )
        out.append(analyze_group(group, members))
    return out


def silent_ranks(
    clues: Iterable[Clue], world: Iterable[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(waiting, silent)``: ranks that logged a timeout while waiting, and the ranks of
    ``world`` that did not (the caller rules out ranks that failed on their own first)."""
    clues = list(clues)
    waiting = sorted({c.rank for c in clues if c.kind == "timeout" and c.rank is not None})
    silent = sorted(set(world) - set(waiting))
    return tuple(waiting), tuple(silent)


#: parts of a frame's path that mark a library (or the interpreter), not the job's own code
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3")


def job_frame(stack: Sequence[StackFrame]) -> StackFrame | None:
    """The innermost frame of the job's own code in a traceback (outermost first), or ``None``."""
    for frame in reversed(stack):
        path = frame.file.replace("\\", "/")
        if not frame.file.startswith("<") and not any(part in path for part in _LIBRARY):
            return frame
    return None


def timeout_sites(clues: Iterable[Clue], waiting: Iterable[int]) -> dict[int, StackFrame]:
    """Where each rank of ``waiting`` made the call that timed out: the job's own innermost
    frame of the first traceback the rank logged (a timeout raises from the call)."""
    want = set(waiting)
    sites: dict[int, StackFrame] = {}
    for c in clues:
        if c.kind == "exception" and c.rank in want and c.rank not in sites and c.stack:
            frame = job_frame(c.stack)
            if frame is not None:
                sites[c.rank] = frame
    return sites


def odd_call_sites(
    sites: dict[int, StackFrame],
) -> tuple[tuple[int, ...], StackFrame, tuple[int, ...]] | None:
    """``(odd ranks, the majority's site, the majority's ranks)`` when a strict majority of the
    ranks (at least two, of at least three) timed out at one call site and the rest elsewhere;
    else ``None`` (no majority: nothing says which side is the odd one)."""
    if len(sites) < 3:
        return None
    by_site: dict[tuple[str, int], list[int]] = {}
    for rank, frame in sites.items():
        by_site.setdefault((frame.file, frame.line), []).append(rank)
    if len(by_site) < 2:
        return None
    majority = max(by_site.values(), key=len)
    if len(majority) * 2 <= len(sites):
        return None
    odd = tuple(sorted(r for r in sites if r not in majority))
    return odd, sites[majority[0]], tuple(sorted(majority))
