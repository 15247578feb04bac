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

A dump holds the whole ring however little of it is new: the hook harvests when half of it is
(:mod:`diag.hook.fr_pacing`), so each entry was built, pickled and unpickled about twice, and at a
slow step (a harvest every ``fr_poll_interval_s`` whatever is new) several times (~330 us of the
hook thread's CPU per ~50 ms step). The native library also *reads* the generic ring from a
record id on (:meth:`FrDumper.since`: entries as the dump's dicts, the groups' configuration and
counters), so a harvest costs what is new; torch does not export the ring, and the library finds
it through ``libtorch_cpu.so``'s symbol table (:mod:`diag.hook.elf_symbols`). The reader is
trusted only once a read and torch's own dump of the same moment agree
(:meth:`FrDumper.verify`, at the first harvest that has entries); until then, where it cannot
be built or found, or once they disagree, the harvests dump as before. NCCL's ring is always
dumped (reading it needs CUDA's headers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("diag.hook")

#: the rings, and torch's binding that dumps each
RINGS: dict[str, str] = {"fr": "_dump_fr_trace", "nccl": "_dump_nccl_trace"}
#: verifications in a row whose groups differ (a group made in between) before the reader is off
CONFIG_MISSES = 3
#: an entry's fields that never change once recorded: what a read and a dump must agree on
STABLE_FIELDS = ("record_id", "pg_id", "process_group", "thread_name", "thread_id",
                 "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
                 "time_created_ns", "input_sizes", "input_dtypes", "output_sizes",
                 "output_dtypes", "timeout_ms", "is_p2p")  # fmt: skip


class FrDumper:
    """The ring this rank harvests (``ring``: "fr" or "nccl") and how it is dumped."""

    def __init__(self, c10d: Any) -> None:
        self._torch: dict[str, Callable[..., bytes] | None] = {
            ring: getattr(c10d, name, None) for ring, name in RINGS.items()
        }
        self._native: dict[str, Callable[[bool], Any]] = {}
        self.ring = "fr"
        self.num_native = 0  # dumps made without the GIL (probes included)
        #: the native reader of the generic ring (:meth:`since`), once it is loaded and until it
        #: fails; ``verified`` once a read agreed with torch's dump
        self._since: Callable[..., Any] | None = None
        self._next_id: Callable[[], Any] | None = None  # its probe (the same build has both)
        self.verified = False
        self.since_note = ""  # why the ring is dumped, not read ("" while it is read or unknown)
        self._epoch = 0
        self.num_reads = 0  # harvests and probes served by the reader
        self._config_misses = 0  # verifications whose group configurations differed

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

    def use_native(self, library: Any, *, read: bool = True) -> None:
        """Dump through diag's native library (an :class:`~diag.hook.opstats.OpStats`): each ring
        it can dump in this process (its NCCL dump answers None in a CPU build); and, with
        ``read``, read the generic ring through it where it can (:meth:`since`; trusted once
        :meth:`verify` passed), else ``since_note`` says why not."""
        for ring in RINGS:
            fn = library.dump_fn(ring)
            if fn is not None and self._torch[ring] is not None and fn(False) is not None:
                self._native[ring] = fn
        since = library.since_fn() if read and self._torch["fr"] is not None else None
        next_id = library.next_id_fn() if since is not None else None
        first = next_id() if next_id is not None else None
        if first is None:
            self.since_note = (library.since_why() if read else "off") or "no reader here"
            return
        self._since, self._next_id, self._epoch = since, next_id, int(first[1])

    @property
    def reads(self) -> bool:
        """Whether the harvested ring can be read from a record id on (:meth:`since`), trusted
        or not yet."""
        return self.ring == "fr" and self._since is not None

    def since(self, record_id: int) -> dict[str, Any] | None:
        """The generic ring from ``record_id`` on (a dump's dict, with ``next_record_id``); None
        when the reader is off (the ring was reset since: its ids started again, and the
        harvests go back to dumps)."""
        if self._since is None:
            return None
        try:
            read: dict[str, Any] | None = self._since(record_id, True)
        except Exception as exc:  # the harvest goes on with a dump
            self.off(f"the reader failed: {type(exc).__name__}: {exc}")
            return None
        return read if self._same_epoch(read and read["reset_epoch"]) else None

    def next_id(self) -> int | None:
        """The record id the ring gives its next entry (the pacer's probe: ~10 us); None when
        the reader is off."""
        if self._next_id is None:
            return None
        try:
            found = self._next_id()
        except Exception as exc:
            self.off(f"the reader failed: {type(exc).__name__}: {exc}")
            return None
        return int(found[0]) if self._same_epoch(found and found[1]) else None

    def _same_epoch(self, epoch: Any) -> bool:
        """Whether an answer (its ring's reset epoch; None: no answer) may be used: the reader
        is off once the ring was reset (its ids start again) or it answered nothing."""
        if epoch is None or int(epoch) != self._epoch:
            self.off("the reader failed" if epoch is None else "the Flight Recorder ring was reset")
            return False
        self.num_reads += 1
        return True

    def verify(self, dump: Mapping[str, Any]) -> bool:
        """Check the reader against ``dump``, torch's dump just made: a read from its first
        entry must hold the same entries (:data:`STABLE_FIELDS`) and group configuration. True
        once they agreed; False while there is nothing to compare (no entry yet) or once they
        did not (the reader is then off, with why)."""
        entries = [e for e in dump.get("entries") or () if isinstance(e, Mapping)]
        if self.verified or not entries or self._since is None:
            return self.verified
        low = min(int(e.get("record_id", -1)) for e in entries)
        read = self.since(max(low, 0))
        if read is None:
            return False
        mine = {int(e["record_id"]): e for e in read["entries"]}
        common = [e for e in entries if int(e.get("record_id", -1)) in mine]
        differ = [
            f for e in common for f in STABLE_FIELDS if e.get(f) != mine[int(e["record_id"])].get(f)
        ]
        if not common or differ:
            why = f"fields {sorted(set(differ))}" if differ else "no entry in common"
            self.off(f"a read and torch's dump disagree ({why})")
            return False
        if read["pg_config"] != dump.get("pg_config"):
            # the job may have made a group between the dump and the read: asked again at the
            # next harvest, a few times
            self._config_misses += 1
            if self._config_misses >= CONFIG_MISSES:
                self.off(f"a read and torch's dump disagree on the groups {CONFIG_MISSES} times")
            return False
        self.verified = True
        return True

    def off(self, why: str) -> None:
        """Stop reading (``why``, logged once): the harvests dump the ring again."""
        if self._since is not None:
            log.info("diag hook: Flight Recorder reader off: %s; dumping the ring", why)
        self._since = self._next_id = None
        self.verified, self.since_note = False, why

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
