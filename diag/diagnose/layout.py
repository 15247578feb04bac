"""The parallel layout: which ranks do the same work, and the groups a culprit set can be.

In a PP x DP x TP job the ranks that do the same work are a rank's data-parallel peers: the same
pipeline stage and the same tensor-parallel position, other replicas. That set is its *work
class*; the detectors compare each rank with its work class (a heavier pipeline stage is not a
slow node), and compare the stages (and the TP positions of a stage) with each other to find an
imbalance that follows the layout (``structural``). A :class:`Layout` says, per rank, its stage,
TP position, replica and work class, and how it was found (``source``), best first:

1. ``table columns``: a timing table's ``pp_rank`` / ``tp_rank`` / ``dp_rank``
   (:func:`from_columns`): work class = (stage, TP position);
2. ``process groups``: schema 1.6 ``ProcessGroupInfo`` events (member ranks in group-rank
   order, name, description) and the collectives that ride on each group
   (:func:`from_process_groups`). Groups of size 1 or of the whole world say nothing. A group
   is a pipeline (PP) group when point-to-point operations run on it or its description says
   so (``pp``, ``pipe``, ``stage``); a TP group or a DP group likewise by its description
   (``tp``/``tensor``; ``dp``/``data``/``replicate``/``shard``/``fsdp``; Megatron's
   ``MODEL_PARALLEL_GROUP``, TP x PP, is neither). Groups of one kind that overlap (several DP
   groups of different sizes) are reduced to one dimension: of the partitions of the world they
   make, the one of the largest groups (the whole DP group, not a part of it). Groups
   that no name or p2p traffic identifies are read from the structure: groups of one size that
   partition the world form one dimension; with one such dimension it is the DP dimension (the
   most common extra group), with two the TP one is the one whose groups stay on one host (or,
   on one host, the one with more collectives per group: TP synchronizes every layer, DP once
   per bucket). A rank's stage is its position in its PP group (group-rank order), its TP
   position its position in its TP group, its replica its position in its DP group. Without a
   PP group, p2p operations on the world group still say where a rank sits: a rank whose steps
   begin with a send is a first stage, one that begins with a receive a later stage (the last
   when it does as many p2p operations per step as the first stage, else a middle one: middle
   stages cannot be told apart, they share one class). Hierarchical DP groups (rails, HSDP)
   split nothing: only the stage and the TP position make work different;
3. ``time profiles`` (:mod:`~diag.diagnose.layout_profiles`): without either, ranks with
   clearly different per-phase time profiles (forward, backward, optimizer, data, wait) are
   clustered into classes, conservatively;
4. ``none``: one class holding every rank (compare every rank with every other).

Scope: a rank belongs to one stage (interleaved virtual stages count as one); expert and context
parallel groups are read as DP groups when named so, else as unnamed dimensions.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd

K = TypeVar("K", bound=Any)

#: Layout sources, best first (``Layout.source``).
SOURCES = ("table columns", "process groups", "time profiles", "none")

_PP = re.compile(r"(^|[^a-z])(pp|pipe|pipeline|stage)([^a-z]|$)")
_TP = re.compile(r"(^|[^a-z])(tp|tensor)([^a-z]|$)")
_DP = re.compile(r"(^|[^a-z])(dp|data|replicate|shard|fsdp|ddp|dp_shard|dp_replicate)([^a-z]|$)")


@dataclass(frozen=True, slots=True)
class Group:
    """A set of ranks a culprit set can be: a ``kind`` (``stage``, ``tp group``, ``replica``,
    ``work class``), its ``label`` for summaries ("stage 2", "TP group of stage 1, replica 5")
    and its ranks, sorted."""

    kind: str
    label: str
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """Per rank: pipeline ``stage``, ``tp`` position and DP ``replica`` (empty mappings when
    unknown) and ``work_class`` (ranks with the same id do the same work). ``source`` is one of
    :data:`SOURCES`; ``summary`` says what was found ("4 stages x 16 replicas")."""

    source: str
    work_class: Mapping[int, int]
    stage: Mapping[int, int] = field(default_factory=dict)
    tp: Mapping[int, int] = field(default_factory=dict)
    replica: Mapping[int, int] = field(default_factory=dict)
    summary: str = ""

    @property
    def known(self) -> bool:
        """Whether the layout was found (else every rank is presumed to do the same work)."""
        return self.source != "none"

    def describe(self) -> str:
        """One line for evidence: "layout from process groups: 2 stages x 2 replicas"."""
        if not self.known:
            return "layout unknown: every rank presumed to do the same work"
        return f"layout from {self.source}: {self.summary}"

    def classes(self) -> dict[int, tuple[int, ...]]:
        """Work class id -> its ranks, sorted."""
        out: dict[int, list[int]] = {}
        for rank, cls in sorted(self.work_class.items()):
            out.setdefault(cls, []).append(rank)
        return {c: tuple(r) for c, r in out.items()}

    def position(self, rank: int) -> str:
        """Where ``rank`` sits, for summaries: "stage 1, TP 3, replica 5" ("" when unknown)."""
        parts = []
        if rank in self.stage:
            parts.append(f"stage {self.stage[rank]}")
        if rank in self.tp:
            parts.append(f"TP {self.tp[rank]}")
        if rank in self.replica:
            parts.append(f"replica {self.replica[rank]}")
        return ", ".join(parts)

    def stages(self) -> dict[int, tuple[int, ...]]:
        """Stage -> its ranks (every replica and TP position); empty without stages."""
        return _invert(self.stage)

    def groups(self) -> list[Group]:
        """The groups a set of slow ranks can be named as, largest first: whole replicas (every
        stage and TP position of one replica), TP groups (the TP ranks of one stage of one
        replica), stages (every replica). Only groups of two or more ranks."""
        out: list[Group] = []
        if self.replica and len(set(self.replica.values())) > 1:
            for rep, ranks in _invert(self.replica).items():
                out.append(Group("replica", f"replica {rep}", ranks))
        if self.tp and self.stage and self.replica:
            keyed = {r: (self.stage[r], self.replica[r]) for r in self.tp if r in self.stage}
            keyed = {r: k for r, k in keyed.items() if r in self.replica}
            for (stage, rep), ranks in _invert(keyed).items():
                out.append(Group("tp group", f"TP group of stage {stage}, replica {rep}", ranks))
        for stage, ranks in self.stages().items():
            out.append(Group("stage", f"stage {stage}", ranks))
        return sorted((g for g in out if len(g.ranks) > 1), key=lambda g: -len(g.ranks))


def unknown(ranks: Iterable[int]) -> Layout:
    """The layout when nothing says it: one work class holding every rank."""
    return Layout(source="none", work_class={int(r): 0 for r in ranks})


def from_coordinates(
    source: str,
    ranks: Iterable[int],
    stage: Mapping[int, int],
    tp: Mapping[int, int],
    replica: Mapping[int, int],
) -> Layout:
    """A layout from per-rank coordinates (missing ones: unknown); work class = (stage, TP)."""
    ranks = sorted(int(r) for r in ranks)
    keys = {r: (stage.get(r, -1), tp.get(r, -1)) for r in ranks}
    ids = {k: i for i, k in enumerate(sorted(set(keys.values())))}
    parts = []
    for name, coord in (("stage", stage), ("replica", replica), ("TP position", tp)):
        n = len(set(coord.values()))
        if n:
            parts.append(f"{n} {name}{'s' if n != 1 else ''}")
    return Layout(
        source=source,
        work_class={r: ids[keys[r]] for r in ranks},
        stage=dict(stage),
        tp=dict(tp),
        replica=dict(replica),
        summary=" x ".join(parts),
    )


def from_columns(table: pd.DataFrame) -> Layout | None:
    """The layout of a timing table from its ``pp_rank`` / ``tp_rank`` / ``dp_rank`` columns
    (each rank's most frequent value); None when it has none of them."""
    cols = [c for c in ("pp_rank", "tp_rank", "dp_rank") if c in table.columns]
    if not cols:
        return None
    coords: dict[str, dict[int, int]] = {}
    for col in cols:
        values = pd.to_numeric(table[col], errors="coerce")
        rows = pd.DataFrame({"rank": table["rank"], "v": values}).dropna()
        mode = rows.groupby("rank")["v"].agg(lambda s: s.value_counts().index[0])
        coords[col] = {int(r): int(v) for r, v in mode.items()}
    ranks = table["rank"].unique().tolist()
    return from_coordinates(
        "table columns",
        ranks,
        coords.get("pp_rank", {}),
        coords.get("tp_rank", {}),
        coords.get("dp_rank", {}),
    )


# -- process groups ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pg:
    ranks: tuple[int, ...]  # group-rank order
    names: frozenset[str]
    descs: frozenset[str]


def from_process_groups(
    groups: pd.DataFrame,
    collectives: pd.DataFrame,
    ranks: Iterable[int],
    hosts: Mapping[int, str],
) -> Layout | None:
    """The layout from ``ProcessGroupInfo`` events (``groups``) and the collectives on each group
    (see the module docstring); None when they say nothing (no group but the world's)."""
    world = sorted(int(r) for r in ranks)
    pgs = _groups(groups, collectives, len(world))
    p2p_names = _p2p_groups(collectives)
    kinds: dict[str, list[_Pg]] = {"pp": [], "tp": [], "dp": []}
    unnamed: list[_Pg] = []
    for pg in pgs:
        desc = " ".join(sorted(pg.descs)).lower()
        if pg.names & p2p_names or _PP.search(desc):
            kinds["pp"].append(pg)
        elif _TP.search(desc):
            kinds["tp"].append(pg)
        elif _DP.search(desc):
            kinds["dp"].append(pg)
        else:
            unnamed.append(pg)
    dims = _partitions(unnamed, set(world))
    if len(dims) == 1 and not kinds["dp"]:
        kinds["dp"].extend(dims[0])
    elif len(dims) >= 2:
        tp_dim = _tp_dimension(dims[:2], hosts, collectives)
        kinds["tp"].extend(dims[:2][tp_dim])
        if not kinds["dp"]:
            kinds["dp"].extend(dims[:2][1 - tp_dim])
    kinds = {kind: _one_dimension(pgs, set(world)) for kind, pgs in kinds.items()}
    # PP groups must be disjoint (one pipeline per rank): pair groups made only for p2p are not.
    stage = _positions(kinds["pp"])
    how = ""
    if not stage and p2p_names:
        stage = _stages_from_p2p(collectives, set(world))
        how = " (stages from p2p order)" if stage else ""
    tp = _positions(kinds["tp"])
    replica = _positions(kinds["dp"])
    if not (stage or tp or replica):
        return None
    out = from_coordinates("process groups", world, stage, tp, replica)
    return Layout(
        source=out.source,
        work_class=out.work_class,
        stage=out.stage,
        tp=out.tp,
        replica=out.replica,
        summary=out.summary + how,
    )


def _groups(groups: pd.DataFrame, collectives: pd.DataFrame, world: int) -> list[_Pg]:
    """Distinct groups (by member ranks) of 2 or more ranks and fewer than the world."""
    members: dict[tuple[int, ...], tuple[set[str], set[str]]] = {}
    if not groups.empty and "ranks_json" in groups.columns:
        for name, desc, text in groups[["pg_name", "pg_desc", "ranks_json"]].itertuples(
            index=False
        ):
            ranks = _parse_ranks(text)
            if ranks and 1 < len(ranks) < world:
                names, descs = members.setdefault(ranks, (set(), set()))
                names.add(str(name))
                descs.add(str(desc))
    elif not collectives.empty and {"pg_name", "rank"} <= set(collectives.columns):
        # Older runs: a group's members are the ranks that ran operations on it.
        c = collectives[collectives["rank"] >= 0]
        for (name, desc), rows in c.groupby(["pg_name", "pg_desc"], sort=True):
            ranks = tuple(sorted(int(r) for r in rows["rank"].unique()))
            size = int(rows["pg_size"].max()) if "pg_size" in rows else len(ranks)
            if 1 < len(ranks) < world and size in (0, len(ranks)):
                names, descs = members.setdefault(ranks, (set(), set()))
                names.add(str(name))
                descs.add(str(desc))
    return [_Pg(r, frozenset(n), frozenset(d)) for r, (n, d) in members.items()]


def _parse_ranks(text: object) -> tuple[int, ...]:
    try:
        value = json.loads(str(text))
    except ValueError:
        return ()
    if not isinstance(value, list) or not all(isinstance(r, int) for r in value):
        return ()
    return tuple(int(r) for r in value) if len(set(value)) == len(value) else ()


def _p2p_groups(collectives: pd.DataFrame) -> set[str]:
    if collectives.empty or not {"is_p2p", "pg_name"} <= set(collectives.columns):
        return set()
    p2p = collectives[collectives["is_p2p"].astype(bool)]
    return {str(n) for n in p2p["pg_name"].unique()}


def _partitions(pgs: list[_Pg], world: set[int]) -> list[list[_Pg]]:
    """Groups of one size that are disjoint and cover the world: one dimension each. Groups of
    one size may make several dimensions (a 2 x 2 grid): each group joins the first dimension
    it is disjoint from."""
    by_size: dict[int, list[_Pg]] = {}
    for pg in pgs:
        by_size.setdefault(len(pg.ranks), []).append(pg)
    out: list[list[_Pg]] = []
    for _, same in sorted(by_size.items()):
        dims: list[tuple[set[int], list[_Pg]]] = []
        for pg in sorted(same, key=lambda g: sorted(g.ranks)):
            for covered, members in dims:
                if covered.isdisjoint(pg.ranks):
                    covered.update(pg.ranks)
                    members.append(pg)
                    break
            else:
                dims.append((set(pg.ranks), [pg]))
        out.extend(members for covered, members in dims if covered == world)
    return out


def _tp_dimension(dims: list[list[_Pg]], hosts: Mapping[int, str], coll: pd.DataFrame) -> int:
    """Which of two unnamed dimensions is TP: the one whose groups stay on one host, else the
    one with more collectives per group."""
    local = [all(len({hosts.get(r, "") for r in pg.ranks}) == 1 for pg in d) for d in dims]
    if local[0] != local[1]:
        return 0 if local[0] else 1
    if coll.empty or "pg_name" not in coll.columns:
        return 0
    counts = coll["pg_name"].astype(str).value_counts()
    per = [sum(int(counts.get(n, 0)) for pg in d for n in pg.names) / len(d) for d in dims]
    return 0 if per[0] >= per[1] else 1


def _one_dimension(pgs: list[_Pg], world: set[int]) -> list[_Pg]:
    """The groups as they are when disjoint, else the partition of the world of the largest
    groups they make (none: [])."""
    ranks = [r for pg in pgs for r in pg.ranks]
    if len(ranks) == len(set(ranks)):
        return pgs
    dims = _partitions(pgs, world)
    return max(dims, key=lambda d: len(d[0].ranks)) if dims else []


def _positions(pgs: list[_Pg]) -> dict[int, int]:
    """rank -> its position in its group (group-rank order)."""
    return {r: i for pg in pgs for i, r in enumerate(pg.ranks)}


def _stages_from_p2p(collectives: pd.DataFrame, world: set[int]) -> dict[int, int]:
    """Stages from p2p operations on the world group (see the module docstring): 0 first,
    1 middle, then last; {} unless every rank does p2p and both ends are seen."""
    need = {"is_p2p", "rank", "step", "op", "enqueue_ns"}
    if collectives.empty or not need <= set(collectives.columns):
        return {}
    p2p = collectives[collectives["is_p2p"].astype(bool) & (collectives["rank"] >= 0)]
    if p2p.empty or set(int(r) for r in p2p["rank"].unique()) != world:
        return {}
    p2p = p2p.sort_values(["rank", "step", "enqueue_ns"], kind="stable")
    first = p2p.groupby(["rank", "step"])["op"].first().astype(str)
    begins = first.groupby(level="rank").agg(lambda s: Counter(s).most_common(1)[0][0])
    per_step = p2p.groupby(["rank", "step"]).size().groupby(level="rank").median()
    senders = [int(r) for r in begins.index if "send" in begins[r]]
    receivers = [int(r) for r in begins.index if "recv" in begins[r]]
    if not senders or not receivers or len(senders) + len(receivers) != len(world):
        return {}
    edge = float(per_step[senders].median())
    stage = dict.fromkeys(senders, 0)
    middle = [r for r in receivers if per_step[r] > 1.5 * edge]
    last = 2 if middle else 1
    stage.update({r: (1 if r in middle else last) for r in receivers})
    return stage


def _invert(mapping: Mapping[int, K]) -> dict[K, tuple[int, ...]]:
    out: dict[K, list[int]] = {}
    for rank, key in sorted(mapping.items(), key=lambda kv: kv[0]):
        out.setdefault(key, []).append(rank)
    return {k: tuple(v) for k, v in sorted(out.items(), key=lambda kv: kv[0])}
