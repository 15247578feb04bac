"""The per-node daemon: the composition root that wires listener, collectors, spool and shipper.

Data path: hooks write frames to the :class:`~diag.daemon.listener.HookListener`; their events are
forwarded unchanged (their ``source``/``seq`` kept) into an in-memory queue, together with the
daemon's own events (collector samples, ``CollectorError``, ``ClockSync``; source
``"<host>/daemon/<pid>"``, seq from 0). The main loop runs each collector on its own interval and
cuts the queue into batches of at most ``batch_max_events`` every ``flush_interval_s`` (or sooner
when a full batch is waiting); each batch goes to the :class:`~diag.daemon.spool.Spool` first, from
which the :class:`~diag.daemon.shipper.Shipper` ships it to the analyzer. A ``HangReport`` from a
hook is also handed to every :class:`~diag.daemon.collectors.base.HangAware` collector (the rank
watch then takes native stacks of every local rank with py-spy). Each loop the
:class:`~diag.daemon.hook_watch.HookWatch` names the hooks whose connection stayed open without a
health report for several of their intervals while their process ran; each such silence ships
once, as a ``HookSilent`` of the daemon's (and one warning line).

Control path (pull only): every ``control_poll_interval_s`` (0.5 s; <= 0 turns it off) a thread
asks the analyzer for the control messages newer than the last ``seq`` it saw (``PollControl``) and
writes each new one, framed (4-byte big-endian length + serialized ``diag.v1.ControlMessage``), to
every hook connection; unexpired ones are also sent to every connection made later, so a hook
that starts or reconnects after a request still gets it. Hooks drop duplicates and expired
requests themselves. An unreachable analyzer only delays the next poll (logged at debug level).
A ``CollectiveFetch`` is for the daemon too: one addressed here ships the raw collectives it kept
(:mod:`diag.daemon.collsum`) of the asked ranks and steps, under the daemon's source.
A ``ProbeRequest`` message is for the daemon itself: one addressed to this host (or ``"*"``) goes
to the :class:`~diag.daemon.probe_runner.ProbeRunner` (validated, then run in a low-priority child
process by a worker thread), whose ``ProbeResultEvent`` events ship like any other; hooks never
see it.

Shutdown (:meth:`Daemon.request_stop`, e.g. on SIGTERM): stop accepting, read what hooks already
sent (``grace_s``), spool everything queued, try to deliver for up to ``final_flush_s``, and leave
the rest in the spool for the next daemon started on the same ``spool_dir``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from diag import schema
from diag.config import DaemonConfig, default_host
from diag.daemon import collsum
from diag.daemon.collectors import COLLECTORS
from diag.daemon.collectors.base import Collector, HangAware, RankAware, stamp
from diag.daemon.collsum import CollectiveSummarizer, SummaryConfig, SummaryStats
from diag.daemon.hook_watch import HookWatch
from diag.daemon.listener import HookListener
from diag.daemon.metrics import NodeMetrics
from diag.daemon.probe_runner import ProbeRunner
from diag.daemon.shipper import Shipper
from diag.daemon.spool import Spool
from diag.errors import CollectorUnavailable, ConfigError, TransportError
from diag.proto import diag_pb2 as pb
from diag.transport import codec, framing
from diag.transport.client import AnalyzerClient
from diag.transport.metrics_http import MetricsServer, serve_metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A collector whose data source is absent here (reported once, then left out)."""

    collector: str
    message: str


def build_collectors(cfg: DaemonConfig) -> tuple[list[Collector], list[Unavailable]]:
    """The collectors ``cfg`` asks for, from the registry, and those that cannot run here."""
    enabled = [n for n in COLLECTORS if not (n == "gpu" and cfg.gpu_backend == "none")]
    collectors: list[Collector] = []
    unavailable: list[Unavailable] = []
    for name in enabled:
        try:
            collectors.append(COLLECTORS[name](cfg))
        except CollectorUnavailable as exc:
            unavailable.append(Unavailable(name, str(exc)))
    return collectors, unavailable


@dataclass(frozen=True, slots=True)
class DaemonStats:
    """Counters since start: hook traffic in, batches out, and what was lost where."""

    num_hook_connections: int
    num_hook_events: int
    num_malformed_connections: int  # hook connections closed for a malformed frame or batch
    num_own_events: int  # events the daemon emitted itself (samples, errors, clock syncs)
    num_batches_spooled: int
    num_events_lost: int  # the spool could not be written (disk full)
    num_batches_sent: int  # acknowledged by the analyzer
    num_batches_rejected: int  # refused by the analyzer as malformed, dropped
    num_batches_dropped: int  # dropped from a full spool
    num_batches_pending: int  # still in the spool
    num_control_messages: int = 0  # new control messages received from the analyzer and relayed
    num_control_skipped: int = 0  # control frames a hook connection missed (not reading, closed)
    # node-side collective summaries (diag.daemon.collsum)
    num_collectives_summarized: int = 0  # raw rows shipped as summaries instead
    num_collective_summaries: int = 0
    num_collectives_fetched: int = 0  # raw rows shipped again on the analyzer's request
    num_collectives_evicted: int = 0  # raw rows aged out of the node's ring unfetched


def summary_config(cfg: DaemonConfig) -> SummaryConfig:
    """The collective summarizer's settings from the daemon's (raises ConfigError)."""
    return SummaryConfig(
        mode=cfg.collectives,
        min_world=cfg.collectives_min_world,
        raw_steps=cfg.collectives_raw_steps,
        retain_s=cfg.collectives_retain_s,
        retain_max_bytes=cfg.collectives_retain_max_bytes,
    )


class Daemon:
    """One node's daemon. Build with :meth:`from_config`; :meth:`run` blocks until stopped."""

    def __init__(
        self,
        cfg: DaemonConfig,
        collectors: Sequence[Collector] = (),
        unavailable: Iterable[Unavailable] = (),
        *,
        spool: Spool | None = None,
        client: AnalyzerClient | None = None,
        wall_clock: Callable[[], int] = time.time_ns,
        grace_s: float = 0.5,
        final_flush_s: float = 5.0,
        pid: int | None = None,
        hook_watch: HookWatch | None = None,
        metrics: NodeMetrics | None = None,
    ) -> None:
        if not cfg.listen_sock or not cfg.analyzer:
            raise ConfigError("the daemon needs a listen socket and an analyzer address")
        self.cfg = cfg
        self.host = cfg.host or default_host()
        # The start time makes the source unique even when a restarted daemon gets the same pid
        # (pid 1 in a container): the analyzer would otherwise drop its events as replays.
        started_ms = wall_clock() // 1_000_000
        self.source = f"{self.host}/daemon/{os.getpid() if pid is None else pid}.{started_ms}"
        self._wall = wall_clock
        self._grace_s = grace_s
        self._final_flush_s = final_flush_s
        self._collectors = list(collectors)
        self._unavailable = list(unavailable)
        self._lock = threading.Lock()
        self._queue: list[pb.Event] = []
        self._new_ranks: list[schema.RankInfo] = []
        self._seq = 0
        self._closing = False  # set by the shutdown before its final flush
        self._logged_errors: set[tuple[str, str]] = set()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self.num_batches_spooled = 0
        self.num_events_lost = 0  # events dropped because the spool could not be written
        self._control_seq = 0  # the newest control message seq seen (the next poll's after_seq)
        self._retained: list[tuple[int, bytes]] = []  # (expires_ns, frame) of unexpired messages
        self._control_thread: threading.Thread | None = None
        self.num_control_messages = 0
        self.probes = ProbeRunner(self.host, self.emit, wall_clock=wall_clock)
        self.summarizer = CollectiveSummarizer(summary_config(cfg))
        spool_dir = cfg.spool_dir or os.path.join(
            tempfile.gettempdir(), f"diag-spool-{os.getpid()}"
        )
        self.spool = spool or Spool(spool_dir, max_bytes=cfg.spool_max_bytes)
        self.client = client or AnalyzerClient(cfg.analyzer, timeout_s=cfg.rpc_timeout_s)
        self.shipper = Shipper(
            self.spool,
            self.client,
            on_clock=self._on_clock,
            clock_sync_interval_s=cfg.clock_sync_interval_s,
        )
        self.hook_watch = hook_watch or HookWatch()
        if metrics is None and cfg.metrics_port >= 0:
            metrics = NodeMetrics()
        self.metrics = metrics
        if metrics is not None:
            metrics.hostname = self.host
            metrics.summary_stats = self._summary_stats
        self.metrics_server: MetricsServer | None = None
        try:
            self.listener = HookListener(
                cfg.listen_sock, self._on_batch, self._control_greeting, watch=self.hook_watch
            )
            if metrics is not None and cfg.metrics_port >= 0:
                self.metrics_server = serve_metrics(
                    metrics.registry, cfg.metrics_addr, cfg.metrics_port
                )
        except BaseException:
            if hasattr(self, "listener"):
                self.listener.stop(grace_s=0.0)
            self.client.close()
            self.spool.close()
            raise

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> Daemon:
        """The daemon with the collectors and GPU backend ``cfg`` chooses."""
        collectors, unavailable = build_collectors(cfg)
        return cls(cfg, collectors, unavailable)

    # -- events in --------------------------------------------------------------------------------

    def _on_batch(self, protos: list[pb.Event], events: list[schema.Event]) -> None:
        """A hook's batch (listener thread): forward it unchanged, note rank processes, and pass
        each hang report on to the collectors that act on one (native stacks)."""
        ranks = [e for e in events if isinstance(e, schema.RankInfo) and e.rank >= 0 and e.pid > 0]
        for hang in (e for e in events if isinstance(e, schema.HangReport)):
            for c in list(self._collectors):
                if isinstance(c, HangAware):
                    try:
                        c.on_hang(hang.rank)
                    except Exception as exc:  # a collector's failure must not lose the batch
                        self._collector_error(c.name, f"{type(exc).__name__}: {exc}")
        if len(protos) != len(events):
            protos, events = _in_seq_order(protos, events)
        with self._lock:
            self.summarizer.peer_reads = codec.reads_summaries(self.client.analyzer_version)
            held, summaries = self.summarizer.take(events, protos)
            if held:
                drop = set(held)
                protos = [p for i, p in enumerate(protos) if i not in drop]
            self._queue.extend(protos)
            for summary in summaries:
                self._relay(summary)
            self._new_ranks.extend(ranks)
            full = len(self._queue) >= self.cfg.batch_max_events
        if full or ranks:
            self._wake.set()
        self._observe(events)

    def _observe(self, events: list[schema.Event]) -> None:
        if self.metrics is None:
            return
        try:
            self.metrics.observe(events)
        except Exception as exc:  # metrics are a view: their failure loses no event
            self._log_once("metrics", f"{type(exc).__name__}: {exc}")

    def _log_once(self, what: str, message: str) -> None:
        if (what, message) not in self._logged_errors:
            self._logged_errors.add((what, message))
            log.warning("%s failed (logged once): %s", what, message)

    def emit(self, event: schema.Event) -> None:
        """Queue one of the daemon's own events, giving it the daemon's envelope and next seq."""
        with self._lock:
            ev = stamp(
                event, host=self.host, job_id=self.cfg.job_id, source=self.source, seq=self._seq
            )
            self._seq += 1
            self._queue.append(codec.event_to_proto(ev))
        self._observe([ev])

    def _relay(self, event: schema.Event) -> None:
        """Queue an event made from a hook's (a summary, a fetched raw row) under the daemon's
        source and next seq, keeping the hook's host and job (call with the lock held)."""
        ev = dataclasses.replace(event, source=self.source, seq=self._seq)
        self._seq += 1
        self._queue.append(codec.event_to_proto(ev))

    def _expire_summaries(self, *, everything: bool = False) -> None:
        with self._lock:
            for summary in self.summarizer.expire(everything=everything):
                self._relay(summary)

    def fetch_collectives(self, req: pb.CollectiveFetch) -> int:
        """Ship the kept raw collectives ``req`` asks for; how many."""
        with self._lock:
            blobs = self.summarizer.fetch_encoded(req.ranks, req.first_step, req.last_step)
        rows = collsum.decode(blobs)  # outside the lock: the hooks' batches go on meanwhile
        with self._lock:
            for row in rows:
                self._relay(row)
        if rows:
            self._wake.set()
        log.info(
            "collective fetch %s: steps %d-%d of ranks %s: %d raw row(s)",
            req.request_id,
            req.first_step,
            req.last_step,
            list(req.ranks) or "all",
            len(rows),
        )
        return len(rows)

    def _on_clock(self, offset_ns: int, rtt_ns: int) -> None:
        if self._closing:
            return
        self.emit(
            schema.ClockSync(
                ts_ns=self._wall(), host="", source="", seq=-1, offset_ns=offset_ns, rtt_ns=rtt_ns
            )
        )

    def _collector_error(self, name: str, message: str, *, unavailable: bool = False) -> None:
        self.emit(
            schema.CollectorError(
                ts_ns=self._wall(),
                host="",
                source="",
                seq=-1,
                collector=name,
                message=message,
                unavailable=unavailable,
            )
        )
        if (name, message) not in self._logged_errors:
            self._logged_errors.add((name, message))
            if unavailable:
                log.warning("%s collector disabled: %s", name, message)
            else:
                log.warning("%s collector failed a cycle (skipped; logged once): %s", name, message)

    # -- control path -----------------------------------------------------------------------------

    def poll_control(self) -> int:
        """Ask the analyzer once for new control messages and relay them to every hook connection;
        the number of new messages. A :class:`TransportError` is logged (debug) and counts as 0."""
        try:
            messages = self.client.poll_control(
                after_seq=self._control_seq, host=self.host, daemon=self.source
            )
        except TransportError as exc:
            log.debug(
                "control poll failed (retried in %.1f s): %s", self.cfg.control_poll_interval_s, exc
            )
            return 0
        now = self._wall()
        new = 0
        for msg in sorted(messages, key=codec.control_seq):
            seq = codec.control_seq(msg)
            if seq <= self._control_seq:
                continue
            self._control_seq = seq
            if msg.WhichOneof("body") == "probe":  # for this daemon, never for the hooks
                new += 1
                if self.probes.addressed_here(msg.probe):
                    log.info("probe request %s: %s", msg.probe.request_id, msg.probe.probe)
                    self.probes.submit(msg.probe)
                continue
            if msg.WhichOneof("body") == "fetch":  # for this daemon, never for the hooks
                new += 1
                if msg.fetch.host in ("*", self.host) and msg.fetch.expires_ns > now:
                    self.fetch_collectives(msg.fetch)
                continue
            frame = framing.encode_frame(msg.SerializeToString())
            with self._lock:  # retained first: a hook connecting meanwhile gets it at least once
                self._retained = [(e, f) for e, f in self._retained if e > now]
                if msg.profile.expires_ns > now:
                    self._retained.append((msg.profile.expires_ns, frame))
            num_hooks = self.listener.broadcast(frame)
            new += 1
            log.info(
                "relayed control message seq %d (profile request %s) to %d hook connection(s)",
                seq,
                msg.profile.request_id,
                num_hooks,
            )
        self.num_control_messages += new
        return new

    def _control_greeting(self) -> list[bytes]:
        """The unexpired control frames, oldest first, for a new hook connection."""
        now = self._wall()
        with self._lock:
            self._retained = [(e, f) for e, f in self._retained if e > now]
            return [f for _, f in self._retained]

    def _control_loop(self) -> None:
        interval = self.cfg.control_poll_interval_s
        while not self._stopping.wait(interval):
            try:
                self.poll_control()
            except Exception:  # never let the control path take the daemon down
                log.exception("relaying control messages failed; will retry")

    # -- main loop --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask :meth:`run` to shut down (safe from a signal handler or another thread)."""
        self._stopping.set()
        self._wake.set()

    def run(self) -> DaemonStats:
        """Serve until :meth:`request_stop`; then shut down cleanly and return the counters."""
        self.listener.start()
        self.shipper.start()
        self.probes.start()
        if self.cfg.control_poll_interval_s > 0:
            self._control_thread = threading.Thread(
                target=self._control_loop, name="diag-control", daemon=True
            )
            self._control_thread.start()
        log.info(
            "diag daemon %s: listening on %s, analyzer %s, spool %s",
            self.source,
            self.listener.path,
            self.cfg.analyzer,
            self.spool.directory,
        )
        for u in self._unavailable:
            self._collector_error(u.collector, u.message, unavailable=True)
        due = {id(c): time.monotonic() for c in self._collectors}
        next_flush = time.monotonic() + self.cfg.flush_interval_s
        try:
            while not self._stopping.is_set():
                self._wake.clear()  # before the work, so a wake-up during it is not lost
                self._apply_new_ranks()
                self._check_hooks()
                for c in list(self._collectors):
                    if time.monotonic() >= due[id(c)]:
                        self._run_collector(c)
                        # Fixed rate (samples stay evenly spaced); skip cycles we fell behind on.
                        due[id(c)] += c.interval_s
                        if due[id(c)] <= time.monotonic():
                            due[id(c)] = time.monotonic() + c.interval_s
                if time.monotonic() >= next_flush or self._queue_len() >= self.cfg.batch_max_events:
                    self._expire_summaries()
                    self.flush()
                    next_flush = time.monotonic() + self.cfg.flush_interval_s
                wake_at = min([next_flush, *(due[id(c)] for c in self._collectors)])
                self._wake.wait(max(wake_at - time.monotonic(), 0.0))
        finally:
            stats = self._shutdown()
        return stats

    def _apply_new_ranks(self) -> None:
        with self._lock:
            ranks, self._new_ranks = self._new_ranks, []
        for info in ranks:
            for c in self._collectors:
                if isinstance(c, RankAware):
                    c.track(info.pid, info.rank, info.local_rank)

    def _check_hooks(self) -> None:
        """Ship a ``HookSilent`` for each hook that stopped reporting (see :class:`HookWatch`)."""
        try:
            silent = self.hook_watch.check(self._wall())
        except Exception:  # the daemon's bug must not stop the daemon
            log.exception("checking the hooks' health reports failed")
            return
        for ev in silent:
            log.warning(
                "the hook of rank %d (pid %d) sent no health report for %.0f s while its process "
                "runs: its thread died or is stuck; the rank's events since are missing%s",
                ev.rank,
                ev.pid,
                ev.silent_ns / 1e9,
                f" (its last error: {ev.last_error})" if ev.last_error else "",
            )
            self.emit(ev)

    def _run_collector(self, c: Collector) -> None:
        try:
            events = list(c.collect(self._wall()))
        except CollectorUnavailable as exc:
            self._collectors.remove(c)
            self._collector_error(c.name, str(exc), unavailable=True)
            return
        except Exception as exc:
            detail = str(exc).splitlines()[0] if str(exc) else ""
            self._collector_error(c.name, f"{type(exc).__name__}: {detail}")
            return
        for ev in events:
            self.emit(ev)

    def _queue_len(self) -> int:
        with self._lock:
            return len(self._queue)

    def flush(self) -> None:
        """Cut everything queued into batches and append them to the spool."""
        with self._lock:
            queued, self._queue = self._queue, []
        size = max(self.cfg.batch_max_events, 1)
        for start in range(0, len(queued), size):
            batch = pb.EventBatch(
                schema_version=schema.SCHEMA_VERSION, sender=self.source, sent_ns=self._wall()
            )
            batch.events.extend(queued[start : start + size])
            try:
                self.spool.append(batch.SerializeToString())
            except (OSError, ValueError) as exc:  # disk full, oversized: lose it, not the daemon
                self.num_events_lost += len(batch.events)
                if ("spool", str(exc)) not in self._logged_errors:
                    self._logged_errors.add(("spool", str(exc)))
                    log.error("cannot write to the spool, dropping batches: %s", exc)
                continue
            self.num_batches_spooled += 1
        if queued:
            self.shipper.notify()

    def _shutdown(self) -> DaemonStats:
        self.listener.stop(grace_s=self._grace_s)
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.probes.stop()
        self._apply_new_ranks()
        for c in self._collectors:
            try:
                c.close()
            except Exception as exc:
                log.warning("closing the %s collector failed: %s", c.name, exc)
        # The final deliveries sync the clock too; nothing would ship those samples (they would
        # count as emitted and never arrive), and the analyzer has the earlier ones.
        self._closing = True
        self._expire_summaries(everything=True)
        self.flush()
        delivered = self.shipper.drain(self._final_flush_s)
        self.shipper.stop()
        if self._control_thread is not None:  # _stopping is set: at most one poll in flight
            self._control_thread.join(self.cfg.rpc_timeout_s + 1.0)
        self.client.close()
        self.flush()  # anything queued meanwhile stays in the spool for the next daemon
        stats = self.stats()
        self.spool.close()
        if not delivered or stats.num_batches_pending:
            log.warning(
                "analyzer not reached before exit: %d batch(es) stay in the spool %s "
                "(replayed by the next daemon started on it)",
                stats.num_batches_pending,
                self.spool.directory,
            )
        log.info("diag daemon stopped: %s", stats)
        return stats

    def _summary_stats(self) -> SummaryStats:
        with self._lock:
            return self.summarizer.stats()

    def stats(self) -> DaemonStats:
        summed = self._summary_stats()
        return DaemonStats(
            num_hook_connections=self.listener.num_connections,
            num_hook_events=self.listener.num_events,
            num_malformed_connections=self.listener.num_malformed,
            num_own_events=self._seq,
            num_batches_spooled=self.num_batches_spooled,
            num_events_lost=self.num_events_lost,
            num_batches_sent=self.shipper.num_sent,
            num_batches_rejected=self.shipper.num_rejected,
            num_batches_dropped=self.spool.num_dropped,
            num_batches_pending=self.spool.pending_records,
            num_control_messages=self.num_control_messages,
            num_control_skipped=self.listener.num_control_skipped,
            num_collectives_summarized=summed.num_summarized,
            num_collective_summaries=summed.num_summaries,
            num_collectives_fetched=summed.num_fetched,
            num_collectives_evicted=summed.num_evicted,
        )


def _in_seq_order(
    protos: list[pb.Event], events: list[schema.Event]
) -> tuple[list[pb.Event], list[schema.Event]]:
    """A hook batch with column blocks (a harvest's collectives, :mod:`diag.hook.sender`) as one
    message per event, in each source's ``seq`` order: the blocks' rows follow the row events
    (:func:`~diag.transport.codec.events_from_batch`), so a step event made after its
    collectives comes first. The analyzer keeps an event only above its source's highest
    ``seq`` in earlier batches: were a cut of the daemon's queue to fall between them, the
    collectives, in the next batch, would be taken for repeats."""
    protos = protos + [codec.event_to_proto(e) for e in events[len(protos) :]]
    order = sorted(range(len(events)), key=lambda i: (events[i].source, events[i].seq))
    return [protos[i] for i in order], [events[i] for i in order]
