"""The calling thread's run-queue delay: time it was ready to run but waited for a CPU.

Linux keeps it per thread in ``/proc/thread-self/schedstat`` (``run_ns wait_ns timeslices``,
schedstats always on since 4.x). On a CPU-contended host a rank's step grows because its training
thread waits for a core, not because its device is slow; the hook records this delay per step
(:attr:`diag.schema.StepEvent.cpu_wait_ns`) so the detectors can tell the two apart.

:func:`runqueue_clock` returns a clock for the calling thread (an fd kept open and re-read with
``pread``: about 3 us) or ``None`` where the file is missing or unreadable; given another
thread's ``/proc/self/task/TID/schedstat``, the clock of that thread (``diag attach`` installs
the hook from a thread of its own). :func:`clock_fd` gives a clock's descriptor to diag's native
library, which reads it at the backward's "local gradients done" mark (``opstats.cpp``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

SCHEDSTAT = "/proc/thread-self/schedstat"


def runqueue_clock(path: str = SCHEDSTAT) -> Callable[[], int] | None:
    """A function returning the calling thread's cumulative run-queue delay in ns, or ``None``.

    The file is opened by the calling thread, so the clock follows that thread wherever it is
    called from (``thread-self`` is resolved at open time)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None

    def read() -> int:
        try:
            return int(os.pread(fd, 128, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    try:
        read_ok = len(os.pread(fd, 128, 0).split()) >= 2
    except OSError:
        read_ok = False
    if not read_ok:
        os.close(fd)
        return None
    read.fd = fd  # type: ignore[attr-defined]  # for clock_fd: kept open as long as the clock
    return read


def clock_fd(clock: Callable[[], int] | None) -> int:
    """The descriptor a :func:`runqueue_clock` clock reads, -1 for none (or another clock)."""
    fd = getattr(clock, "fd", -1)
    return fd if isinstance(fd, int) else -1
