"""This rank's process groups as the hook names them: the Flight Recorder's ``pg_name``, the size.

Read from ``torch.distributed``'s registry of groups (``_world.pg_names``: the names the Flight
Recorder writes, "0" for the default group). Used by the hook thread (a Python-level collective's
group, and every group's size at each harvest: gloo's FR ``pg_config`` is empty) and by the
numerics tier (a DDP replica's group).
"""

from __future__ import annotations

from typing import Any


class ProcessGroups:
    """Names and sizes of the process groups of ``torch.distributed`` (``dist``)."""

    def __init__(self, dist: Any) -> None:
        self.dist = dist

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
