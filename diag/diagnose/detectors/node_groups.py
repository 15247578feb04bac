"""Which sets the node detector's findings name: one culprit set, one finding.

- :func:`candidates`: the sets slow ranks (each found against the ranks doing the same work) can
  be named as, largest first: a host (every rank on it), a replica (every stage and TP position
  of one data-parallel replica), a TP group (the TP ranks of one stage of one replica); a group
  whose ranks are exactly another's (a host that is one TP group) is one set named both ways.
  The node detector decides which of them are slow as a whole; slow ranks left over are named
  one by one (:func:`single`).
- :func:`partitions`: the layout's own groups whose imbalance is ``structural`` when it is
  there from the start: the pipeline stages (each against the other stages), the TP positions
  of each stage (against the stage's other positions), or, for a layout inferred from time
  profiles (no stage known), the work classes (against the other classes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from diag.diagnose.layout import Layout


@dataclass(frozen=True, slots=True)
class Culprits:
    """A set of slow ranks named as one: ``id`` (the finding's), ``who`` (for its summary)."""

    ranks: tuple[int, ...]
    id: str
    who: str
    host: str  # the host when all are on one, else ""


@dataclass(frozen=True, slots=True)
class Partition:
    """Groups of the layout compared with each other: ``members`` key -> ranks, ``peers`` key ->
    the keys it is compared with; ``labels`` key -> "stage 2"; ``ids`` key -> id suffix."""

    kind: str
    members: Mapping[Any, tuple[int, ...]]
    peers: Mapping[Any, tuple[Any, ...]]
    labels: Mapping[Any, str]
    ids: Mapping[Any, str]


def ranks_text(ranks: tuple[int, ...]) -> str:
    """ "ranks 3, 4, 5" (runs of consecutive ranks as "3-5"; long lists cut)."""
    runs: list[str] = []
    start = prev = None
    for r in sorted(ranks):
        if prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = r
    if start is not None:
        runs.append(str(start) if start == prev else f"{start}-{prev}")
    shown = ", ".join(runs[:12]) + (f", ... ({len(ranks)} ranks)" if len(runs) > 12 else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}"


def candidates(hosts: Mapping[int, str], layout: Layout) -> list[Culprits]:
    """The sets slow ranks can be named as, largest first: hosts, replicas and TP groups of two
    or more ranks; a set that two of them make (a host that is one TP group) is one, named both
    ways."""
    found: list[tuple[str, str, tuple[int, ...]]] = []  # (id, label, ranks)
    by_host: dict[str, list[int]] = {}
    for rank, host in hosts.items():
        if host:
            by_host.setdefault(host, []).append(rank)
    for host, on_host in sorted(by_host.items()):
        found.append((f"node-{host}", f"host {host}", tuple(sorted(on_host))))
    for group in layout.groups():
        if group.kind == "stage":
            continue  # a stage is compared with the other stages (partitions), not its peers
        suffix = group.label.replace("TP group of stage ", "tp-stage").replace(", replica ", "-r")
        found.append((f"node-{suffix.replace(' ', '')}", group.label, group.ranks))
    found.sort(key=lambda c: -len(c[2]))
    out: dict[tuple[int, ...], Culprits] = {}
    for cid, label, ranks in found:
        if len(ranks) < 2:
            continue
        if ranks in out:  # the same ranks named another way: one set, both names
            first = out[ranks]
            who = f"{first.who.split(' (')[0]} = {label} ({ranks_text(ranks)})"
            out[ranks] = Culprits(ranks, first.id, who, first.host)
            continue
        on = {hosts.get(r, "") for r in ranks}
        host = on.pop() if len(on) == 1 else ""
        out[ranks] = Culprits(ranks, cid, f"{label} ({ranks_text(ranks)})", host)
    return list(out.values())


def single(rank: int, hosts: Mapping[int, str], layout: Layout) -> Culprits:
    """One slow rank, named with where it sits."""
    host = hosts.get(rank, "")
    where = layout.position(rank)
    who = f"rank {rank}" + (f" ({where})" if where else "") + (f" on {host}" if host else "")
    return Culprits((rank,), f"node-rank{rank}", who, host)


def partitions(layout: Layout, ranks: list[int]) -> list[Partition]:
    """The layout groups compared with each other (see the module docstring)."""
    present = set(ranks)
    out = []
    stages = {s: tuple(r for r in rs if r in present) for s, rs in layout.stages().items()}
    stages = {s: rs for s, rs in stages.items() if rs}
    if len(stages) >= 2:
        keys = tuple(stages)
        out.append(
            Partition(
                kind="stage",
                members=stages,
                peers={s: tuple(k for k in keys if k != s) for s in keys},
                labels={s: f"stage {s}" for s in keys},
                ids={s: f"stage{s}" for s in keys},
            )
        )
    if layout.tp and len(set(layout.tp.values())) >= 2:
        members: dict[tuple[int, int], list[int]] = {}
        for r in sorted(present):
            if r in layout.tp:
                members.setdefault((layout.stage.get(r, 0), layout.tp[r]), []).append(r)
        keys2 = tuple(members)
        peers = {k: tuple(o for o in keys2 if o[0] == k[0] and o != k) for k in keys2}
        if any(peers.values()):
            out.append(
                Partition(
                    kind="TP position",
                    members={k: tuple(v) for k, v in members.items()},
                    peers=peers,
                    labels={k: f"TP position {k[1]} of stage {k[0]}" for k in keys2},
                    ids={k: f"stage{k[0]}-tp{k[1]}" for k in keys2},
                )
            )
    if layout.source == "time profiles" and not stages:
        classes = {c: tuple(r for r in rs if r in present) for c, rs in layout.classes().items()}
        classes = {c: rs for c, rs in classes.items() if rs}
        keys3 = tuple(classes)
        if len(keys3) >= 2:
            out.append(
                Partition(
                    kind="work class",
                    members=classes,
                    peers={c: tuple(k for k in keys3 if k != c) for c in keys3},
                    labels={c: f"work class {c}" for c in keys3},
                    ids={c: f"class{c}" for c in keys3},
                )
            )
    return out
