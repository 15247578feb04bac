"""The gRPC service on 127.0.0.1:0 through the generated stub, real proto messages throughout."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from diag.analyzer.core import AnalyzerCore
from diag.analyzer.service import serve
from diag.config import AnalyzerConfig
from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc as pb_grpc
from tests.fakes.events import Source, batch, keys


@pytest.fixture
def analyzer(tmp_path: Path) -> Iterator[tuple[pb_grpc.AnalyzerStub, grpc.Channel, AnalyzerCore]]:
    server, port, core = serve(AnalyzerConfig(run_dir=str(tmp_path), flush_interval_s=0.05))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.AnalyzerStub(channel), channel, core
    finally:
        channel.close()
        server.stop(None).wait()
        core.close()


def test_ingest_replies_counts_and_time(analyzer) -> None:
    stub, _, _ = analyzer
    src = Source(rank=0)
    evs = [src.step(0), src.collective(0)]
    before = time.time_ns()
    reply = stub.Ingest(batch(evs), timeout=5)
    assert (reply.num_accepted, reply.num_duplicates) == (2, 0)
    assert reply.analyzer_time_ns >= before and reply.schema_version.startswith("1.")
    reply = stub.Ingest(batch(evs), timeout=5)
    assert (reply.num_accepted, reply.num_duplicates) == (0, 2)
    t = stub.Time(pb.TimeRequest(client_send_ns=1), timeout=5)
    assert abs(t.analyzer_time_ns - time.time_ns()) < 5_000_000_000


def test_background_flush_writes_parts(analyzer) -> None:
    stub, _, core = analyzer
    stub.Ingest(batch([Source(rank=0).step(0)]), timeout=5)
    deadline = time.monotonic() + 5
    while not core.store.part_paths("step") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert core.store.part_paths("step")


def _malformed_cases() -> list[tuple[str, bytes]]:
    src = Source(rank=3)
    no_payload = batch([src.step(7)])
    no_payload.events[0].ClearField("step")
    wrong_major = batch([src.step(8)])
    wrong_major.schema_version = "2.0"
    return [
        ("garbage", b"\xff\xfe\xfd garbage \x00\x01"),
        ("no payload", no_payload.SerializeToString()),
        ("wrong major", wrong_major.SerializeToString()),
        ("empty", b""),
    ]


def test_malformed_batches_are_invalid_argument_and_touch_nothing(analyzer) -> None:
    stub, channel, core = analyzer
    src = Source(rank=0)
    stub.Ingest(batch([src.step(0)]), timeout=5)
    raw = channel.unary_unary(
        "/diag.v1.Analyzer/Ingest",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    for name, payload in _malformed_cases():
        with pytest.raises(grpc.RpcError) as info:
            raw(payload, timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert info.value.details() and "\n" not in info.value.details(), name
    assert keys(core.store.frame("step")) == [(src.name, 0)]
    assert core.high_water() == {src.name: 0}
    reply = stub.Ingest(batch([src.step(1)]), timeout=5)  # and the service carries on
    assert reply.num_accepted == 1


def test_summary_is_the_report_json(analyzer) -> None:
    stub, _, _ = analyzer
    src = Source(host="n1", rank=0)
    stub.Ingest(batch([src.step(0, loss=float("nan")), src.step(1)]), timeout=5)
    data = json.loads(stub.Summary(pb.SummaryRequest(), timeout=5).json)
    assert data["run"]["steps"] == 2 and data["run"]["hosts"] == ["n1"]
    assert data["ranks"][0]["rank"] == 0 and data["ranks"][0]["loss_last"] == 1.0


def test_a_seq_or_step_far_beyond_the_job_is_refused_and_the_source_goes_on(analyzer) -> None:
    """Once, one event with seq 2**63-1 made the analyzer drop a real source's later events as
    duplicates, and one step 2**62 pushed every later profiler window beyond reach."""
    import dataclasses

    stub, _, core = analyzer
    src = Source(rank=0)
    assert stub.Ingest(batch([src.step(0), src.step(1)]), timeout=5).num_accepted == 2
    for forged in (
        dataclasses.replace(src.step(2), seq=2**63 - 1),
        dataclasses.replace(Source(rank=5).step(0), seq=2**40),  # a new source starts low
        dataclasses.replace(src.step(2), step=2**62),
    ):
        with pytest.raises(grpc.RpcError) as info:
            stub.Ingest(batch([forged]), timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "beyond" in (info.value.details() or "")
    assert stub.Ingest(batch([src.step(2), src.step(3)]), timeout=5).num_accepted == 2
    assert core.control.newest_step == 3
    issued = stub.RequestProfile(pb.ProfileRequest(num_steps=1), timeout=5)
    assert 3 < issued.at_step < 1000  # still a few steps ahead of the job
