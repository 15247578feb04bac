"""Give freed memory back to the operating system after the analyzer's big, short-lived frames.

A flush re-concatenates the cached frames and a triage pass builds and drops frames of every
row; the freed space stays mapped in the process: in Arrow's memory pool (mimalloc or jemalloc
keep it for reuse) and in glibc's heap, which frees large blocks back only from its top (numpy's
big arrays land there once glibc's adaptive mmap threshold has grown). Measured with
``bench/scale.py``'s window at 16,384 ranks: resident memory after ingest 636 MiB, 581 MiB once
Arrow's pool released its unused pages, 455 MiB after ``malloc_trim``; the next pass's peak then
starts from there. :func:`release_free_memory` does both; each is skipped where it is missing
(another libc, an old pyarrow): only the resident size depends on it, never a result.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)  # the symbols already loaded: glibc's, where it is the libc
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> None:
    """Return the free pages of Arrow's pool and of the C heap to the system (never raises)."""
    with contextlib.suppress(Exception):
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        with contextlib.suppress(Exception):
            trim(0)
