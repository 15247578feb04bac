"""A foreign process burning one CPU, for the contention tests.

Linux's autogroup scheduling (on by default) gives every session an equal share of a CPU, and
torchrun starts each worker in a session of its own: so a plain busy loop sharing a rank's core
gets about half of it when both want it, and a rank that sleeps most of its step in collectives
barely feels it. A foreign job with more weight (a higher-priority service, a batch job given a
larger share) is what takes a core from a rank: :func:`start_hog` runs the loop in a session of
its own whose autogroup nice is ``group_nice`` (-12: about 94% of the core against one nice-0
session). Setting a negative nice needs root; :func:`unavailable_reason` says why not otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys

CODE = """
import os, sys
os.sched_setaffinity(0, {{{cpu}}})
with open("/proc/self/autogroup", "w") as f:
    f.write("{nice}")
print("hog running", flush=True)
while True:
    pass
"""


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root: cannot give the hog's session a negative nice"
    if not os.path.exists("/proc/self/autogroup"):
        return "no autogroup scheduling (/proc/self/autogroup)"
    if len(os.sched_getaffinity(0)) < 2:
        return "fewer than 2 CPUs"
    return None


def start_hog(cpu: int, group_nice: int = -12) -> subprocess.Popen[str]:
    """The hog, started in a new session pinned to ``cpu``; returns once it is running."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CODE.format(cpu=cpu, nice=group_nice)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "hog running" not in line:
        proc.kill()
        raise RuntimeError(f"the hog did not start: {line!r}")
    return proc
