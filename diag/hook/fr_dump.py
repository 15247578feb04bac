"""Which Flight Recorder ring the hook harvests, and the call that dumps it.

torch keeps the entries of gloo (and of any backend timed with ``c10::Event``) in one ring, dumped
by ``_dump_fr_trace``, and, in the torch releases diag supports, NCCL's in a ring of its own
(``FlightRecorder<CUDAEvent>``), dumped by ``_dump_nccl_trace``, which only CUDA builds have. A
rank harvests one ring (:class:`FrDumper`): the generic one until one of its process groups uses
NCCL and this torch can dump NCCL's ring, NCCL's from then on (:meth:`FrDumper.follow`). The
collectives of the other ring of a job that uses both (a gloo group for CPU objects beside the NCCL
groups) keep the records of their Python calls, as on a torch without a Flight Recorder.

Both torch bindings hold the GIL while they build the dump (~5 us per entry: ~3 ms for a
512-entry ring), so the training thread cannot run Python meanwhile: at a ~5 ms step that was
the steady state's p99. diag's native library (:mod:`diag.hook.opstats`, where it is built) makes
the same C++ calls with the GIL released; once loaded (``fr_dump_native``), the dumps go through
it (:meth:`FrDumper.use_native`), the bytes identical.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: the rings, and torch's binding that dumps each
RINGS: dict[str, str] = {"fr": "_dump_fr_trace", "nccl": "_dump_nccl_trace"}


class FrDumper:
    """The ring this rank harvests (``ring``: "fr" or "nccl") and how it is dumped."""

    def __init__(self, c10d: Any) -> None:
        self._torch: dict[str, Callable[..., bytes] | None] = {
            ring: getattr(c10d, name, None) for ring, name in RINGS.items()
        }
        self._native: dict[str, Callable[[bool], Any]] = {}
        self.ring = "fr"
        self.num_native = 0  # dumps made without the GIL (probes included)

    @property
    def ok(self) -> bool:
        """Whether this torch has a Flight Recorder to dump."""
        return self._torch["fr"] is not None

    @property
    def may_follow(self) -> bool:
        """Whether :meth:`follow` could still switch rings (cheap: the hook asks every look)."""
        return self.ring == "fr" and self._torch["nccl"] is not None

    def follow(self, uses_nccl: bool) -> bool:
        """Switch to NCCL's ring once a group uses NCCL (True when it switched now; the caller
        harvests the generic ring first: its record ids start again in the other)."""
        if not (uses_nccl and self.may_follow):
            return False
        self.ring = "nccl"
        return True

    def use_native(self, library: Any) -> None:
        """Dump through diag's native library (an :class:`~diag.hook.opstats.OpStats`): each ring
        it can dump in this process (its NCCL dump answers None in a CPU build)."""
        for ring in RINGS:
            fn = library.dump_fn(ring)
            if fn is not None and self._torch[ring] is not None and fn(False) is not None:
                self._native[ring] = fn

    def native(self, ring: str | None = None) -> bool:
        """Whether ``ring`` (default: the harvested one) is dumped without the GIL."""
        return (ring or self.ring) in self._native

    def dump(self, *, collectives: bool = True) -> bytes:
        """The harvested ring's pickled dump without stack traces (``collectives`` False: only
        the groups' configuration and counters, the pacer's probe)."""
        fn = self._native.get(self.ring)
        if fn is not None:
            self.num_native += 1
            return bytes(fn(collectives))
        torch_fn = self._torch[self.ring]
        assert torch_fn is not None  # ok / follow checked it
        return torch_fn(includeCollectives=collectives, includeStackTraces=False)
