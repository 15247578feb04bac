"""This rank's process groups as the hook names them: the Flight Recorder's ``pg_name``, the size,
and the layout (members, description, backend) the hook reports once per group.

Read from ``torch.distributed``'s registry of groups (``_world.pg_names``: the names the Flight
Recorder writes, "0" for the default group; ``_world.pg_group_ranks``: global rank -> group rank).
Used by the hook thread (a Python-level collective's group, every group's size at each harvest:
gloo's FR ``pg_config`` is empty, and the groups not yet reported: :meth:`ProcessGroups.unseen`)
and by the numerics tier (a DDP replica's group).

The registry belongs to the training thread (``new_group`` writes it); the hook thread only copies
its dicts (``list(d.items())``, one C-level copy under the GIL, never an iteration that a
concurrent insert could break) and reads each group's attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GroupLayout:
    """One process group as :class:`~diag.schema.ProcessGroupInfo` carries it: ``ranks`` are the
    global ranks in group-rank order."""

    pg_name: str
    pg_desc: str
    ranks: tuple[int, ...]
    backend: str


class ProcessGroups:
    """Names, sizes and layout of the process groups of ``torch.distributed`` (``dist``)."""

    def __init__(self, dist: Any) -> None:
        self.dist = dist
        self._seen: set[GroupLayout] = set()
        self._num_names = -1  # len(pg_names) at the last look (-1: never looked)
        self._nccl = False
        self._num_nccl_looked = -1  # len(pg_names) when uses_nccl last looked

    def info(self, group: Any) -> tuple[str, int]:
        """(name, size) of a process group (None = the default group); ("", 0) if unknown."""
        dist = self.dist
        if not dist.is_initialized():
            return "", 0
        c10d = dist.distributed_c10d
        pg = group if group is not None else c10d._get_default_group()
        return str(c10d._world.pg_names.get(pg, "")), int(pg.size())

    def sizes(self) -> dict[str, int]:
        """Every process group this rank knows: name -> size."""
        dist = self.dist
        if not (dist.is_available() and dist.is_initialized()):
            return {}
        names = list(dist.distributed_c10d._world.pg_names.items())
        return {str(name): int(pg.size()) for pg, name in names}

    def uses_nccl(self) -> bool:
        """Whether one of this rank's groups runs NCCL (its collectives go to NCCL's own Flight
        Recorder ring: :mod:`diag.hook.fr_dump`); cheap when the registry did not change."""
        dist = self.dist
        if not (dist.is_available() and dist.is_initialized()):
            return False
        groups = list(dist.distributed_c10d._world.pg_names)
        if len(groups) != self._num_nccl_looked:
            backend_of = getattr(dist.distributed_c10d, "get_backend", None)
            self._nccl = any(_runs_nccl(pg, backend_of) for pg in groups)
            self._num_nccl_looked = len(groups)
        return self._nccl

    def unseen(self) -> list[GroupLayout]:
        """The groups this rank belongs to that no earlier call returned (in name order); cheap
        when the registry did not change (one ``len``). A group destroyed and another created
        under the same name with other members or description is new."""
        dist = self.dist
        if not (dist.is_available() and dist.is_initialized()):
            return []
        world = dist.distributed_c10d._world
        names = list(world.pg_names.items())
        if len(names) == self._num_names:
            return []
        complete = True
        group_ranks = dict(world.pg_group_ranks)
        backend_of = getattr(dist.distributed_c10d, "get_backend", None)
        out: list[GroupLayout] = []
        for pg, name in sorted(names, key=lambda item: _name_key(str(item[1]))):
            ranks = group_ranks.get(pg)
            if not ranks:  # registered by new_group but not filled in yet: look again
                complete = False
                continue
            try:
                backend = str(backend_of(pg)) if backend_of is not None else ""
            except Exception:  # a group being destroyed meanwhile
                backend = ""
            layout = GroupLayout(
                pg_name=str(name),
                pg_desc=str(getattr(pg, "group_desc", "") or ""),
                ranks=tuple(int(g) for g, _ in sorted(ranks.items(), key=lambda kv: kv[1])),
                backend=backend,
            )
            if layout not in self._seen:
                self._seen.add(layout)
                out.append(layout)
        self._num_names = len(names) if complete else -1
        return out


def _name_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def _runs_nccl(pg: Any, backend_of: Any) -> bool:
    """A group's backend names NCCL ("nccl", "cuda:nccl,cpu:gloo"), or its CUDA backend is
    NCCL's (a group created without naming one); False for a group being destroyed."""
    try:
        if backend_of is not None and "nccl" in str(backend_of(pg)).lower():
            return True
        for device in getattr(pg, "_device_types", None) or ():
            if getattr(device, "type", "") == "cuda":
                return "nccl" in type(pg._get_backend(device)).__name__.lower()
    except Exception:
        return False
    return False
