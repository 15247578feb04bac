"""A process's CPU quota, read from its cgroup: how long the quota held it throttled, how many cores
it allows.

A rank whose container, pod or slice has a CPU limit (Kubernetes ``resources.limits.cpu``,
systemd ``CPUQuota=``, a ``docker --cpus``) runs until the group has used its quota of the
period, then waits, throttled, for the next period. Seen from ``/proc`` that is run-queue delay
with no competitor to show for it; the group's ``cpu.stat`` counts it. The process's cgroup is
read from ``/proc/<pid>/cgroup`` (v2: the ``0::/path`` line; v1: the line whose controllers
include ``cpu``), and every directory from it up to the hierarchy's root is read, since a
limit set on a parent (a pod's, above its containers') throttles the whole subtree and is
counted in the parent's ``cpu.stat`` only:

- v2 (``cgroup_root`` holds ``cgroup.controllers``, or ``cgroup_root/unified`` does):
  ``cpu.stat`` ``throttled_usec``, ``cpu.max`` ``"<quota> <period>"`` or ``"max <period>"``;
- v1 (``cgroup_root/cpu`` or ``cgroup_root/cpu,cpuacct``): ``cpu.stat`` ``throttled_time``
  (ns), ``cpu.cfs_quota_us`` (-1: none) over ``cpu.cfs_period_us``.

The paths ``/proc/<pid>/cgroup`` names are relative to the cgroup namespace of the reader: a
daemon in the host's namespace (or the rank's own container) sees the rank's real group. What is
unreadable is None: no CPU controller, a group already removed, a daemon in another container.
The counters are cumulative; :func:`throttled_since` turns two readings into an interval's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CpuQuota:
    """One reading of a process's cgroup CPU controller along its path."""

    #: each directory's cumulative throttled time (ns) so far, the process's own group first
    throttled_ns: dict[str, int]
    #: the tightest quota on the path, in cores (0: none)
    limit_cores: float


class CgroupCpu:
    """Reads :class:`CpuQuota` for pids from ``proc_root`` and ``cgroup_root`` (fake trees in
    tests)."""

    def __init__(self, proc_root: Path, cgroup_root: Path = Path("/sys/fs/cgroup")) -> None:
        self.proc_root = Path(proc_root)
        self.cgroup_root = Path(cgroup_root)

    def read(self, pid: int) -> CpuQuota | None:
        """The process's quota reading; None when no CPU controller can be read for it."""
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text()
        except OSError:
            return None
        found = _cpu_group(text)
        if found is None:
            return None
        version, rel = found
        base = self._mount(version)
        if base is None:
            return None
        throttled: dict[str, int] = {}
        limit = 0.0
        parts = [p for p in rel.split("/") if p and p not in (".", "..")]
        for depth in range(len(parts), -1, -1):
            rel_dir = "/".join(parts[:depth])
            folder = base.joinpath(*parts[:depth])
            ns = _throttled_ns(folder, version)
            if ns is not None:
                throttled["/" + rel_dir] = ns
            cores = _limit_cores(folder, version)
            if cores > 0 and (limit == 0 or cores < limit):
                limit = cores
        if not throttled:
            return None
        return CpuQuota(throttled, limit)

    def _mount(self, version: int) -> Path | None:
        root = self.cgroup_root
        if version == 2:
            for candidate in (root, root / "unified"):
                if (candidate / "cgroup.controllers").exists():
                    return candidate
            return None
        for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
            if (root / name / "cpu.stat").exists():
                return root / name
        return None


def _cpu_group(text: str) -> tuple[int, str] | None:
    """(1 or 2, the group's path) from ``/proc/<pid>/cgroup``: the v1 line with the ``cpu``
    controller when there is one (a hybrid host keeps the CPU controller in v1), else the v2
    line."""
    v2: str | None = None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        ident, controllers, path = fields
        if ident == "0" and controllers == "":
            v2 = path.strip()
        elif "cpu" in controllers.split(","):
            return 1, path.strip()
    return (2, v2) if v2 is not None else None


def _throttled_ns(folder: Path, version: int) -> int | None:
    try:
        text = (folder / "cpu.stat").read_text()
    except OSError:
        return None
    key, scale = ("throttled_usec", 1000) if version == 2 else ("throttled_time", 1)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value.strip()) * scale
            except ValueError:
                return None
    return None


def _limit_cores(folder: Path, version: int) -> float:
    try:
        if version == 2:
            quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
        else:
            quota = (folder / "cpu.cfs_quota_us").read_text().strip()
            period = (folder / "cpu.cfs_period_us").read_text().strip()
        q, p = int(quota), int(period)
    except (OSError, ValueError):
        return 0.0  # "max", -1, absent or unreadable: no limit known
    return q / p if q > 0 and p > 0 else 0.0


def throttled_since(prev: CpuQuota | None, now: CpuQuota | None) -> int | None:
    """How long the process was throttled between two readings: the largest growth among the
    directories both readings hold (the limiting group counts it; its ancestors and descendants
    count their own). None when either reading is missing, or when the process's own group
    changed between them (it moved: an interval of which part ran under another group's quota,
    whose counter at the move is unknown; the ancestors they share would say 0 for a process
    moved under a quota, as a held-out ``node.cpu_quota`` case showed)."""
    if prev is None or now is None:
        return None
    if next(iter(now.throttled_ns), None) != next(iter(prev.throttled_ns), None):
        return None
    common = [d for d in now.throttled_ns if d in prev.throttled_ns]
    if not common:
        return None
    return max(max(0, now.throttled_ns[d] - prev.throttled_ns[d]) for d in common)
