"""Node-side collective summaries: one record per rank, step and process group instead of one
event per collective, the raw rows kept on the node and shipped again on request (schema 1.17).

Why: a sharded (FSDP) or pipelined job issues hundreds of collectives per rank and step. Shipped
one event each, a 100,000-rank job sends ~10^7 events/s to one analyzer. The analysis reads them
per group and step (the link detector's cost per byte, its arrival skew; the layout's groups), so
the daemon sums them there and ships one :class:`~diag.schema.CollectiveSummary` per (rank, step,
group): a few per rank-step. The raw rows stay in a bounded in-memory ring on the node
(``retain_s``, ``retain_max_bytes``: each rank's step kept as its rows' encoded protos, ~170
bytes a row; the oldest go first, counted; a fetch of steps older than the ring finds nothing)
and ship again, as ``CollectiveEvent`` rows under the daemon's own source, when the analyzer
asks for a window of steps (:meth:`CollectiveSummarizer.fetch`, driven by a ``CollectiveFetch``
control message): the per-collective evidence (exact arrival skews, which call was slow) comes
for the steps that decide a finding, not for every step of every rank.

What still ships raw, always: everything while the analyzer has not said it reads summaries
(schema 1.17: its replies' version; an older one would refuse the batch), collectives not
completed when harvested (a hang's evidence),
every collective of a rank's first ``raw_steps`` steps (the layout's p2p order and the early
baselines read them; a finding's window reaches back by fetch), and everything while the mode is
``raw`` or, in ``auto``, while the job is smaller than ``min_world`` ranks (a small job's raw rows
cost nothing worth saving and keep every finding exactly as before).

When: a rank's collectives wait on the node until its ``StepEvent`` for that step passes (the hook
emits a step's collectives before or with its step event); those of steps up to it are summed
then. Rows whose step never ends (the rank stopped stepping) are summed after ``max_pending_s``.

Pure logic: no threads, no I/O; the daemon calls it under its own lock.
"""

from __future__ import annotations

import dataclasses
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from diag import schema
from diag.errors import ConfigError
from diag.proto import diag_pb2 as pb
from diag.transport import codec

MODES = ("raw", "summary", "auto")
_LEN = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class SummaryConfig:
    """How a daemon ships collectives (``DaemonConfig.collectives*``)."""

    mode: str = "auto"  # raw | summary | auto (summary once the job has >= min_world ranks)
    min_world: int = 256
    raw_steps: int = 10  # each rank's first steps ship raw
    retain_s: float = 600.0  # raw rows kept on the node this long for a fetch
    retain_max_bytes: int = 256 * 1024 * 1024  # and at most this many, encoded (~170 B a row)
    max_pending_s: float = 30.0  # rows whose step never ends are summed after this

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"collectives must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.min_world < 1 or self.raw_steps < 0 or self.retain_max_bytes < 0:
            raise ConfigError(
                "collectives_min_world must be >= 1, collectives_raw_steps and "
                "collectives_retain_max_bytes >= 0"
            )
        if self.retain_s < 0 or self.max_pending_s <= 0:
            raise ConfigError("collectives_retain_s must be >= 0 and max_pending_s > 0")


@dataclass(frozen=True, slots=True)
class SummaryStats:
    """Counters since start."""

    active: bool  # summarizing now (summary mode, or auto with a large enough job)
    num_summarized: int  # raw rows folded into summaries
    num_summaries: int
    num_retained: int  # raw rows held for a fetch now
    retained_bytes: int  # their size, encoded
    num_evicted: int  # raw rows that aged out of the ring unfetched (its turnover)
    num_fetched: int  # raw rows shipped again on request


def _completed(e: schema.CollectiveEvent) -> bool:
    return e.state in ("", "completed")


def summed_here(e: schema.Event, raw_steps: int) -> bool:
    """Whether a summarizing daemon sums ``e`` (else it ships raw): a completed collective of a
    step from ``raw_steps`` on."""
    return isinstance(e, schema.CollectiveEvent) and _completed(e) and e.step >= raw_steps


def as_shipped(events: Iterable[schema.Event], raw_steps: int = 10) -> list[schema.Event]:
    """``events`` as summarizing daemons ship them, offline (a simulated run, a benchmark): the
    rows :func:`summed_here` replaced by their :func:`summarize` output, each summary numbered
    under its host's daemon source (``"<host>/daemon/1"``)."""
    out: list[schema.Event] = []
    held: list[schema.CollectiveEvent] = []
    for e in events:
        if summed_here(e, raw_steps):
            assert isinstance(e, schema.CollectiveEvent)
            held.append(e)
        else:
            out.append(e)
    return out + relayed(summarize(held))


def relayed(summaries: Iterable[schema.CollectiveSummary]) -> list[schema.CollectiveSummary]:
    """``summaries`` stamped as their hosts' daemons relay them: source ``"<host>/daemon/1"``,
    numbered from 0 per host in order."""
    seqs: dict[str, int] = {}
    out = []
    for s in summaries:
        source = f"{s.host}/daemon/1"
        seqs[source] = seq = seqs.get(source, -1) + 1
        out.append(dataclasses.replace(s, source=source, seq=seq))
    return out


def summarize(rows: Sequence[schema.CollectiveEvent]) -> list[schema.CollectiveSummary]:
    """One summary per (rank, step, group) of ``rows`` (any order), in (rank, step, group) order.
    The envelope (host, rank, local rank, job, step, ts) is the rank's; ``source``/``seq`` are
    left for the daemon to stamp."""
    groups: dict[tuple[int, int, str], list[schema.CollectiveEvent]] = {}
    for e in rows:
        groups.setdefault((e.rank, e.step, e.pg_name), []).append(e)
    out = []
    for (rank, step, pg), es in sorted(groups.items()):
        coll = [e for e in es if not e.is_p2p]
        p2p = [e for e in es if e.is_p2p]
        timed = [d for e in coll if (d := _duration(e)) is not None]
        enq = [e.enqueue_ns for e in coll]
        seqs = [e.seq_id for e in coll if e.seq_id >= 0]
        last = max(es, key=lambda e: e.ts_ns)
        out.append(
            schema.CollectiveSummary(
                ts_ns=last.ts_ns,
                host=last.host,
                rank=rank,
                local_rank=last.local_rank,
                job_id=last.job_id,
                source="",
                seq=-1,
                step=step,
                pg_name=pg,
                pg_desc=next((e.pg_desc for e in es if e.pg_desc), ""),
                pg_size=max(e.pg_size for e in es),
                num_collectives=len(coll),
                num_bytes=sum(e.num_bytes for e in coll),
                num_p2p=len(p2p),
                p2p_bytes=sum(e.num_bytes for e in p2p),
                num_timed=len(timed),
                duration_sum_ns=sum(timed),
                duration_max_ns=max(timed, default=0),
                first_enqueue_ns=min(enq, default=0),
                last_enqueue_ns=max(enq, default=0),
                mean_enqueue_ns=sum(enq) // len(enq) if enq else 0,
                first_seq_id=min(seqs, default=-1),
                last_seq_id=max(seqs, default=-1),
                num_not_completed=sum(1 for e in es if not _completed(e)),
            )
        )
    return out


def _duration(e: schema.CollectiveEvent) -> int | None:
    if e.duration_ns is not None:
        return e.duration_ns
    if e.start_ns is not None and e.end_ns is not None:
        return e.end_ns - e.start_ns
    return None


@dataclass(slots=True)
class _Kept:
    """The raw rows of one rank's step summed in one go, encoded (the ``pb.Event`` of each,
    length-prefixed): ~170 bytes a row where the decoded event takes ~430."""

    t: float
    rank: int
    step: int
    rows: int
    blob: bytes
    shipped: bool = False


def _encode(data: Sequence[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(d)) + d for d in data)


def decode(blobs: Iterable[bytes]) -> list[schema.CollectiveEvent]:
    """The raw rows of :meth:`CollectiveSummarizer.fetch_encoded`'s blobs, in order."""
    out = []
    for blob in blobs:
        at = 0
        while at < len(blob):
            (n,) = _LEN.unpack_from(blob, at)
            at += _LEN.size
            e = codec.event_from_proto(pb.Event.FromString(blob[at : at + n]))
            at += n
            if isinstance(e, schema.CollectiveEvent):
                out.append(e)
    return out


class CollectiveSummarizer:
    """Decides, per batch from a hook, which collectives ship raw and which wait to be summed;
    keeps the summed rows for a fetch."""

    def __init__(self, cfg: SummaryConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self._clock = clock
        self._world = 0  # the largest world size a rank reported
        #: whether the analyzer reads summaries (the daemon sets it from its replies' schema
        #: version; an older analyzer would refuse the batches): raw rows while it does not
        self.peer_reads = True
        # per hook source: (arrival time, row, its encoded proto) waiting for its step to end
        self._pending: dict[str, list[tuple[float, schema.CollectiveEvent, bytes]]] = {}
        self._ring: deque[_Kept] = deque()
        self._ring_rows = 0
        self._ring_bytes = 0
        self.num_summarized = 0
        self.num_summaries = 0
        self.num_evicted = 0
        self.num_fetched = 0

    @property
    def active(self) -> bool:
        if not self.peer_reads:
            return False
        if self.cfg.mode == "auto":
            return self._world >= self.cfg.min_world
        return self.cfg.mode == "summary"

    def take(
        self, events: Sequence[schema.Event], protos: Sequence[pb.Event] | None = None
    ) -> tuple[list[int], list[schema.CollectiveSummary]]:
        """Read one hook batch (``protos``: the same events as received, kept encoded; else
        they are encoded here): the indices of ``events`` to hold back (summed, not forwarded)
        and the summaries due now (their ranks' steps ended in this batch)."""
        for e in events:
            if isinstance(e, schema.RankInfo) and e.world_size > self._world:
                self._world = e.world_size
        if not self.active and not self._pending:
            return [], []
        now = self._clock()
        held: list[int] = []
        ended: dict[str, int] = {}  # source -> the newest step that ended in this batch
        for i, e in enumerate(events):
            if isinstance(e, schema.StepEvent):
                ended[e.source] = max(ended.get(e.source, -1), e.step)
            elif self.active and summed_here(e, self.cfg.raw_steps):
                assert isinstance(e, schema.CollectiveEvent)
                held.append(i)
                proto = protos[i] if protos is not None else codec.event_to_proto(e)
                self._pending.setdefault(e.source, []).append((now, e, proto.SerializeToString()))
        due: list[tuple[float, schema.CollectiveEvent, bytes]] = []
        for source, step in ended.items():
            rows = self._pending.get(source)
            if not rows:
                continue
            self._pending[source] = [r for r in rows if r[1].step > step]
            due.extend(r for r in rows if r[1].step <= step)
        return held, self._sum(due, now)

    def expire(self, *, everything: bool = False) -> list[schema.CollectiveSummary]:
        """Summaries of rows that waited ``max_pending_s`` for their step to end (all of them
        with ``everything``: the daemon is stopping); also ages the ring."""
        now = self._clock()
        cutoff = now - self.cfg.max_pending_s
        due: list[tuple[float, schema.CollectiveEvent, bytes]] = []
        for source in list(self._pending):
            rows = self._pending[source]
            old = [r for r in rows if everything or r[0] <= cutoff]
            if old:
                due.extend(old)
                rest = [r for r in rows if not (everything or r[0] <= cutoff)]
                if rest:
                    self._pending[source] = rest
                else:
                    del self._pending[source]
        out = self._sum(due, now)
        self._age(now)
        return out

    def fetch(
        self, ranks: Iterable[int], first_step: int, last_step: int
    ) -> list[schema.CollectiveEvent]:
        """The kept raw rows of ``ranks`` (empty: all) in steps ``first_step..last_step``, in the
        order they came; each row ships at most once (a second request for it gets nothing: the
        analyzer has them)."""
        return decode(self.fetch_encoded(ranks, first_step, last_step))

    def fetch_encoded(self, ranks: Iterable[int], first_step: int, last_step: int) -> list[bytes]:
        """:meth:`fetch` still encoded (one blob per rank-step, for :func:`decode`): what the
        daemon takes under its lock, decoding outside it."""
        want = set(ranks)
        self._age(self._clock())
        out: list[bytes] = []
        for k in self._ring:
            if k.shipped or not first_step <= k.step <= last_step or (want and k.rank not in want):
                continue
            k.shipped = True
            self.num_fetched += k.rows
            out.append(k.blob)
        return out

    def stats(self) -> SummaryStats:
        return SummaryStats(
            active=self.active,
            num_summarized=self.num_summarized,
            num_summaries=self.num_summaries,
            num_retained=self._ring_rows,
            retained_bytes=self._ring_bytes,
            num_evicted=self.num_evicted,
            num_fetched=self.num_fetched,
        )

    def _sum(
        self, rows: list[tuple[float, schema.CollectiveEvent, bytes]], now: float
    ) -> list[schema.CollectiveSummary]:
        if not rows:
            return []
        out = summarize([e for _, e, _ in rows])
        self.num_summarized += len(rows)
        self.num_summaries += len(out)
        if self.cfg.retain_s > 0 and self.cfg.retain_max_bytes > 0:
            by_step: dict[tuple[int, int], list[bytes]] = {}
            for _, e, data in rows:
                by_step.setdefault((e.rank, e.step), []).append(data)
            for (rank, step), encoded in by_step.items():
                kept = _Kept(now, rank, step, len(encoded), _encode(encoded))
                self._ring.append(kept)
                self._ring_rows += kept.rows
                self._ring_bytes += len(kept.blob)
        self._age(now)
        return out

    def _age(self, now: float) -> None:
        ring, cutoff, most = self._ring, now - self.cfg.retain_s, self.cfg.retain_max_bytes
        while ring and (self._ring_bytes > most or ring[0].t < cutoff):
            k = ring.popleft()
            self._ring_rows -= k.rows
            self._ring_bytes -= len(k.blob)
            if not k.shipped:
                self.num_evicted += k.rows
