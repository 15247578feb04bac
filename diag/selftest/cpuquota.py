"""A degraded device on a CPU machine: a probe run in a child process confined to a fraction of
one core by a cgroup CPU quota, standing in for a GPU throttled by ``1 - fraction``.

The child joins a fresh cgroup (v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us``) before it execs, with
a 10 ms period so every timed run of a probe (>= 50 ms) spans several periods and is confined
throughout. Needs root and a writable cgroup CPU controller; otherwise :func:`unavailable_reason`
says why (the tests skip with it). The cgroup is removed afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 10_000


def _v2_root() -> Path | None:
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        ctl = root / "cgroup.subtree_control"
        if ctl.exists() and "cpu" in ctl.read_text().split():
            return root
    return None


def _v1_root() -> Path | None:
    root = CGROUP_ROOT / "cpu"
    return root if (root / "cpu.cfs_quota_us").exists() else None


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root: cannot create a cgroup"
    if _v2_root() is None and _v1_root() is None:
        return "no cgroup CPU controller (v2 cpu.max or v1 cpu.cfs_quota_us)"
    return None


def root() -> Path:
    """The CPU controller's root cgroup (v2, else v1); processes leaving a quota go back here."""
    found = _v2_root() or _v1_root()
    assert found is not None, "checked by unavailable_reason"
    return found


@contextlib.contextmanager
def cgroup(fraction: float) -> Any:
    """A fresh cgroup limited to ``fraction`` of one CPU (10 ms periods), removed afterwards
    (processes still in it must have left: write their pids to ``root() / "cgroup.procs"``)."""
    name = f"diag-probe-{secrets.token_hex(3)}"
    quota = max(1000, int(fraction * PERIOD_US))
    v2 = _v2_root()
    if v2 is not None:
        path = v2 / name
        path.mkdir()
        (path / "cpu.max").write_text(f"{quota} {PERIOD_US}\n")
    else:
        v1 = _v1_root()
        assert v1 is not None, "checked by unavailable_reason"
        path = v1 / name
        path.mkdir()
        (path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()


def run_probe(name: str, params: dict[str, Any], fraction: float | None) -> list[dict[str, Any]]:
    """``python -m probes NAME`` in a child process, confined to ``fraction`` of a core (``None``:
    unconfined); its JSON results."""
    argv = [sys.executable, "-m", "probes", name, "--params", json.dumps(params)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with contextlib.ExitStack() as stack:
        if fraction is not None:
            path = stack.enter_context(cgroup(fraction))
            argv = ["sh", "-c", f'echo $$ > {path}/cgroup.procs && exec "$@"', "sh", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"probe {name} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return list(json.loads(proc.stdout))
