"""A foreign process burning one CPU, for the contention tests.

Linux's autogroup scheduling (on by default) gives every session an equal share of a CPU, and
torchrun starts each worker in a session of its own: so a plain busy loop sharing a rank's core
gets about half of it when both want it, and a rank that sleeps most of its step in collectives
barely feels it. A heavier autogroup (``/proc/self/autogroup`` nice -12: about 94% of the core
against one nice-0 session, on paper) is not a steady competitor either: a group's weight on a
CPU comes from load averages the kernel updates lazily, and measured here (kernel 6.18) a rank
beside such a hog ran undelayed for the hog's first 0.8 s, and in one run of eight its delay
vanished 0.9 s after it began, for the rest of the job (56 steps: too short an episode to be a
finding, so the test saw none).

:func:`start_hog` runs a real-time (``SCHED_FIFO``) loop instead, as a higher-priority service
on the rank's core would: it spins ``spin_ms`` and sleeps ``rest_ms``, so it takes about
``spin / (spin + rest)`` of the core (~90% by default) whatever the other tasks' weights, from
its first cycle to its last; the rank runs in the rests. Its rests keep it under the kernel's
real-time throttle (95% of each second), and the core's kernel threads run in them too. That
needs root and real-time bandwidth; :func:`unavailable_reason` says why not otherwise.

The spin is short (1 ms, about a fair scheduler's slice) so that the rank is held up in every
phase in proportion to the CPU it needs there, as a competitor the scheduler interleaves with it
would. A coarse one (20 ms spins) is another fault: the rank's thread, ready as a collective
returns or as its batch is made, waits a whole spin, so the delay lands in the collective's and
the loader's time as much as in its compute (the step's run-queue delay then exceeded its
compute time in some steps, and its data wait rose 20 ms/step: a ``data`` finding beside the
contention).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from diag.selftest.mechanisms import rt_hog_program

RT_RUNTIME = Path("/proc/sys/kernel/sched_rt_runtime_us")


@functools.cache
def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root: cannot run the hog at real-time priority"
    if not hasattr(os, "SCHED_FIFO"):
        return "no real-time scheduling (os.SCHED_FIFO)"
    try:
        if int(RT_RUNTIME.read_text()) == 0:
            return f"no real-time bandwidth ({RT_RUNTIME} is 0)"
    except (OSError, ValueError):
        pass  # not exposed: the probe below says whether it may
    if len(os.sched_getaffinity(0)) < 2:
        return "fewer than 2 CPUs"
    # root without CAP_SYS_NICE (a container's default) or a cgroup with no real-time
    # bandwidth: the kernel refuses SCHED_FIFO; a short-lived process asks it
    probe = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no reason given"])[-1]
        return f"real-time scheduling refused here: {last}"
    return None


def start_hog(cpu: int, spin_ms: float = 1.0, rest_ms: float = 0.1) -> subprocess.Popen[str]:
    """The hog, started in a new session pinned to ``cpu``; returns once it is running."""
    code = rt_hog_program(cpu, spin_ms, rest_ms, ready="hog running")
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "hog running" not in line:
        rest = proc.stdout.read() if proc.poll() is not None else ""
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the hog did not start: {(line + rest).strip()[-300:]!r}")
    return proc
