"""CgroupCpu on fake cgroup trees (v1, v2) and on this machine's; HostCollector's use of it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from diag import schema
from diag.daemon.collectors.cgroup_cpu import CgroupCpu, CpuQuota, throttled_since
from diag.daemon.collectors.host import HostCollector
from tests.unit.daemon.collectors.test_host import PROC_FAKE, FakeClock, _advance


def _v2(root: Path, groups: dict[str, tuple[int, str]]) -> Path:
    """A v2 hierarchy: each group's throttled_usec and cpu.max."""
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for rel, (usec, cpu_max) in groups.items():
        d = root / rel.strip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.stat").write_text(
            f"usage_usec 999\nuser_usec 5\nsystem_usec 4\nnr_periods 10\nnr_throttled 3\n"
            f"throttled_usec {usec}\n"
        )
        (d / "cpu.max").write_text(cpu_max + "\n")
    return root


def _pid(proc: Path, pid: int, cgroup: str) -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "cgroup").write_text(cgroup)


def test_v2_the_pods_limit_above_the_container_is_the_one_that_throttles(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _pid(proc, 42, "0::/kubepods/pod1/ctr1\n")
    root = tmp_path / "cg"
    pod, ctr = "kubepods/pod1", "kubepods/pod1/ctr1"
    _v2(root, {"/": (0, "max 100000"), "kubepods": (0, "max 100000"),
               pod: (5_000, "50000 100000"), ctr: (1_000, "max 100000")})  # fmt: skip
    reader = CgroupCpu(proc, root)
    first = reader.read(42)
    assert first is not None and first.limit_cores == pytest.approx(0.5)
    # the pod's group throttled 30 ms more, the container's own 2 ms: the pod's limit counts
    _v2(root, {pod: (35_000, "50000 100000"), ctr: (3_000, "max 100000")})
    assert throttled_since(first, reader.read(42)) == 30_000_000


def test_v1_cpu_controller_and_its_quota(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _pid(proc, 7, "12:memory:/x\n4:cpu,cpuacct:/slice/job\n0::/\n")
    base = tmp_path / "cg" / "cpu,cpuacct"
    for rel, (ns, quota) in {
        "": (0, -1),
        "slice": (0, -1),
        "slice/job": (8_000_000, 25_000),
    }.items():
        d = base / rel if rel else base
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.stat").write_text(f"nr_periods 9\nnr_throttled 4\nthrottled_time {ns}\n")
        (d / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        (d / "cpu.cfs_period_us").write_text("100000\n")
    got = CgroupCpu(proc, tmp_path / "cg").read(7)
    assert got == CpuQuota({"/slice/job": 8_000_000, "/slice": 0, "/": 0}, 0.25)


def test_what_cannot_be_read_is_unknown_not_zero(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _pid(proc, 1, "0::/gone\n")
    _pid(proc, 2, "garbage without colons\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert CgroupCpu(proc, empty).read(1) is None  # no hierarchy mounted
    assert CgroupCpu(proc, empty).read(2) is None
    assert CgroupCpu(proc, empty).read(3) is None  # no such process
    root = _v2(tmp_path / "cg", {"/": (0, "max 100000")})
    (root / "cpu.stat").write_text("usage_usec 5\n")  # a v2 root has no throttled_usec
    assert CgroupCpu(proc, root).read(1) is None
    # the process moved to another group between two readings: no interval to count
    a, b = CpuQuota({"/a": 5}, 0.0), CpuQuota({"/b": 9}, 0.0)
    assert throttled_since(a, b) is None and throttled_since(None, b) is None
    assert throttled_since(CpuQuota({"/a": 9}, 0.0), CpuQuota({"/a": 5}, 0.0)) == 0  # a reset


def test_a_process_moved_under_a_quota_has_an_unknown_interval_not_its_ancestors_zero(
    tmp_path: Path,
) -> None:
    """A rank moved from ``/job`` into ``/job/limited`` (a quota set on it mid-run): the two
    readings share ``/job``, which throttled nothing, yet part of the interval ran under the new
    group's quota from an unknown counter: unknown, then counted from the next interval on."""
    proc = tmp_path / "proc"
    root = _v2(tmp_path / "cg", {"job": (0, "max 100000")})
    _pid(proc, 5, "0::/job\n")
    reader = CgroupCpu(proc, root)
    before = reader.read(5)
    _v2(root, {"job/limited": (40_000, "25000 100000")})
    _pid(proc, 5, "0::/job/limited\n")
    moved = reader.read(5)
    assert moved is not None and moved.limit_cores == pytest.approx(0.25)
    assert throttled_since(before, moved) is None
    _v2(root, {"job/limited": (340_000, "25000 100000")})
    assert throttled_since(moved, reader.read(5)) == 300_000_000


def test_this_machines_own_cgroup_reads_or_says_unknown() -> None:
    got = CgroupCpu(Path("/proc")).read(os.getpid())
    if Path("/sys/fs/cgroup/cpu/cpu.stat").exists() or Path("/sys/fs/cgroup/cpu.stat").exists():
        assert got is None or all(v >= 0 for v in got.throttled_ns.values())
    assert got is None or got.limit_cores >= 0


def test_the_collector_ships_the_interval_throttled_and_the_limit(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    shutil.copytree(PROC_FAKE / "t0", proc)
    clock = FakeClock()
    root = _v2(tmp_path / "cg", {"job": (1_000, "25000 100000")})
    c = HostCollector(proc, clock, clock_ticks_per_s=100, cgroup_root=root)
    ranks = sorted(
        int(p.name) for p in proc.iterdir() if p.name.isdigit() and (p / "stat").exists()
    )
    rank_pid = ranks[0]
    c.track(rank_pid, rank=0, local_rank=0)
    _pid(proc, rank_pid, "0::/job\n")
    c.collect(1)
    _advance(proc, clock)
    _pid(proc, rank_pid, "0::/job\n")
    _v2(root, {"job": (41_000, "25000 100000")})
    (me,) = [e for e in c.collect(2) if isinstance(e, schema.ProcSample) and e.pid == rank_pid]
    assert me.cpu_throttled_ns == 40_000_000 and me.cpu_limit_cores == pytest.approx(0.25)
