"""AnalyzerClient against a real gRPC server on 127.0.0.1:0."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from diag import schema
from diag.errors import TransportError
from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc
from diag.transport import codec
from diag.transport.client import AnalyzerClient, BatchRejected

SKEW_NS = 3_000_000_000


class Servicer(diag_pb2_grpc.AnalyzerServicer):
    def __init__(self) -> None:
        self.batches: list[pb.EventBatch] = []

    def Ingest(self, request: pb.EventBatch, context: grpc.ServicerContext) -> pb.IngestReply:
        if request.sender == "bad":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "event has no envelope\nsecond line")
        self.batches.append(request)
        return pb.IngestReply(num_accepted=len(request.events), analyzer_time_ns=1)

    def Time(self, request: pb.TimeRequest, context: grpc.ServicerContext) -> pb.TimeReply:
        return pb.TimeReply(analyzer_time_ns=time.time_ns() + SKEW_NS)

    def Summary(self, request: pb.SummaryRequest, context: grpc.ServicerContext) -> pb.SummaryReply:
        return pb.SummaryReply(json='{"run": {}}')


@pytest.fixture
def served() -> Iterator[tuple[Servicer, str]]:
    servicer = Servicer()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2),
        options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],
    )
    diag_pb2_grpc.add_AnalyzerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(grace=None)


def _events(n: int) -> list[schema.Event]:
    return [
        schema.HookHealth(ts_ns=i, host="h", source="h/rank0/1", seq=i, pid=1) for i in range(n)
    ]


def test_ingest_bytes_and_messages(served: tuple[Servicer, str]) -> None:
    servicer, target = served
    with AnalyzerClient(target, timeout_s=5) as client:
        raw = codec.encode_batch(_events(3), sender="d", sent_ns=5)
        assert client.ingest(raw).num_accepted == 3
        assert (
            client.ingest(codec.batch_to_proto(_events(2), sender="d", sent_ns=6)).num_accepted == 2
        )
        assert client.summary() == '{"run": {}}'
    assert [len(b.events) for b in servicer.batches] == [3, 2]
    assert codec.events_from_batch(servicer.batches[0]) == _events(3)


def test_big_batches_fit(served: tuple[Servicer, str]) -> None:
    _, target = served
    big = codec.encode_batch(_events(1), sender="d", sent_ns=0)
    batch = pb.EventBatch.FromString(big)
    batch.sender = "x" * (20 * 1024 * 1024)  # above gRPC's 4 MiB default
    with AnalyzerClient(target) as client:
        assert client.ingest(batch.SerializeToString()).num_accepted == 1


def test_time_sync_measures_the_offset(served: tuple[Servicer, str]) -> None:
    _, target = served
    with AnalyzerClient(target) as client:
        offset, rtt = client.time_sync()
    assert rtt > 0
    assert abs(offset - SKEW_NS) <= rtt / 2 + 1_000_000


def test_rejected_batch_is_its_own_error(served: tuple[Servicer, str]) -> None:
    _, target = served
    with AnalyzerClient(target) as client, pytest.raises(BatchRejected) as err:
        client.ingest(pb.EventBatch(sender="bad"))
    assert "INVALID_ARGUMENT" in str(err.value) and "\n" not in str(err.value)


def test_unreachable_analyzer_is_a_one_line_transport_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it
    with AnalyzerClient(f"127.0.0.1:{port}", timeout_s=2) as client:
        t0 = time.monotonic()
        with pytest.raises(TransportError) as err:
            client.ingest(b"")
        assert time.monotonic() - t0 < 2  # fails fast, no wait for ready
        with pytest.raises(TransportError):
            client.time_sync()
    assert "UNAVAILABLE" in str(err.value) and "\n" not in str(err.value)
    assert not isinstance(err.value, BatchRejected)
