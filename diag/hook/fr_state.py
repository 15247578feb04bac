"""Flight Recorder harvesting state of the hook thread: new entries -> collective payloads.

Pure bookkeeping, no torch: the hook thread hands it each parsed dump. It

* remembers which FR ``record_id`` it already emitted (the ring buffer repeats entries),
* emits an entry at the first harvest after the one that first saw it done (so the record of the
  Python call that made it has arrived), and holds entries still in flight (not retired or
  completed) until they finish, the final harvest, or ``hold_s`` (a collective stuck that long is
  worth reporting as it is); a held entry the ring buffer overwrites meanwhile is emitted as last
  seen, so an entry one harvest saw is never lost (the pacing needs each entry seen once, not
  twice: :mod:`diag.hook.fr_pacing`),
* attributes each entry to the step whose ``[start, end)`` wall-clock window holds its
  ``time_created_ns`` (:class:`StepWindows`),
* matches Python-level calls the hook timed (:class:`PyCall`) to their FR entry (same thread,
  compatible op, created inside the call) and gives the entry the call's ``start_ns``/``end_ns``.
  The calls waiting for their entry are kept per thread, ordered by start: an entry looks only at
  the calls that can hold its creation time (a bisect, then back over at most the longest pending
  call's span), not at every pending call. A DDP job's C++ all-reduces have no Python call; with
  a scan of the whole list each of them cost ~100 us per harvest-held call on the hook thread.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from diag.flight_recorder import entry_to_collective, pg_sizes

#: Python API name -> FR op names it may appear under (backends implement some ops with others).
OP_ALIASES: dict[str, frozenset[str]] = {
    "all_gather_into_tensor": frozenset({"_allgather_base", "_all_gather_base", "all_gather"}),
    "reduce_scatter_tensor": frozenset({"_reduce_scatter_base", "reduce_scatter", "all_reduce"}),
    "all_to_all_single": frozenset({"all_to_all", "alltoall_base"}),
    "all_gather": frozenset({"allgather"}),
    "isend": frozenset({"send"}),
    "irecv": frozenset({"recv"}),
    "batch_isend_irecv": frozenset({"send", "recv", "coalesced"}),
}
MATCH_SLACK_NS = 50_000  # perf-counter -> wall-clock conversion error allowed when matching


@dataclass(slots=True)
class PyCall:
    """A Python-level torch.distributed call the hook timed (wall-clock ns)."""

    step: int
    op: str
    start_ns: int
    end_ns: int
    num_bytes: int
    dtype: str
    pg_name: str
    pg_size: int
    sync: bool
    tid: int
    dumps_seen: int = 0
    order: int = -1  # the order the hook received the calls in (set by :meth:`FrState.add_call`)

    def payload(self) -> dict[str, Any]:
        """The CollectiveEvent payload of a call no FR entry matched (``origin="python"``)."""
        return {
            "op": self.op,
            "pg_name": self.pg_name,
            "pg_size": self.pg_size,
            "is_p2p": self.op in ("send", "recv", "isend", "irecv", "batch_isend_irecv"),
            "num_bytes": self.num_bytes,
            "dtype": self.dtype,
            "enqueue_ns": self.start_ns,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_ns": self.end_ns - self.start_ns,
            "state": "completed" if self.sync else "enqueued",
            "origin": "python",
        }


class StepWindows:
    """Wall-clock step boundaries (step k = [end of k-1, end of k)); keeps the last ends."""

    def __init__(self, keep: int = 4096) -> None:
        self.first_start_ns: int | None = None
        self._ends: list[int] = []
        self._base = 0  # step index of _ends[0]
        self._keep = keep

    def start(self, wall_ns: int) -> None:
        if self.first_start_ns is None:
            self.first_start_ns = wall_ns

    def end(self, step: int, wall_ns: int) -> None:
        if not self._ends:
            self._base = step
        self._ends.append(wall_ns)
        if len(self._ends) > 2 * self._keep:
            del self._ends[: self._keep]
            self._base += self._keep

    def step_at(self, wall_ns: int) -> int:
        """The step in progress at ``wall_ns``; -1 before the first activity."""
        if self.first_start_ns is None or wall_ns < self.first_start_ns:
            return -1
        return self._base + bisect.bisect_right(self._ends, wall_ns)


class FrState:
    """What the hook has harvested from the Flight Recorder so far (see the module docstring)."""

    def __init__(self, windows: StepWindows, hold_s: float = 30.0) -> None:
        self.windows = windows
        self.hold_s = hold_s
        self._emitted: set[int] = set()
        self._held_since: dict[int, float] = {}
        self._held: dict[int, Mapping[str, Any]] = {}  # record_id -> the entry as last seen
        #: calls no entry matched yet, by thread id (``str``), each list ordered by ``start_ns``,
        #: and beside each its calls' ``start_ns`` (bisected without a key function: one Python
        #: call per comparison was a third of the matching's cost)
        self._calls: dict[str, list[PyCall]] = {}
        self._starts: dict[str, list[int]] = {}
        self._longest_ns = 0  # at least the longest pending call's span (bounds the look back)
        self._order = itertools.count()
        self.counts: dict[int, int] = {}  # step -> collective events attributed to it

    def add_call(self, call: PyCall) -> None:
        call.order = next(self._order)
        tid = str(call.tid)
        starts = self._starts.setdefault(tid, [])
        i = bisect.bisect_right(starts, call.start_ns)
        starts.insert(i, call.start_ns)
        self._calls.setdefault(tid, []).insert(i, call)
        self._longest_ns = max(self._longest_ns, call.end_ns - call.start_ns)

    def _match(self, op: str, created_ns: int, tid: str, num_bytes: int) -> PyCall | None:
        """The call that made an entry: same thread, compatible op, created inside the call
        (+- :data:`MATCH_SLACK_NS`); among several, the one with the same payload size, else the
        first received."""
        tids = [tid] if tid else list(self._calls)
        found: list[tuple[int, str, int]] = []  # (order, its thread, index in its list)
        oldest_start = created_ns - MATCH_SLACK_NS - self._longest_ns
        for t in tids:
            calls = self._calls.get(t)
            if not calls:
                continue
            starts = self._starts[t]
            i = bisect.bisect_right(starts, created_ns + MATCH_SLACK_NS) - 1
            while i >= 0 and starts[i] >= oldest_start:
                call = calls[i]
                if created_ns <= call.end_ns + MATCH_SLACK_NS and (
                    call.op == op or op in OP_ALIASES.get(call.op, ())
                ):
                    found.append((call.order, t, i))
                i -= 1
        if not found:
            return None
        found.sort(key=lambda f: f[0])
        calls_of = self._calls
        _, t, i = next((f for f in found if calls_of[f[1]][f[2]].num_bytes == num_bytes), found[0])
        del self._starts[t][i]
        return calls_of[t].pop(i)

    def process(
        self,
        dump: Mapping[str, Any],
        now_s: float,
        *,
        final: bool = False,
        extra_sizes: Mapping[str, int] | None = None,
        tick: Callable[[], None] | None = None,
    ) -> list[tuple[int, dict[str, Any]]]:
        """The ``(step, CollectiveEvent payload)`` of every entry of ``dump`` due now, in order;
        ``tick`` is called between entries it turns into payloads (the hook thread's
        :meth:`~diag.hook.gil_share.GilShare.tick`)."""
        sizes = dict(extra_sizes or {})
        sizes.update(pg_sizes(dump.get("pg_config") or {}))
        entries = [e for e in dump.get("entries") or () if isinstance(e, Mapping)]
        # each entry's id read once (a dump lists them in record order: sorted only if not)
        rids = [int(e.get("record_id", -1)) for e in entries]
        if rids != sorted(rids):
            pairs = sorted(zip(rids, entries, strict=True), key=lambda p: p[0])
            rids, entries = [p[0] for p in pairs], [p[1] for p in pairs]
        out: list[tuple[int, dict[str, Any]]] = []
        present = set(rids)
        # Held entries the ring overwrote since: emitted as last seen, oldest first.
        for rid in sorted(r for r in self._held if r not in present):
            out.append(self._emit(rid, self._held.pop(rid), sizes))
        emitted = self._emitted
        for rid, entry in zip(rids, entries, strict=True):
            if rid in emitted:
                continue
            # An entry waits one harvest even when done: the record of the Python call that made
            # it may reach the hook thread only after the dump that first shows the entry.
            first = self._held_since.setdefault(rid, now_s)
            done = bool(entry.get("retired")) or entry.get("state") == "completed"
            due = (done and first < now_s) or now_s - first >= self.hold_s
            if not (due or final):
                self._held[rid] = entry
                continue
            self._held.pop(rid, None)
            if tick is not None:
                tick()
            out.append(self._emit(rid, entry, sizes))
        if entries:  # forget ids that left the ring buffer
            low = rids[0]
            self._emitted = {r for r in self._emitted if r >= low}
        return out

    def first_needed(self, top: int) -> int:
        """The lowest record id a harvest must see again: the oldest entry held (seen, not yet
        emitted), else the one after ``top``, the highest harvested (-1 before the first)."""
        return min(self._held, default=max(top, -1) + 1)

    def new_ring(
        self, extra_sizes: Mapping[str, int] | None = None
    ) -> list[tuple[int, dict[str, Any]]]:
        """The harvest moves to another Flight Recorder ring (:mod:`diag.hook.fr_dump`), whose
        record ids start again: the held entries of this one are emitted as last seen (as when
        the ring overwrites them) and its ids forgotten. The calls waiting for an entry stay."""
        sizes = extra_sizes or {}
        out = [self._emit(rid, self._held.pop(rid), sizes) for rid in sorted(self._held)]
        self._emitted.clear()
        self._held_since.clear()
        return out

    def _emit(
        self, rid: int, entry: Mapping[str, Any], sizes: Mapping[str, int]
    ) -> tuple[int, dict[str, Any]]:
        self._held_since.pop(rid, None)
        payload = entry_to_collective(entry, sizes)
        step = self.windows.step_at(payload["enqueue_ns"])
        tid = str(entry.get("thread_id", ""))
        call = self._match(payload["op"], payload["enqueue_ns"], tid, payload["num_bytes"])
        if call is not None and payload["start_ns"] is None:
            payload["start_ns"] = call.start_ns
            payload["end_ns"] = call.end_ns
            payload["duration_ns"] = call.end_ns - call.start_ns
        self._emitted.add(rid)
        self.counts[step] = self.counts.get(step, 0) + 1
        return step, payload

    def unmatched_calls(self, dump_wall_ns: int, *, final: bool = False) -> list[PyCall]:
        """Calls that ended before this dump and no entry matched through two dumps (or at exit),
        in the order the hook received them."""
        out: list[PyCall] = []
        longest = 0
        for tid, calls in list(self._calls.items()):
            keep: list[PyCall] = []
            for call in calls:
                if call.end_ns < dump_wall_ns:
                    call.dumps_seen += 1
                if final or call.dumps_seen >= 2:
                    out.append(call)
                else:
                    keep.append(call)
                    longest = max(longest, call.end_ns - call.start_ns)
            if keep:
                self._calls[tid] = keep
                self._starts[tid] = [c.start_ns for c in keep]
            else:
                del self._calls[tid]
                del self._starts[tid]
        self._longest_ns = longest
        out.sort(key=lambda c: c.order)
        for call in out:
            self.counts[call.step] = self.counts.get(call.step, 0) + 1
        return out
