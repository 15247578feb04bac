"""Kernel summaries shared by the hook (its own profiler windows) and by the Kineto reader (traces
from elsewhere): the category rule and the per-kernel record, so that tables built from either
agree. Standard library only: the hook imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelStat:
    """One operator or kernel over a window or trace, with :class:`~diag.schema.KernelSummary`'s
    payload fields and meaning: durations summed over ``num_calls`` calls; ``step_share`` is
    ``total_ns`` over the window's (or trace's) span (nested CPU operators overlap, so CPU shares
    can sum past 1); ``device`` is "cuda:N" for GPU activity, else "cpu"; ``input_shapes`` are the
    heaviest call's input dims ("" when not recorded)."""

    name: str
    category: str
    device: str
    num_calls: int
    total_ns: int
    median_ns: int
    max_ns: int
    step_share: float
    input_shapes: str = ""

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")
