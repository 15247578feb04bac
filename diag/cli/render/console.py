"""The consoles the commands print to, with one rule for their width.

On a terminal rich uses its width. Piped or redirected, ``COLUMNS`` (when set to a number) is the
width, as for any Unix tool; without it, 120 columns, so a report written to a file or a pager
keeps its columns instead of rich's 80-column default (one word per line in a summary column).
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from rich.console import Console

#: The width when the output is not a terminal and ``COLUMNS`` does not say.
PIPED_WIDTH = 120
#: No table is laid out narrower than this, whatever ``COLUMNS`` says.
MIN_WIDTH = 40


def width_for(stream: TextIO, environ: dict[str, str] | None = None) -> int | None:
    """The width to render for ``stream``: None (rich asks the terminal) on a terminal, else
    ``COLUMNS`` when it is a number (at least :data:`MIN_WIDTH`), else :data:`PIPED_WIDTH`."""
    env = os.environ if environ is None else environ
    try:
        if stream.isatty():
            return None
    except (AttributeError, ValueError):
        pass
    columns = env.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    return PIPED_WIDTH


def stdout_console(**kwargs: Any) -> Console:
    """A console on standard output, its width by :func:`width_for`."""
    return Console(width=width_for(sys.stdout), **kwargs)


def stderr_console(**kwargs: Any) -> Console:
    """A console on standard error, its width by :func:`width_for`."""
    return Console(stderr=True, width=width_for(sys.stderr), **kwargs)
