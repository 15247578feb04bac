"""Which :class:`~diag.schema.KernelSummary` category a profiler event belongs to.

One rule for the hook (summarizing its own windows) and for Kineto files from elsewhere, so that
tables built from either agree. Standard library only: the hook imports it.
"""

from __future__ import annotations

#: Kineto event categories that are summarized as themselves.
SUMMARIZED = frozenset({"cpu_op", "kernel", "gpu_memcpy", "gpu_memset"})
#: Annotations, summarized only when they name a collective (e.g. ``gloo:all_reduce``).
ANNOTATIONS = frozenset({"user_annotation", "gpu_user_annotation"})
#: A name containing one of these (case-insensitive) is communication.
COLLECTIVE_MARKERS = ("gloo:", "nccl", "c10d::")


def is_collective(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in COLLECTIVE_MARKERS)


def kernel_category(name: str, cat: str) -> str | None:
    """ "cpu_op", "kernel", "gpu_memcpy", "gpu_memset" or "collective"; ``None`` when an event of
    Kineto category ``cat`` is not summarized (python functions, CUDA runtime calls, other
    annotations)."""
    if cat in SUMMARIZED:
        return "collective" if is_collective(name) else cat
    if cat in ANNOTATIONS and is_collective(name):
        return "collective"
    return None
