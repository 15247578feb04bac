"""The ingest core: validate a batch, drop events already stored, log it durably, then store it.

No gRPC here (``diag.analyzer.service`` is the thin adapter); every public method is thread-safe
behind one lock.

The exactly-once guarantee, for a daemon that resends every batch it has not seen acknowledged:

- an event is accepted iff ``seq > high_water[source]`` (each source numbers its events 0, 1, ...
  and sends them in order, gaps allowed);
- accepted events are appended to the write-ahead log and fsynced *before* the reply, so an
  acknowledged event survives a SIGKILL;
- at start-up the high-water marks are rebuilt from the Parquet parts and the WAL. WAL events
  are matched against the parts by exact ``(source, seq)``, not by high-water mark, because a crash
  in the middle of a flush can leave one kind's part written and another's not.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError

from diag import schema
from diag.analyzer import wal as wal_mod
from diag.analyzer.autocapture import AutoCapture, AutoCaptureConfig
from diag.analyzer.control import CONTROL_FILE, ControlBoard
from diag.analyzer.fetch import RawFetch
from diag.analyzer.marks import HighWater
from diag.analyzer.screen import ScreenConfig, ScreenVerdict, StepScreen
from diag.diagnose.capture_evidence import annotate
from diag.diagnose.detectors import link_hosts
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.diagnose.triage import TriageResult, write_findings
from diag.errors import Cancelled, InputError, SchemaError, TransportError
from diag.findings import Finding
from diag.proto import diag_pb2 as pb
from diag.store.memory import release_free_memory
from diag.store.run_store import ANALYZER_LOCK, RunStore
from diag.store.summary import RunSummary, summarize
from diag.transport import codec

log = logging.getLogger(__name__)

#: event kinds after which the live triage runs at once rather than at its next interval.
URGENT_KINDS = frozenset({schema.HangReport.kind, schema.ExceptionEvent.kind, schema.RankExit.kind})
#: How far a batch may move a source's sequence number (4 billion events: a source that lost
#: that many between two batches is not one diag wrote) ...
MAX_SEQ_JUMP = 1 << 32
#: ... and the job's step (the hook counts steps from 0 in each process).
MAX_STEP_JUMP = 1_000_000


@dataclass(frozen=True, slots=True)
class IngestResult:
    """The answer to one batch: events newly stored, and events dropped as already stored."""

    num_accepted: int
    num_duplicates: int


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What start-up found: WAL events replayed into the store (``num_replayed``), WAL events
    already in Parquet parts (``num_already_stored``, a crash between a flush and the WAL delete),
    WAL files with a torn tail, corrupt parts moved aside (their new ``*.corrupt`` paths), and WAL
    files recovery skipped something in, kept beside the WAL (their ``*.wal.damaged`` paths)."""

    num_wal_files: int
    num_replayed: int
    num_already_stored: int
    num_torn_wal_files: int
    corrupt_parts: tuple[Path, ...]
    damaged_wal_files: tuple[Path, ...] = ()


def _lock_run_dir(store: RunStore) -> IO[str]:
    """Refuse a second analyzer process on the same run directory (two WAL writers would each
    replay and fold the other's files). A POSIX record lock: per process, released by the kernel
    when the process dies, even by SIGKILL."""
    fh = open(store.store_dir / ANALYZER_LOCK, "a+")  # noqa: SIM115 - held while serving
    try:
        fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "?"
        fh.close()
        raise InputError(f"{store.run_dir} is in use by another analyzer (pid {holder})") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


class AnalyzerCore:
    """The analyzer's core, behind the thin gRPC service: it owns one run directory (locked
    against a second analyzer) and does deduplicating, write-ahead-logged ingest into its
    :class:`RunStore`, holds the control board of on-demand requests and runs live triage.

    Construction recovers the run directory (moves corrupt parts aside, replays leftover WAL files,
    folds them into parts) and rebuilds the high-water marks; :attr:`recovery` says what it found.
    ``clock`` gives the analyzer's wall time in nanoseconds (the ``analyzer_time_ns`` of replies).
    ``control`` is the board of on-demand requests (default: one on ``RUN_DIR/control.json`` with
    ``clock``); the core feeds it every accepted ``StepEvent`` (and, at start-up, the stored ones).
    ``detectors`` (name -> config) are the detector configs :meth:`triage` runs with.
    ``auto_capture``: the closed loop's settings (:mod:`diag.analyzer.autocapture`; ``None`` or
    mode ``off``: no loop); :meth:`capture` runs it on a triage result.
    """

    def __init__(
        self,
        store: RunStore,
        clock: Callable[[], int] = time.time_ns,
        *,
        control: ControlBoard | None = None,
        detectors: Mapping[str, object] | None = None,
        auto_capture: AutoCaptureConfig | None = None,
        screen: ScreenConfig | None = None,
    ) -> None:
        self.store = store
        self.detectors = dict(detectors or {})
        self.clock = clock
        self.control = control or ControlBoard(clock, state_path=store.run_dir / CONTROL_FILE)
        self._lock = threading.RLock()
        self.latest_triage: TriageResult | None = None
        self.latest_summary: RunSummary | None = None  # the summary the latest triage read
        #: called with every triage result (live and final), on the triaging thread: they must
        #: not block (the alerter only enqueues); a failing one is logged, the others still run
        self.listeners: list[Callable[[TriageResult], None]] = []
        #: what :meth:`release` stops once the run's last triage is done (metrics server, alerts)
        self.extras: list[Callable[[], None]] = []
        self.metrics_url = ""  # the job's /metrics endpoint, where one is served, and its port
        self.metrics_port = -1
        self.num_events_accepted = 0
        self.num_duplicates = 0
        self.num_batches_rejected = 0
        self.num_triage_passes = 0
        self.last_triage_s = 0.0
        #: the live triage's screen (:mod:`diag.analyzer.screen`): a live pass that finds nothing
        #: new since the last full pass keeps its findings; counted apart from the full passes
        self.screen = StepScreen(screen)
        self.num_screened_passes = 0
        self.last_verdict: ScreenVerdict | None = None
        self.autocapture: AutoCapture | None = None
        if auto_capture is not None and auto_capture.mode != "off":
            self.autocapture = AutoCapture(
                request=lambda n, ranks: self.request_profile(n, ranks),
                run_dir=store.run_dir,
                cfg=auto_capture,
                probe=lambda name, params, host: self.request_probe(
                    pb.ProbeRequest(probe=name, params_json=params, host=host)
                ),
            )
        #: raw collectives asked back from the daemons for findings judged from their summaries
        #: (:mod:`diag.analyzer.fetch`); with the loop on only
        self.raw_fetch: RawFetch | None = None
        if self.autocapture is not None and auto_capture is not None and auto_capture.mode == "on":
            self.raw_fetch = RawFetch(
                lambda first, last, ranks: self.control.request_fetch(first, last, ranks)
            )
        self._classes: dict[int, int] | None = None  # work classes seen by the last triage
        self._ranks: list[int] = []
        self._addresses: dict[str, str] = {}  # host -> its ranks' connections' address
        #: set when an event arrives that a finding should follow at once (a hang report, an
        #: exception, a rank exit): the live triage runs then instead of at its next interval.
        self.urgent = threading.Event()
        self._findings_lock = threading.Lock()
        #: set by :meth:`close`: the background loops wait on it, so they end at once, not at
        #: their next tick
        self.stopping = threading.Event()
        #: threads a service started for this core (flush, live triage), joined after close
        #: (:func:`diag.analyzer.service.join_background`).
        self.background: list[threading.Thread] = []
        self._high_water = HighWater()
        self._closed = False
        store.wal_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock_run_dir(store)
        self.recovery = self._recover()
        self._wal = wal_mod.WalWriter(store.wal_dir)

    # -- start-up -----------------------------------------------------------------------------

    def _recover(self) -> RecoveryReport:
        corrupt = self.store.quarantine_corrupt_parts()
        for kind in self.store.kinds():
            df = self.store.resident_frame(kind)
            self._raise_marks(df.groupby("source")["seq"].max().items())
            if kind == schema.StepEvent.kind:
                recent = df.tail(256)  # sorted by time: the newest steps and their durations
                self.control.observe_steps(
                    zip(
                        recent["rank"].tolist(),
                        recent["step"].tolist(),
                        recent["duration_ns"].tolist(),
                        recent["end_ns"].tolist(),
                        strict=True,
                    )
                )
        paths = wal_mod.wal_paths(self.store.wal_dir)
        events: list[schema.Event] = []
        torn = 0
        damaged: list[Path] = []
        delete_wal = True
        for path in paths:
            contents = wal_mod.read_wal(path)
            torn += contents.num_trailing_bytes > 0
            if contents.damage:
                try:
                    damaged.append(wal_mod.keep_damaged(contents))  # logs it in one line
                except OSError as exc:
                    delete_wal = False  # no copy aside: the file itself stays
                    log.warning("WAL %s: %s; not deleted (%s)", path, contents.damage, exc)
            for i, payload in enumerate(contents.payloads):
                try:
                    events += codec.events_from_batch(pb.EventBatch.FromString(payload))
                except (DecodeError, SchemaError) as exc:
                    log.warning("WAL %s frame %d is unreadable, skipped: %s", path, i, exc)
        replay, num_stored = self._not_in_parts(events)
        self.store.append(replay)
        self._raise_marks((ev.source, ev.seq) for ev in replay)
        self._observe_steps(replay)
        if paths:
            try:
                self.store.flush()
                if delete_wal:
                    wal_mod.WalWriter(self.store.wal_dir).delete_closed()
            except OSError as exc:
                log.warning("cannot fold the WAL into parts yet (kept it): %s", exc)
            log.info(
                "recovered %d events from %d WAL files (%d were already stored)",
                len(replay),
                len(paths),
                num_stored,
            )
        return RecoveryReport(
            len(paths), len(replay), num_stored, torn, tuple(corrupt), tuple(damaged)
        )

    def _not_in_parts(self, events: list[schema.Event]) -> tuple[list[schema.Event], int]:
        """WAL events that no part holds yet (by exact key), each once, in WAL order."""
        seen: set[tuple[str, int]] = set()
        by_kind: dict[str, set[str]] = {}
        for ev in events:
            by_kind.setdefault(type(ev).kind, set()).add(ev.source)
        for kind, sources in by_kind.items():
            df = self.store.frame(kind)
            df = df[df["source"].isin(list(sources))]
            seen.update(zip(df["source"].tolist(), df["seq"].tolist(), strict=True))
        out = []
        for ev in events:
            key = (ev.source, ev.seq)
            if key not in seen:
                seen.add(key)
                out.append(ev)
        return out, len(events) - len(out)

    def _raise_marks(self, pairs: Iterable[tuple[str, int]]) -> None:
        self._high_water.raise_pairs(pairs)

    # -- ingest -------------------------------------------------------------------------------

    def ingest(self, batch: pb.EventBatch, raw: bytes | None = None) -> IngestResult:
        """Store the new events of ``batch``; durable (WAL, fsynced) when this returns. ``raw``:
        the bytes ``batch`` was parsed from, written to the WAL as they are when every event is
        new (no second serialization).

        Raises :class:`SchemaError` (one line) if any event is invalid: then nothing is stored.
        Raises ``OSError`` if the WAL cannot be written: then nothing is stored or acknowledged.
        """
        cols = codec.columns_from_batch(batch)
        with self._lock:
            if self._closed:
                raise TransportError("the analyzer is shutting down")
            keep, marks = self._select_new(cols)
            num_kept = int(keep.sum())
            if num_kept:
                if num_kept == len(keep):
                    payload = raw if raw is not None else batch.SerializeToString()
                    kept = cols.columns
                else:  # a replay overlapping what is stored: the WAL gets the kept rows only
                    kept = {
                        kind: _rows(columns, keep[cols.positions[kind]])
                        for kind, columns in cols.columns.items()
                    }
                    out = pb.EventBatch(
                        schema_version=batch.schema_version,
                        sender=batch.sender,
                        sent_ns=batch.sent_ns,
                    )
                    out.columns.extend(codec.columns_to_blocks(kept))
                    payload = out.SerializeToString()
                self._wal.append(payload)
                self._high_water.raise_to(*marks)
                for kind, columns in kept.items():
                    self.store.append_columns(kind, columns)
                    self.screen.observe(kind, columns)
                    if kind == schema.StepEvent.kind and len(columns["rank"]):
                        self.control.observe_step_columns(
                            columns["rank"], columns["step"], columns["duration_ns"],
                            columns["end_ns"],
                        )  # fmt: skip
                if any(kind in URGENT_KINDS for kind in kept if len(kept[kind]["source"])):
                    self.urgent.set()
            self.num_events_accepted += num_kept
            self.num_duplicates += len(keep) - num_kept
            return IngestResult(num_kept, len(keep) - num_kept)

    def _select_new(
        self, cols: codec.BatchColumns
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """Which events of the batch are new (a boolean per event) and the sources' new high-water
        marks (sources, marks). An event is new when its ``seq`` lies above its source's mark from
        the batches before and it is the first of its ``(source, seq)`` in this batch, in whatever
        order the batch holds a source's events (a column block groups them by kind). Vectorized:
        no Python work per event or per source. :class:`SchemaError` (nothing stored) for a seq
        too far beyond its mark and as :meth:`_check_steps` says. Called under the lock."""
        self._check_steps(cols)
        if not len(cols.sources):
            return np.zeros(0, dtype=bool), (np.zeros(0, dtype=object), np.zeros(0, np.int64))
        codes, uniques = pd.factorize(np.asarray(cols.sources, dtype=object))
        uniques = np.asarray(uniques, dtype=object)
        seqs = cols.seqs
        prior = self._high_water.lookup(uniques)
        last = prior[codes]
        jump = seqs > last + MAX_SEQ_JUMP
        if jump.any():
            i = int(np.argmax(jump))
            raise SchemaError(
                f"{cols.kinds[i]} event of {cols.sources[i][:80]!r}: seq {int(seqs[i])} is more "
                f"than {MAX_SEQ_JUMP} beyond the source's last ({int(last[i])}); batch refused"
            )
        keep = seqs > last
        order = np.lexsort((seqs, codes))  # stable: the first of equal (source, seq) stays first
        same = (codes[order][1:] == codes[order][:-1]) & (seqs[order][1:] == seqs[order][:-1])
        if same.any():
            keep[order[1:][same]] = False
        newest = prior.copy()
        np.maximum.at(newest, codes[keep], seqs[keep])
        moved = newest > prior
        return keep, (uniques[moved], newest[moved])

    def note_rejected(self) -> None:
        """Count one batch refused as malformed (the service's ``INVALID_ARGUMENT``)."""
        with self._lock:
            self.num_batches_rejected += 1

    def counters(self) -> dict[str, float]:
        """Ingest and triage counters since start (the analyzer's metrics read them)."""
        with self._lock:
            return {
                "events": self.num_events_accepted,
                "duplicates": self.num_duplicates,
                "rejected": self.num_batches_rejected,
                "passes": self.num_triage_passes,
                "screened_passes": self.num_screened_passes,
                "fetches": len(self.raw_fetch.requests) if self.raw_fetch is not None else 0,
                "last_triage_s": self.last_triage_s,
            }

    def _check_steps(self, cols: codec.BatchColumns) -> None:
        """:class:`SchemaError` (one line; nothing stored) for an event whose ``seq`` lies more
        than :data:`MAX_SEQ_JUMP` beyond its source's high-water mark (checked in
        :meth:`_select_new`), or whose ``step`` lies more than :data:`MAX_STEP_JUMP` beyond the
        job's newest step: one such event would make the analyzer drop every later event of that
        source as a duplicate, or push every later profiler window beyond reach. Called under the
        lock."""
        steps_up_to = max(self.control.newest_step, 0) + MAX_STEP_JUMP
        if len(cols.steps) and int(cols.steps.max()) > steps_up_to:
            i = int(np.argmax(cols.steps > steps_up_to))
            raise SchemaError(
                f"{cols.kinds[i]} event of {cols.sources[i][:80]!r}: step {cols.steps[i]} is "
                f"more than {MAX_STEP_JUMP} beyond the job's newest "
                f"({self.control.newest_step}); batch refused"
            )

    def _observe_steps(self, events: Iterable[schema.Event]) -> None:
        steps = [
            (ev.rank, ev.step, ev.duration_ns, ev.end_ns)
            for ev in events
            if isinstance(ev, schema.StepEvent)
        ]
        if steps:
            self.control.observe_steps(steps)

    def flush(self) -> int:
        """Fold buffered events into Parquet parts and delete the WAL files they came from.

        Returns the number of parts written. On an ``OSError`` the unwritten rows stay buffered and
        the WAL is kept; the next flush retries.
        """
        with self._lock:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        if self._closed or not self.store.num_buffered:
            return 0
        self._wal.rotate()
        parts = self.store.flush()
        self._wal.delete_closed()
        return len(parts)

    def close(self) -> None:
        """Final flush; later ingests are refused. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush()
            finally:
                self._wal.close()
                self._closed = True
                self._lock_file.close()
                self.stopping.set()
                self.urgent.set()  # wake the live triage so that it sees the close

    @property
    def closed(self) -> bool:
        return self._closed

    def high_water(self) -> dict[str, int]:
        """A copy of the per-source high-water marks (the largest ``seq`` stored per source)."""
        with self._lock:
            return {str(k): v for k, v in self._high_water.as_dict().items()}

    # -- control ------------------------------------------------------------------------------

    def request_profile(
        self,
        num_steps: int = 1,
        ranks: Sequence[int] = (),
        at_step: int = 0,
        ttl_s: float = 120.0,
    ) -> pb.ProfileRequest:
        """Ask every rank (or ``ranks``) for a profiler window: see
        :meth:`ControlBoard.request_profile`. For in-process callers (``diag run``'s embedded
        analyzer, detectors) and the ``RequestProfile`` RPC."""
        if self._closed:
            raise TransportError("the analyzer is shutting down")
        return self.control.request_profile(num_steps, ranks, at_step, ttl_s)

    def request_probe(self, req: pb.ProbeRequest, ttl_s: float = 120.0) -> pb.ProbeRequest:
        """Ask ``req.host``'s daemon to run one registered probe: see
        :meth:`ControlBoard.request_probe` (only probe, params_json, host, device and rank are
        read)."""
        if self._closed:
            raise TransportError("the analyzer is shutting down")
        return self.control.request_probe(
            req.probe, req.params_json, req.host, req.device, req.rank, ttl_s
        )

    def poll_control(self, after_seq: int) -> list[pb.ControlMessage]:
        """The unexpired control messages with ``seq > after_seq`` (the ``PollControl`` RPC)."""
        return self.control.poll(after_seq)

    def _snapshot(self) -> RunStore:
        """The store as it is now, to read without the lock (:meth:`RunStore.snapshot`)."""
        with self._lock:
            return self.store.snapshot()

    def _adopt(self, snap: RunStore) -> None:
        with self._lock:
            self.store.adopt(snap)

    def summarize(self) -> RunSummary:
        """:func:`diag.store.summary.summarize` of a snapshot of the store (ingest goes on)."""
        snap = self._snapshot()
        out = summarize(snap)
        self._adopt(snap)
        return out

    def live_triage(self, *, cancelled: Callable[[], bool] | None = None) -> TriageResult:
        """A live pass: the screen (:mod:`diag.analyzer.screen`) decides from the steps that came
        since the last pass whether anything changed; if not, the last full pass's result
        stands (no frame read, no detector run: ``num_screened_passes``), else :meth:`triage`."""
        started = time.perf_counter()
        with self._lock:
            taken = self.screen.take()
        verdict = self.screen.decide(taken)
        del taken  # its rows are the screen's now: not held through a full pass (~64 B a row)
        self.last_verdict = verdict
        latest = self.latest_triage
        if verdict.full or latest is None:
            log.debug("live triage: full pass (%s)", verdict.reason)
            return self.triage(cancelled=cancelled)
        self.num_screened_passes += 1
        self.last_triage_s = time.perf_counter() - started
        return latest

    def triage(
        self, *, final: bool = False, cancelled: Callable[[], bool] | None = None
    ) -> TriageResult:
        """The detectors on the store as it is now: a snapshot is taken under the lock, the
        frames are read from it and the detectors run outside it (ingest goes on meanwhile).
        Remembered as ``latest_triage``. ``final``: the run's last triage, after :meth:`close`:
        the closed loop records what it decided for the requests still pending
        (:meth:`AutoCapture.settle`). ``cancelled``: asked between detectors; a pass it stops
        raises :class:`~diag.errors.Cancelled`."""
        started = time.perf_counter()

        def check(before: str) -> None:
            if cancelled is not None and cancelled():
                raise Cancelled(f"triage cancelled before {before}")

        cpu0 = time.thread_time()
        with self._lock:
            # The rows buffered since the last flush (under a second's worth) go to disk first:
            # a snapshot with rows buffered merges them into a second whole copy of each kind's
            # frame, held through the pass (at 131,072 ranks x 50 steps, 1.2 GB of step rows).
            try:
                self._flush_locked()
            except OSError as exc:  # the rows stay buffered; the pass reads them merged
                log.warning("flush before a triage pass failed: %s", exc)
            self.store.fold()  # the flushed rows into the cache: one copy held through the pass
            snap = self.store.snapshot()
            taken = self.screen.take()
        # the fold's freed pieces (the tails and the cache before it) back to the system before
        # the pass builds its own: glibc kept them (at 131,072 ranks x 50 steps ~570 MiB), and
        # the pass's big arrays are fresh mappings that would not reuse them
        release_free_memory()
        self.screen.mark(taken)  # what the screen knew of the rows this pass reads
        del taken
        # The summary first: its temporaries are given back before the features are built,
        # instead of adding to theirs (32,768 ranks x 50 steps: the pass's peak 1,183 -> 1,168 MiB)
        check("the summary")
        summary = summarize(snap)
        run = summary.run_json()
        release_free_memory()  # its temporaries (~300 MiB at 131,072 ranks: glibc keeps them)
        check("reading the frames")
        features = Features.from_store(snap)
        release_free_memory()  # the features' temporaries (~440 MiB at 131,072 ranks)
        self._adopt(snap)
        check("the detectors")
        findings = run_all(features, self.detectors, cancelled)
        check("taking the result")  # a pass that outlived the close never overwrites the final
        layout = features.work_layout()
        self._classes = dict(layout.work_class) if layout.known else None
        steps = features.steps
        self._ranks = sorted(int(r) for r in steps["rank"].unique()) if len(steps) else []
        self._addresses = link_hosts.addresses(features.tcp)
        named = {r for f in findings for r in (*f.ranks, *(f.link.ranks if f.link else ()))}
        self.screen.rebase(time.thread_time() - cpu0, named, self._classes)
        if self.autocapture is not None:
            if final:
                self.autocapture.settle(findings)
            findings = annotate(findings, self.autocapture.records)
        result = TriageResult(run=run, findings=tuple(findings))
        del features, steps, snap  # the pass's frames: their memory goes back to the system
        release_free_memory()
        self.latest_triage = result
        self.latest_summary = summary
        self.num_triage_passes += 1
        self.last_triage_s = time.perf_counter() - started
        for listener in list(self.listeners):
            try:
                listener(result)
            except Exception:  # a listener's bug never costs the triage
                log.exception("a triage listener failed")
        return result

    def publish_findings(self, findings: tuple[Finding, ...], *, live: bool) -> bool:
        """Rewrite ``RUN_DIR/findings.jsonl``. A live pass's findings only while the analyzer is
        open (``False`` after :meth:`close`): a pass that was still running when the run ended
        must not overwrite the final triage's, whichever thread finishes last."""
        with self._findings_lock:
            if live and self._closed:
                return False
            write_findings(self.store.run_dir, findings)
            return True

    def release(self) -> None:
        """Stop what serves the run's results beside the store (metrics endpoint, alerts: queued
        alerts are delivered first, within their timeout). After the run's last triage; safe to
        call twice."""
        extras, self.extras = self.extras, []
        for stop in extras:
            try:
                stop()
            except Exception:
                log.exception("stopping an analyzer extra failed")

    def settle(self) -> bool:
        """After :meth:`close`: the final triage (:meth:`triage` ``final``) when the closed loop
        still waits for something it asked for, so that its record says what the evidence
        decided (probe results that came in after the last live pass) or that nothing came
        back; nothing to do otherwise (``False``). ``diag run`` does this in its own final
        triage; a standalone analyzer on its way out (SIGTERM) calls this."""
        if self.autocapture is None or not self.autocapture.pending:
            return False
        self.triage(final=True)
        return True

    def capture(self, result: TriageResult) -> None:
        """The closed loop on one live triage ``result``: request the evidence an undecided
        finding lacks, record what came back (:mod:`diag.analyzer.autocapture`)."""
        if self.autocapture is not None and not self._closed:
            self.autocapture.step(result.findings, self._classes, self._ranks, self._addresses)
        if self.raw_fetch is not None and not self._closed:
            self.raw_fetch.step(result.findings)

    def summary_json(self) -> dict[str, Any]:
        """``summarize().to_json()``: the ``diag report --json`` object (works after close too)."""
        out = self.summarize().to_json()
        if self.latest_triage is not None:
            out["findings"] = [f.to_json() for f in self.latest_triage.findings]
        return out


def _rows(columns: dict[str, Any], mask: np.ndarray) -> dict[str, Any]:
    """The rows of ``columns`` where ``mask`` holds (arrays stay arrays, lists lists)."""
    picked = mask.tolist()
    return {
        name: values[mask]
        if isinstance(values, np.ndarray)
        else [v for v, k in zip(values, picked, strict=True) if k]
        for name, values in columns.items()
    }
