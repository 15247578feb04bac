"""``diag`` commands run in the test's own process: what a user sees of ``diag ARGS...`` (exit code,
stdout, stderr) without starting an interpreter.

:func:`run_cli` calls :func:`diag.cli.main.main` with stdout and stderr redirected, and with the
logging and warnings of a fresh ``python -m diag.cli.main``: the root logger has no handler yet, so
``main``'s ``basicConfig`` writes log records to the redirected stderr; warnings are shown on it
under Python's default filters. ``SystemExit`` (argparse errors, ``--help``) becomes the exit code
as the interpreter would make it; any other exception propagates, so a traceback fails the test.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from diag.cli.main import main


@dataclass(frozen=True, slots=True)
class CliResult:
    """What ``diag ARGS...`` left: its exit code and everything it wrote to stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliResult:
    """Run ``diag *args`` in this process and return its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        _fresh_logging(),
        _default_warnings(),
    ):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = _exit_code(exc.code)
    return CliResult(code, out.getvalue(), err.getvalue())


def _exit_code(code: object) -> int:
    """The exit status the interpreter gives ``sys.exit(code)`` (a message goes to stderr)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _fresh_logging() -> Iterator[None]:
    """The root logger as a new interpreter has it (no handler, WARNING), restored afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    for h in handlers:
        root.removeHandler(h)
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for h in root.handlers[:]:  # the handler main's basicConfig added on the redirected stderr
            root.removeHandler(h)
            h.close()
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)


@contextlib.contextmanager
def _default_warnings() -> Iterator[None]:
    """Python's default warning filters (no -W, no PYTHONWARNINGS), shown on sys.stderr (pytest
    records warnings instead of showing them: its recorder is set aside until the command ends)."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        for ignored in (
            DeprecationWarning,
            PendingDeprecationWarning,
            ImportWarning,
            ResourceWarning,
        ):
            warnings.filterwarnings("ignore", category=ignored, append=True)
        warnings.showwarning = _show_on_stderr
        yield


def _show_on_stderr(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def one_error_line(res: CliResult, command: str) -> str:
    """The one line a refused ``diag COMMAND`` prints (exit 2, no traceback), checked."""
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"diag {command}: error: ")
    return lines[0]
