"""The daemon's gRPC client for the analyzer's ``Analyzer`` service.

Every gRPC failure becomes a one-line :class:`~diag.errors.TransportError`; a batch the analyzer
refuses as malformed (``INVALID_ARGUMENT`` on ``Ingest``) is a :class:`BatchRejected`, which
retrying cannot fix.
Calls fail fast while the analyzer is down (no ``wait_for_ready``); the channel retries connecting
every 0.2-2 s so a restarted analyzer is found again quickly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import grpc

from diag.errors import TransportError
from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc
from diag.transport.security import ClientSecurity

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_INGEST_METHOD = "/diag.v1.Analyzer/Ingest"


class BatchRejected(TransportError):
    """The analyzer refused a batch as malformed (``INVALID_ARGUMENT``): do not resend it."""


def _identity(data: bytes) -> bytes:
    return data


class AnalyzerClient:
    """A connection to the analyzer at ``target`` (``host:port``); ``timeout_s`` bounds a call.
    ``security``: the token and TLS material it presents (``None``: from ``DIAG_TOKEN_FILE`` and
    the ``DIAG_TLS_*`` variables, :meth:`ClientSecurity.resolve`; :class:`ConfigError` on a bad
    file)."""

    def __init__(
        self,
        target: str,
        timeout_s: float = 5.0,
        *,
        wall_clock: Callable[[], int] = time.time_ns,
        security: ClientSecurity | None = None,
    ) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self._wall_clock = wall_clock
        self.security = security if security is not None else ClientSecurity.resolve()
        self._channel = self.security.channel(
            target,
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.initial_reconnect_backoff_ms", 200),
                ("grpc.min_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 2000),
                ("grpc.enable_retries", 0),
            ],
        )
        self._stub = diag_pb2_grpc.AnalyzerStub(self._channel)
        #: the analyzer's schema version from its last reply ("" before one, or from an analyzer
        #: older than 1.13 on ``Time``): whether it reads column blocks (``codec.reads_columns``)
        self.analyzer_version = ""
        # Already-serialized batches (from the spool) go out as they are, without a parse.
        self._ingest_raw = self._channel.unary_unary(
            _INGEST_METHOD,
            request_serializer=_identity,
            response_deserializer=pb.IngestReply.FromString,
        )

    def _error(self, call: str, exc: grpc.RpcError) -> TransportError:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
        name = code.name if code is not None else "ERROR"
        first = details.splitlines()[0] if details else ""
        line = f"analyzer {self.target}: {call} failed: {name}: {first}"
        if code == grpc.StatusCode.INVALID_ARGUMENT and call == "Ingest":
            return BatchRejected(line)
        return TransportError(line)

    def ingest(self, batch: bytes | pb.EventBatch) -> pb.IngestReply:
        """Send one batch (serialized ``EventBatch`` bytes or the message); the analyzer's reply."""
        try:
            if isinstance(batch, bytes):
                reply: pb.IngestReply = self._ingest_raw(batch, timeout=self.timeout_s)
            else:
                reply = self._stub.Ingest(batch, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error("Ingest", exc) from None
        self.analyzer_version = reply.schema_version
        return reply

    def time_sync(self) -> tuple[int, int]:
        """``(offset_ns, rtt_ns)`` to the analyzer's clock: ``analyzer_time = local + offset_ns``.

        NTP-style over one round trip: the analyzer's time is taken to be read at the midpoint, so
        the error is at most ``rtt_ns / 2``.
        """
        t0 = self._wall_clock()
        try:
            reply = self._stub.Time(pb.TimeRequest(client_send_ns=t0), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error("Time", exc) from None
        t1 = self._wall_clock()
        self.analyzer_version = reply.schema_version
        return reply.analyzer_time_ns - (t0 + t1) // 2, t1 - t0

    def summary(self, run_dir: str = "") -> str:
        """The analyzer's live run summary as JSON text."""
        try:
            reply = self._stub.Summary(pb.SummaryRequest(run_dir=run_dir), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error("Summary", exc) from None
        return str(reply.json)

    def poll_control(
        self, after_seq: int, host: str = "", daemon: str = ""
    ) -> list[pb.ControlMessage]:
        """The analyzer's unexpired control messages with ``seq > after_seq`` (oldest first);
        ``host`` and ``daemon`` (the daemon's source) say who asks."""
        poll = pb.ControlPoll(host=host, daemon=daemon, after_seq=after_seq)
        try:
            reply = self._stub.PollControl(poll, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error("PollControl", exc) from None
        return list(reply.messages)

    def request_profile(
        self, num_steps: int = 1, ranks: Sequence[int] = (), at_step: int = 0
    ) -> pb.ProfileRequest:
        """Ask for a profiler window of ``num_steps`` steps from ``at_step`` (0 = a few steps
        ahead, chosen by the analyzer) on ``ranks`` (empty = all); the request as issued."""
        request = pb.ProfileRequest(num_steps=num_steps, ranks=list(ranks), at_step=at_step)
        try:
            issued: pb.ProfileRequest = self._stub.RequestProfile(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error("RequestProfile", exc) from None
        return issued

    def request_fetch(
        self, first_step: int, last_step: int, ranks: Sequence[int] = (), host: str = "*"
    ) -> pb.CollectiveFetch:
        """Ask the node daemons (``host``; ``"*"``: all) for the raw collectives of ``ranks``
        (empty: all) in steps ``first_step..last_step`` they kept while shipping summaries; the
        request as issued. ``INVALID_ARGUMENT`` on a bad range."""
        request = pb.CollectiveFetch(
            first_step=first_step, last_step=last_step, ranks=list(ranks), host=host
        )
        try:
            issued: pb.CollectiveFetch = self._stub.RequestFetch(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error("RequestFetch", exc) from None
        return issued

    def request_probe(self, request: pb.ProbeRequest) -> pb.ProbeRequest:
        """Ask the analyzer to have ``request.host``'s daemon run one registered probe; the
        request as issued (``request_id``, ``seq`` filled). ``INVALID_ARGUMENT`` on a bad one."""
        try:
            issued: pb.ProbeRequest = self._stub.RequestProbe(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error("RequestProbe", exc) from None
        return issued

    def close(self) -> None:
        """Close the channel; calls in flight fail with ``CANCELLED``."""
        self._channel.close()

    def __enter__(self) -> AnalyzerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
