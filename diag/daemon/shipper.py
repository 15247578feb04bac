"""The daemon's shipping thread: spooled batches to the analyzer, one in flight, in order.

It takes the oldest unacknowledged batch from the :class:`~diag.daemon.spool.Spool`, sends it with
``Ingest`` and acknowledges it in the spool only after the analyzer's reply, so nothing is lost
while the analyzer is away: the spool grows and is replayed in order when it answers again. Failed
calls are retried with exponential backoff (0.2 s doubling to 2 s). It also measures the clock
offset to the analyzer (``Time``) at start and every ``clock_sync_interval_s``.

To an analyzer that reads column blocks (its ``Time`` and ``Ingest`` replies say its schema
version, :func:`~diag.transport.codec.reads_columns`) each batch goes by columns: one block per
kind, a packed column per field, which the analyzer copies into arrays without a Python object per
event (the node pays the conversion, not the one analyzer of the fleet). To an older one, or when a
reply shows that an older analyzer took the place of the one that read them (it stored none of
the columns), the same batch goes again as it was spooled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from google.protobuf.message import DecodeError

from diag.daemon.spool import Spool
from diag.errors import SchemaError, TransportError
from diag.proto import diag_pb2 as pb
from diag.transport import codec
from diag.transport.client import AnalyzerClient, BatchRejected

log = logging.getLogger(__name__)


class Shipper:
    """Pumps ``spool`` into ``client`` on a thread; ``on_clock(offset_ns, rtt_ns)`` per sync."""

    def __init__(
        self,
        spool: Spool,
        client: AnalyzerClient,
        *,
        on_clock: Callable[[int, int], None],
        clock_sync_interval_s: float = 10.0,
        backoff_start_s: float = 0.2,
        backoff_max_s: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spool = spool
        self.client = client
        self._on_clock = on_clock
        self._sync_interval_s = clock_sync_interval_s
        self._backoff_start_s = backoff_start_s
        self._backoff_max_s = backoff_max_s
        self._monotonic = monotonic
        self._wake = threading.Event()  # new batch in the spool
        self._kick = threading.Event()  # cut a backoff wait short (drain, stop)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._down_since: float | None = None  # when the analyzer stopped answering
        self.num_sent = 0  # batches acknowledged by the analyzer
        self.num_rejected = 0  # batches the analyzer refused as malformed (dropped)
        self.num_failures = 0  # failed calls (each retried)
        self.num_duplicates = 0  # events the analyzer reported as already held (replays)
        self.num_sent_columns = 0  # batches that went by columns

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="diag-shipper", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """A batch was appended to the spool."""
        self._wake.set()

    @property
    def reachable(self) -> bool:
        return self._down_since is None

    def _loop(self) -> None:
        backoff = self._backoff_start_s
        next_sync = self._monotonic()
        while not self._stop.is_set():
            record = None
            try:
                if self._monotonic() >= next_sync:
                    offset_ns, rtt_ns = self.client.time_sync()
                    self._up()
                    self._on_clock(offset_ns, rtt_ns)
                    next_sync = self._monotonic() + self._sync_interval_s
                record = self.spool.peek()
                if record is None:
                    self._wake.wait(max(next_sync - self._monotonic(), 0.0))
                    self._wake.clear()
                    continue
                reply = self._send(record.payload)
            except TransportError as exc:
                if isinstance(exc, BatchRejected) and record is not None:
                    # Resending cannot fix a malformed batch; it must not block the ones after it.
                    log.error("analyzer refused a spooled batch; dropping it: %s", exc)
                    self.num_rejected += 1
                    self.spool.ack(record)
                    continue
                self.num_failures += 1
                self._down(exc)
                self._kick.wait(backoff)
                self._kick.clear()
                backoff = min(backoff * 2, self._backoff_max_s)
                continue
            except Exception:  # a bug must not silently stop shipping: log it, keep going
                log.exception("unexpected error in the daemon's shipper; retrying")
                self._kick.wait(self._backoff_max_s)
                self._kick.clear()
                continue
            self.spool.ack(record)
            self.num_sent += 1
            self.num_duplicates += reply.num_duplicates
            backoff = self._backoff_start_s
            self._up()

    def _send(self, payload: bytes) -> pb.IngestReply:
        """``payload`` (a spooled ``EventBatch``) to the analyzer, by columns if it reads them."""
        if codec.reads_columns(self.client.analyzer_version):
            columns = _by_columns(payload)
            if columns is not None:
                reply = self.client.ingest(columns)
                if codec.reads_columns(reply.schema_version):
                    self.num_sent_columns += 1
                    return reply
                log.warning(
                    "analyzer %s reads no column blocks (schema %s); sending rows",
                    self.client.target,
                    reply.schema_version or "older than 1.13",
                )
        return self.client.ingest(payload)

    def _down(self, exc: TransportError) -> None:
        if self._down_since is None:
            self._down_since = self._monotonic()
            log.warning("%s; keeping batches in the spool and retrying", exc)

    def _up(self) -> None:
        if self._down_since is not None:
            log.warning(
                "analyzer %s answers again after %.1f s; replaying %d spooled batch(es)",
                self.client.target,
                self._monotonic() - self._down_since,
                self.spool.pending_records,
            )
            self._down_since = None

    def drain(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until the spool is empty; True if everything was acknowledged.

        Gives up early once two calls made during the wait have failed (the analyzer is away).
        """
        deadline = self._monotonic() + timeout_s
        failures_at_start = self.num_failures
        self._kick.set()
        self._wake.set()
        while self.spool.pending_records > 0:
            if self._monotonic() >= deadline or self.num_failures - failures_at_start >= 2:
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop the thread; a call still in flight after ``timeout_s`` is cancelled."""
        self._stop.set()
        self._kick.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.client.close()
                self._thread.join(timeout_s)


def _by_columns(payload: bytes) -> bytes | None:
    """The spooled batch with its events as column blocks; ``None`` when it does not parse (it
    goes as it is: the analyzer refuses it in one line)."""
    try:
        return codec.with_columns(pb.EventBatch.FromString(payload)).SerializeToString()
    except (DecodeError, SchemaError, ValueError, TypeError):
        return None
