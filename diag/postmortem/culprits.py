"""From per-group waits to the first failing ranks: the ends of the wait-for graph.

All groups' waits form one directed graph over ranks (``waiter -> on``). A rank that waits on
nobody but is waited on, or flagged (stalled), is where the hang starts; a rank flagged in one
group but itself waiting on another rank elsewhere is a victim further down the chain (it did not
issue the collective because it is blocked in an earlier one). Formally: the culprits are the
ranks of the graph's *terminal* strongly connected components (no edge leaves them) that hold a
flagged rank. A terminal component of several ranks is a circular wait (each waits on the next
in a different group): the collectives were issued in different orders, a program error.

Point-to-point waits are left out of that graph (a pipeline's sends and receives point both
ways, from victim to culprit and back); they only count who ends up waiting on the culprits.
Every step visits ranks in sorted order, so the same dumps always give the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from diag.postmortem.groups import REASONS, Flag, GroupView, Wait


@dataclass(frozen=True, slots=True, kw_only=True)
class Culprits:
    """The first failing ranks and what the groups say against them.

    ``flags`` are the culprits' flags (every group); ``cycle`` is true when a culprit component
    has more than one rank (a circular wait); ``waiting`` are the other ranks whose waits lead to
    a culprit, directly or through peers (point-to-point waits included); ``stuck`` are ranks
    with pending collectives whose waits lead nowhere (all members of their groups stand at the
    same place).
    """

    ranks: tuple[int, ...] = ()
    flags: tuple[Flag, ...] = ()
    cycle: bool = False
    waiting: tuple[int, ...] = ()
    stuck: tuple[int, ...] = ()

    def strongest(self, rank: int) -> str:
        """The rank's strongest flag (first in :data:`~diag.postmortem.groups.REASONS`)."""
        return min((f.kind for f in self.flags if f.rank == rank), key=REASONS.index)

    @property
    def kinds(self) -> frozenset[str]:
        """The culprits' strongest flags (what the set is accused of, culprit by culprit)."""
        return frozenset(self.strongest(r) for r in self.ranks)


def find_culprits(views: Sequence[GroupView], weak: Iterable[Wait] = ()) -> Culprits:
    """The culprits of the groups' waits (rules in the module docstring). ``no_record`` waits
    (a member left no dump) count only when the other waits name no culprit: a lost or
    unreadable dump of a healthy rank must not outvote the facts the other dumps hold."""
    waits = [w for v in views for w in v.waits]
    flags = [f for v in views for f in v.flags]
    strong = _culprits(
        [w for w in waits if w.reason != "no_record"], [f for f in flags if f.kind != "no_record"]
    )
    found, cycle = strong if strong[0] else _culprits(waits, flags)
    reverse: dict[int, set[int]] = {}
    for w in [*waits, *weak]:
        reverse.setdefault(w.on, set()).add(w.waiter)
    waiting = _reach(found, reverse) - found
    pending = {m.rank for v in views for m in v.members if m.stuck is not None}
    return Culprits(
        ranks=tuple(sorted(found)),
        flags=tuple(sorted((f for f in flags if f.rank in found), key=lambda f: (f.rank, f.group))),
        cycle=cycle,
        waiting=tuple(sorted(waiting)),
        stuck=tuple(sorted(pending - found - waiting)),
    )


def _culprits(waits: Sequence[Wait], flags: Sequence[Flag]) -> tuple[set[int], bool]:
    """Ranks of the terminal components holding a flagged rank; whether one is a cycle."""
    graph: dict[int, set[int]] = {}
    for w in waits:
        graph.setdefault(w.waiter, set()).add(w.on)
        graph.setdefault(w.on, set())
    flagged = {f.rank for f in flags}
    for r in flagged:
        graph.setdefault(r, set())
    comps = _sccs(graph)
    comp_of = {r: i for i, c in enumerate(comps) for r in c}
    found: set[int] = set()
    cycle = False
    for i, comp in enumerate(comps):
        leaves = all(comp_of[n] == i for r in comp for n in graph[r])
        if leaves and comp & flagged:
            found |= comp
            cycle = cycle or len(comp) > 1
    return found, cycle


def _reach(start: set[int], edges: dict[int, set[int]]) -> set[int]:
    seen, todo = set(start), sorted(start)
    while todo:
        n = todo.pop()
        for m in sorted(edges.get(n, ())):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def _sccs(graph: dict[int, set[int]]) -> list[set[int]]:
    """Strongly connected components (iterative Tarjan), nodes visited in sorted order."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[set[int]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                out.append(comp)
    return out
