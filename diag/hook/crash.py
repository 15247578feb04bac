"""Every thread's Python stack when the process dies of a fatal signal, into a file of the run.

A worker that dies of SIGSEGV, SIGABRT (a failed heap check, an assertion, ``std::terminate``),
SIGBUS, SIGFPE or SIGILL leaves only an exit code: torchrun says ``exitcode: -6``. The standard
library's :mod:`faulthandler` writes, from the signal handler, the Python stack of every thread
and then lets the signal take its course (the process still dies of it, with the same exit code).
The hook enables it with a file of its own, ``<crash_dir>/rank<R>.pid<P>.log``, so the stacks of
one rank never interleave with another's and ``diag triage`` knows whose they are
(:mod:`diag.postmortem.logs` reads them as a log of rank R).

The job's own choice wins: when faulthandler is already enabled (``PYTHONFAULTHANDLER``, the
job's code), nothing is changed. A detach restores the job's state (disabled, file closed and
removed when empty). At exit the file is removed when empty and faulthandler stays on, writing to
standard error, for the crashes of interpreter shutdown. Never raises: a failure to set this up
is the hook's own error, counted, and the job runs as before.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
from typing import IO


class CrashStacks:
    """Faulthandler enabled into one file per process (see the module docstring)."""

    def __init__(self, crash_dir: str, rank: int) -> None:
        self.crash_dir = crash_dir
        self.rank = rank
        self.path = ""
        self._file: IO[str] | None = None

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def enable(self) -> None:
        """Enable faulthandler into this process's file (nothing when the job enabled it or no
        ``crash_dir`` is set). May raise ``OSError``: the caller counts it."""
        if not self.crash_dir or faulthandler.is_enabled():
            return
        os.makedirs(self.crash_dir, exist_ok=True)
        path = os.path.join(self.crash_dir, f"rank{self.rank}.pid{os.getpid()}.log")
        fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
        try:
            faulthandler.enable(file=fh, all_threads=True)
        except Exception:
            fh.close()
            raise
        self._file, self.path = fh, path

    def disable(self, *, exiting: bool) -> None:
        """At exit: keep faulthandler on (to standard error) and drop the file if empty; at a
        detach: turn it off as it was before the hook."""
        fh, self._file = self._file, None
        if fh is None:
            return
        try:
            faulthandler.disable()
            if exiting and sys.stderr is not None:
                with contextlib.suppress(Exception):
                    faulthandler.enable(file=sys.stderr, all_threads=True)
        finally:
            fh.close()
            with contextlib.suppress(OSError):
                if os.path.getsize(self.path) == 0:
                    os.unlink(self.path)
