"""Process groups from Flight Recorder dumps: members' standings, p2p waits, mismatches.

A member's standing in a group (:func:`member_from_dump`) comes from FR's ``pg_status`` where the
dump ties it to the group, else from its entries (see :mod:`diag.postmortem.fr_dumps` for when
``pg_status`` is trusted); :func:`views_from_dumps` then applies the rules of
:mod:`diag.postmortem.groups` to every group the dumps declare. :func:`mismatches` compares what
members recorded at the same sequence number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from diag.postmortem.groups import GroupView, Member, Stuck, Wait, analyze_group
from diag.postmortem.records import FrEntry, GroupInfo, RankDump

#: Ops whose inputs have the same shape and dtype on every member (all_to_all, gather, scatter
#: and p2p may legitimately differ).
SAME_SHAPE_OPS = frozenset(
    {
        "all_reduce",
        "allreduce",
        "broadcast",
        "reduce",
        "barrier",
        "all_gather",
        "allgather",
        "_all_gather_base",
        "_allgather_base",
        "all_gather_into_tensor",
        "reduce_scatter",
        "_reduce_scatter_base",
        "reduce_scatter_tensor",
        "allreduce_coalesced",
    }
)


def member_from_dump(dump: RankDump | None, rank: int, group: GroupInfo) -> Member:
    """A rank's standing in ``group`` from its dump: ``pg_status`` where the dump ties it to the
    group, else the entries (last completed = the highest completed entry, or one below the
    oldest pending one when the dump holds only active entries)."""
    if dump is None:
        return Member(rank=rank, has_record=False)
    if not any(g.name == group.name for g in dump.groups):
        return Member(rank=rank, has_record=True, source=dump.file)  # never used the group
    ents = [e for e in dump.entries if e.pg_name == group.name and not e.is_p2p]
    pending = sorted((e for e in ents if e.pending), key=lambda e: (e.seq_id, e.record_id))
    done = [e.seq_id for e in ents if not e.pending]
    status = dump.status.get(group.name)
    if status is not None:
        enq, comp = status.last_enqueued, status.last_completed
    else:
        enq = max((e.seq_id for e in ents), default=None)
        comp = max(done) if done else (pending[0].seq_id - 1 if pending else None)
    stuck = None
    if pending:
        e = pending[0]
        stuck = Stuck(
            seq=e.seq_id, op=e.op, state=e.state, shape=e.shape(), created_ns=e.created_ns
        )
    return Member(
        rank=rank,
        has_record=True,
        last_enqueued=enq,
        last_completed=comp,
        stuck=stuck,
        source=dump.file,
    )


def groups_of(dumps: Iterable[RankDump]) -> list[GroupInfo]:
    """Every group of two or more ranks any dump declares, once (by name and members)."""
    seen: dict[tuple[str, tuple[int, ...]], GroupInfo] = {}
    for d in dumps:
        for g in d.groups:
            if len(g.ranks) >= 2:
                seen.setdefault((g.name, g.ranks), g)
    return [seen[k] for k in sorted(seen)]


def views_from_dumps(dumps: Sequence[RankDump]) -> list[GroupView]:
    """:func:`analyze_group` of every group the dumps declare."""
    by_rank = {d.rank: d for d in dumps}
    return [
        analyze_group(g, [member_from_dump(by_rank.get(r), r, g) for r in g.ranks])
        for g in groups_of(dumps)
    ]


def p2p_waits(dumps: Iterable[RankDump]) -> list[Wait]:
    """Pending point-to-point ops: the rank waits on its peer (weak: says nothing of fault)."""
    out = []
    for d in dumps:
        for e in d.entries:
            if e.is_p2p and e.pending and e.peer is not None and e.peer != d.rank:
                label = f"{e.pg_desc} (pg {e.pg_name})" if e.pg_desc else f"pg {e.pg_name}"
                out.append(
                    Wait(
                        waiter=d.rank,
                        on=e.peer,
                        group=label,
                        reason="p2p",
                        seq=e.p2p_seq_id,
                        op=e.op,
                    )
                )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Mismatch:
    """Members of ``group`` issued different collectives (or shapes) as sequence ``seq``:
    ``variants`` are ``(what, ranks)``, the most common first."""

    group: str
    seq: int
    variants: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def odd_ranks(self) -> tuple[int, ...]:
        """Ranks outside the most common variant (all of them when no variant is the most)."""
        counts = [len(r) for _, r in self.variants]
        if len(counts) > 1 and counts[0] == counts[1]:
            return tuple(sorted(r for _, rs in self.variants for r in rs))
        return tuple(sorted(r for _, rs in self.variants[1:] for r in rs))


def mismatches(dumps: Sequence[RankDump]) -> list[Mismatch]:
    """Sequence numbers at which members of a group recorded different ops, or different
    shapes/dtypes for an op whose inputs must match (:data:`SAME_SHAPE_OPS`)."""
    by_rank = {d.rank: d for d in dumps}
    out = []
    for g in groups_of(dumps):
        seen: dict[int, dict[str, list[int]]] = {}
        for r in g.ranks:
            d = by_rank.get(r)
            for e in d.entries if d else ():
                if e.pg_name == g.name and not e.is_p2p and e.seq_id >= 0:
                    seen.setdefault(e.seq_id, {}).setdefault(_signature(e), []).append(r)
        for seq in sorted(seen):
            sigs = seen[seq]
            if len(sigs) > 1:
                variants = sorted(sigs.items(), key=lambda kv: (-len(kv[1]), kv[0]))
                out.append(
                    Mismatch(
                        group=g.label(),
                        seq=seq,
                        variants=tuple((k, tuple(sorted(set(v)))) for k, v in variants),
                    )
                )
    return out


def _signature(e: FrEntry) -> str:
    return f"{e.op} {e.shape()}" if e.op in SAME_SHAPE_OPS else e.op


def stuck_entries(dump: RankDump) -> Mapping[str, FrEntry]:
    """Group name -> the rank's oldest pending collective there (for evidence and stacks)."""
    out: dict[str, FrEntry] = {}
    for e in sorted(dump.entries, key=lambda e: (e.seq_id, e.record_id)):
        if e.pending and not e.is_p2p:
            out.setdefault(e.pg_name, e)
    return out
