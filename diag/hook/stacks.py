"""Python stacks in the hook: every thread's stack on a hang, and uncaught exceptions.

Frames are written as :class:`~diag.schema.StackDump` wants them: one per line, innermost first,
``"<file>:<line> <function>"``, at most :data:`~diag.schema.MAX_FRAMES` (the innermost kept).

:class:`ExceptHooks` chains ``sys.excepthook`` and ``threading.excepthook``: it records the
exception (its callback must be cheap and must not raise; a failure is swallowed here) and then
always calls the hook that was there before, so the job's own output and behaviour are unchanged.
Uninstalled, it restores the previous hooks if nobody replaced them since, and otherwise stays in
the chain as a pass-through.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from diag.schema import MAX_FRAMES


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread's stack, as the hook saw it (``thread_id``: the OS thread id where known)."""

    thread_id: int
    thread_name: str
    is_main: bool
    frames: str
    num_frames: int


@dataclass(frozen=True, slots=True)
class ExceptionInfo:
    """An uncaught exception: where and what, with its traceback frames (innermost first)."""

    thread_name: str
    is_main: bool
    exc_type: str
    message: str
    frames: str
    num_frames: int


def _frame_lines(frame: FrameType | None) -> Iterator[str]:
    while frame is not None:
        code = frame.f_code
        yield f"{code.co_filename}:{frame.f_lineno} {getattr(code, 'co_qualname', code.co_name)}"
        frame = frame.f_back


def format_frames(lines: list[str]) -> tuple[str, int]:
    """(the innermost :data:`MAX_FRAMES` lines joined, how many there were)."""
    return "\n".join(lines[:MAX_FRAMES]), len(lines)


def thread_stacks(skip_ident: int | None = None) -> list[ThreadStack]:
    """The Python stack of every thread of this process but ``skip_ident`` (the caller's own)."""
    threads = {t.ident: t for t in threading.enumerate()}
    main = threading.main_thread().ident
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == skip_ident:
            continue
        frames, num = format_frames(list(_frame_lines(frame)))
        thread = threads.get(ident)
        name = thread.name if thread is not None else ""
        tid = (thread.native_id if thread is not None else None) or ident
        out.append(ThreadStack(tid, name, ident == main, frames, num))
    out.sort(key=lambda s: (not s.is_main, s.thread_name))
    return out


def exception_info(
    exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None
) -> ExceptionInfo:
    """What :class:`~diag.schema.ExceptionEvent` keeps of an exception raised in this thread."""
    summary = traceback.extract_tb(tb) if tb is not None else []
    lines = [f"{fs.filename}:{fs.lineno} {fs.name}" for fs in reversed(summary)]
    frames, num = format_frames(lines)
    thread = threading.current_thread()
    name = f"{exc_type.__module__}.{exc_type.__qualname__}".removeprefix("builtins.")
    message = str(exc)[:1000] if exc is not None else ""
    return ExceptionInfo(thread.name, thread is threading.main_thread(), name, message, frames, num)


class ExceptHooks:
    """``sys.excepthook`` and ``threading.excepthook`` that report, then defer to the previous."""

    def __init__(self, on_exception: Callable[[ExceptionInfo], None]) -> None:
        self._on = on_exception
        self._prev_sys: Callable[..., Any] | None = None
        self._prev_thread: Callable[..., Any] | None = None
        self.active = False

    def install(self) -> None:
        self._prev_sys = sys.excepthook
        self._prev_thread = threading.excepthook
        sys.excepthook = self._sys_hook
        threading.excepthook = self._thread_hook
        self.active = True

    def uninstall(self) -> None:
        """Stop reporting; put the previous hooks back where ours are still installed."""
        self.active = False
        if sys.excepthook == self._sys_hook and self._prev_sys is not None:
            sys.excepthook = self._prev_sys
        if threading.excepthook == self._thread_hook and self._prev_thread is not None:
            threading.excepthook = self._prev_thread

    def _report(
        self, exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.active:
            return
        # diag's failure must not change how the job's error is shown
        with contextlib.suppress(Exception):
            self._on(exception_info(exc_type, exc, tb))

    def _sys_hook(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        self._report(exc_type, exc, tb)
        previous = self._prev_sys or sys.__excepthook__
        previous(exc_type, exc, tb)

    def _thread_hook(self, args: Any) -> None:
        if args.exc_type is not SystemExit:
            self._report(args.exc_type, args.exc_value, args.exc_traceback)
        previous = self._prev_thread or threading.__excepthook__
        previous(args)
