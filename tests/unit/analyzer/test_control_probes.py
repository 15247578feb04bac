"""Probe requests on the control board: validated, numbered with the profile requests, persisted,
handed to pollers in seq order; and the ``RequestProbe`` RPC through the generated stub."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from diag.analyzer.control import ControlBoard, control_seq
from diag.analyzer.service import serve
from diag.config import AnalyzerConfig
from diag.errors import ConfigError
from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc as pb_grpc

S = 1_000_000_000


def test_probe_and_profile_requests_share_one_sequence_and_persist(tmp_path: Path) -> None:
    now = [1_000 * S]
    path = tmp_path / "control.json"
    board = ControlBoard(lambda: now[0], state_path=path)
    first = board.request_profile(at_step=10)
    probe = board.request_probe("numerics", '{"size": 8}', "node1", "0", rank=2, ttl_s=5)
    assert (first.seq, probe.seq) == (1, 2) and probe.expires_ns == now[0] + 5 * S
    msgs = board.poll(0)
    assert [m.WhichOneof("body") for m in msgs] == ["profile", "probe"]
    assert [control_seq(m) for m in msgs] == [1, 2] and msgs[1].probe == probe
    assert board.poll(1)[0].probe == probe
    again = ControlBoard(lambda: now[0], state_path=path)  # a restarted analyzer
    assert again.poll(1)[0].probe == probe and again.last_seq == 2
    now[0] += 6 * S
    assert [m.WhichOneof("body") for m in again.poll(0)] == ["profile"]  # the probe expired


@pytest.mark.parametrize(
    ("probe", "params", "host", "device", "why"),
    [
        ("rm", "{}", "node1", "", "unknown probe"),
        ("numerics", '{"size": "os.system"}', "node1", "", "'size' is not int"),
        ("numerics", "{}", "", "", "needs a host"),
        ("numerics", "{}", "node1", "0; id", "device index"),
    ],
)
def test_bad_probe_requests_are_refused(
    probe: str, params: str, host: str, device: str, why: str
) -> None:
    board = ControlBoard(lambda: 0)
    with pytest.raises(ConfigError, match=why):
        board.request_probe(probe, params, host, device)
    assert board.last_seq == 0 and board.poll(0) == []


def test_request_probe_rpc(tmp_path: Path) -> None:
    server, port, core = serve(AnalyzerConfig(run_dir=str(tmp_path / "run")))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.AnalyzerStub(channel)
            issued = stub.RequestProbe(pb.ProbeRequest(probe="numerics", host="*", rank=-1))
            assert issued.seq == 1 and issued.request_id and issued.probe == "numerics"
            polled = stub.PollControl(pb.ControlPoll(after_seq=0)).messages
            assert [m.probe.request_id for m in polled] == [issued.request_id]
            with pytest.raises(grpc.RpcError) as info:
                stub.RequestProbe(pb.ProbeRequest(probe="bash", host="*"))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "unknown probe" in (info.value.details() or "")
    finally:
        server.stop(None).wait()
        core.close()
