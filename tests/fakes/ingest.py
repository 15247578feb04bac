"""Send events to an analyzer over real gRPC, in batches, as a daemon does."""

from __future__ import annotations

import grpc

from diag.proto import diag_pb2_grpc as pb_grpc
from diag.transport import codec


def ingest(port: int, events: list, batch: int = 500) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.AnalyzerStub(channel)
        for i in range(0, len(events), batch):
            stub.Ingest(codec.batch_to_proto(events[i : i + batch], sender="t", sent_ns=0),
                        timeout=10)  # fmt: skip
