"""Per process group: who is stuck where, who waits for whom (the facts a hang leaves in FR dumps).

Every member of a group issues the same collectives in the same order, numbered by the group's
collective sequence id, and a collective completes only when every member has joined it. So, for
one group, each member's *last enqueued* ``E`` and *last completed* ``C`` collective and the
oldest collective it has not seen complete (``stuck``) say (rules in :func:`analyze_group`):

* **stalled** - ``C_q < max C``: the peers completed collectives that member ``q`` took part in
  (they could not have completed without it), but ``q`` never saw them complete. Its own device
  stopped making progress (a GPU fault, a hung kernel, a watchdog unable to query the stream).
* **absent** - a member ``r`` is stuck at ``s`` and member ``q`` never issued ``s`` (``E_q < s``,
  or no record of the group at all): ``r`` waits for ``q``, which is stuck somewhere else or dead.
* **behind** - ``r`` waits for a ``q`` that completed less than ``r`` did (``C_q < C_r``).
* **not started** - ``r``'s copy of ``s`` started (FR with timing) and ``q``'s is only scheduled:
  ``q``'s stream is busy with earlier work.
* **no record** - ``q`` left no dump (or said nothing in the logs): ``r`` waits, nothing else
  in the group explains it, and fewer than half the members lack a record (with most of them
  missing, the few dumps there are cannot single anyone out).

Groups whose members all stand at the same place add nothing: they wait for something outside
(another group, a peer's pipeline stage). Point-to-point ops are matched by peer only (their
sequence ids count per pair, not per group) and are kept as weak waits: they say who waits on
whom, never who is at fault. Building members from dumps is :mod:`diag.postmortem.fr_groups`'s job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from diag.postmortem.records import GroupInfo

#: Reasons of a :class:`Wait`, strongest first.
REASONS = ("stalled", "absent", "behind", "not_started", "no_record")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stuck:
    """The oldest collective a member has not seen complete."""

    seq: int
    op: str
    state: str
    shape: str = ""
    created_ns: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One member's standing in one group; ``has_record``: a dump (or log) speaks for it."""

    rank: int
    has_record: bool
    last_enqueued: int | None = None
    last_completed: int | None = None
    stuck: Stuck | None = None
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """``waiter`` cannot progress in ``group`` until ``on`` does (``reason`` in :data:`REASONS`,
    or ``p2p`` for a pending send/recv with that peer)."""

    waiter: int
    on: int
    group: str
    reason: str
    seq: int
    op: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Flag:
    """A fact against ``rank`` in ``group``: ``kind`` in :data:`REASONS`; ``value`` against
    ``reference`` (last completed vs the peers' highest for ``stalled``, last enqueued vs the
    collective the peers wait in for ``absent``)."""

    rank: int
    group: str
    kind: str
    seq: int
    op: str
    value: float
    reference: float | None
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupView:
    """One group's members, the waits among them and the flags they raise."""

    group: GroupInfo
    members: tuple[Member, ...]
    waits: tuple[Wait, ...] = ()
    flags: tuple[Flag, ...] = ()


def analyze_group(group: GroupInfo, members: Sequence[Member]) -> GroupView:
    """Waits and flags of one group (rules in the module docstring), in rank order."""
    members = sorted(members, key=lambda m: m.rank)
    label = group.label()
    recorded = [m for m in members if m.has_record]
    completed = [m.last_completed for m in recorded if m.last_completed is not None]
    top = max(completed) if completed else None
    flags: list[Flag] = []
    for q in recorded:
        if q.stuck and top is not None and q.last_completed is not None and q.last_completed < top:
            flags.append(
                Flag(
                    rank=q.rank,
                    group=label,
                    kind="stalled",
                    seq=q.stuck.seq,
                    op=q.stuck.op,
                    value=q.last_completed,
                    reference=top,
                    note=f"stuck at seq {q.stuck.seq} ({q.stuck.op} {q.stuck.shape}, "
                    f"{q.stuck.state}); peers completed up to {top}",
                )
            )
    waits: list[Wait] = []
    unrecorded = [q for q in members if not q.has_record]
    for r in members:
        if r.stuck is None:
            continue
        mine = [w for q in recorded if q.rank != r.rank and (w := _wait(r, q, label))]
        if not mine and 2 * len(unrecorded) < len(members):
            mine = [
                Wait(
                    waiter=r.rank,
                    on=q.rank,
                    group=label,
                    reason="no_record",
                    seq=r.stuck.seq,
                    op=r.stuck.op,
                )
                for q in unrecorded
            ]
        waits.extend(mine)
    stalled = {f.rank for f in flags}
    for (on, reason), ws in _by_target(waits).items():
        if reason == "behind" and on in stalled:
            continue  # already flagged with the stronger fact
        s = min(w.seq for w in ws)
        op = next(w.op for w in ws if w.seq == s)
        q = next(m for m in members if m.rank == on)
        who = sorted({w.waiter for w in ws})
        flags.append(
            Flag(
                rank=on,
                group=label,
                kind=reason,
                seq=s,
                op=op,
                value=-1 if q.last_enqueued is None else q.last_enqueued,
                reference=s,
                note=_note(reason, who, on, s, op, q),
            )
        )
    return GroupView(group=group, members=tuple(members), waits=tuple(waits), flags=tuple(flags))


def _wait(r: Member, q: Member, label: str) -> Wait | None:
    assert r.stuck is not None
    s = r.stuck.seq
    reason = ""
    if (q.last_enqueued is None and q.stuck is None) or (
        q.last_enqueued is not None and q.last_enqueued < s
    ):
        reason = "absent"
    elif (
        r.last_completed is not None
        and q.last_completed is not None
        and q.last_completed < r.last_completed
    ):
        reason = "behind"
    elif (
        r.stuck.state == "started" and q.stuck and q.stuck.seq == s and q.stuck.state == "scheduled"
    ):
        reason = "not_started"
    if not reason:
        return None
    return Wait(waiter=r.rank, on=q.rank, group=label, reason=reason, seq=s, op=r.stuck.op)


def _by_target(waits: Iterable[Wait]) -> dict[tuple[int, str], list[Wait]]:
    out: dict[tuple[int, str], list[Wait]] = {}
    for w in waits:
        out.setdefault((w.on, w.reason), []).append(w)
    return dict(sorted(out.items()))


def fmt_ranks(ranks: Sequence[int], limit: int = 12) -> str:
    """``rank 3`` / ``ranks 1, 3`` / ``ranks 0, 1, ... (+20 more)``."""
    ranks = list(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(r) for r in ranks[:limit])
    more = f" (+{len(ranks) - limit} more)" if len(ranks) > limit else ""
    return f"ranks {shown}{more}"


def _note(reason: str, waiters: Sequence[int], on: int, s: int, op: str, q: Member) -> str:
    who = fmt_ranks(waiters) + (" waits" if len(waiters) == 1 else " wait")
    if reason == "absent":
        last = (
            "no record of the group"
            if q.last_enqueued is None
            else f"last issued {q.last_enqueued}"
        )
        return f"{who} in {op} seq {s}; rank {on} never issued it ({last})"
    if reason == "behind":
        return f"{who} in {op} seq {s}; rank {on} completed only up to {q.last_completed}"
    if reason == "not_started":
        return f"{fmt_ranks(waiters)} started {op} seq {s}; on rank {on} it never started"
    return f"{who} in {op} seq {s}; rank {on} left no record"
