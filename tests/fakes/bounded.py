"""Budgets for tests of hostile inputs: the code under test finishes within a time and a memory
budget, or the test fails; it never hangs the suite or exhausts the machine.

:func:`bounded` runs its block with a ``SIGALRM`` deadline (main thread only; it interrupts Python
loops and blocking system calls alike, a long C call once it returns), measures the block's peak
resident memory with the kernel's high-water mark (``VmHWM``, reset through
``/proc/self/clear_refs``: C allocations count, and measuring costs nothing), and caps the
process's address space a little above the budget meanwhile, so a runaway allocation fails fast
with ``MemoryError`` instead of swapping the machine. :func:`in_thread` runs a call that may block
forever in a daemon thread, with a timeout.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


class OverBudget(BaseException):
    """The block ran past its deadline (a ``BaseException``, so no ``except Exception`` in the
    code under test can swallow it)."""


@dataclass(slots=True)
class Usage:
    """``peak_mib``: the block's peak resident memory above where it started (MiB), set when
    the block ends."""

    peak_mib: float = 0.0


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


@contextlib.contextmanager
def bounded(seconds: float = 10.0, max_mib: float = 64.0) -> Iterator[Usage]:
    """Fail unless the block ends within ``seconds`` and its resident memory grows by at most
    ``max_mib`` MiB."""
    usage = Usage()

    def on_alarm(signum: int, frame: object) -> None:
        raise OverBudget(f"took more than {seconds} s")

    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current resident size
    start_kib = _status_kib("VmRSS")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _status_kib("VmSize") * 1024 + int(4 * max_mib + 1024) * (1 << 20)
    if hard == resource.RLIM_INFINITY or cap < hard:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield usage
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        usage.peak_mib = (_status_kib("VmHWM") - start_kib) / 1024
    assert usage.peak_mib <= max_mib, f"grew by {usage.peak_mib:.0f} MiB (budget {max_mib})"


def in_thread(fn: Callable[[], T], seconds: float, *, unblock: Callable[[], None]) -> T:
    """``fn()`` in a daemon thread; if it has not returned after ``seconds``, call ``unblock``
    (to release whatever it waits on) and fail."""
    out: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        unblock()
        raise AssertionError(f"still running after {seconds} s (blocked)")
    if errors:
        raise errors[0]
    return out[0]
