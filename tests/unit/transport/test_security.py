"""Who may call the analyzer: real gRPC calls on 127.0.0.1:0 without, with a wrong and with the
right token; TLS and mutual TLS with the test certificates of tests/data/tls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from diag.analyzer.core import AnalyzerCore
from diag.analyzer.service import serve
from diag.config import AnalyzerConfig
from diag.errors import ConfigError, TransportError
from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc as pb_grpc
from diag.transport.client import AnalyzerClient
from diag.transport.security import ClientSecurity, ServerSecurity, check_exposure, read_token
from tests.fakes.events import Source, batch

TOKEN = "s3cret-token-0123456789"


def _token_file(tmp_path: Path, text: str = TOKEN + "\n", name: str = "token") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return path


def _serve(cfg: AnalyzerConfig) -> tuple[grpc.Server, int, AnalyzerCore]:
    return serve(cfg)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[int, AnalyzerCore]]:
    cfg = AnalyzerConfig(
        run_dir=str(tmp_path / "run"), token_file=str(_token_file(tmp_path)), triage_interval_s=0
    )
    server, port, core = _serve(cfg)
    try:
        yield port, core
    finally:
        server.stop(None).wait()
        core.close()


def _every_call(stub: pb_grpc.AnalyzerStub, metadata: list[tuple[str, str]]) -> list[str]:
    """Each RPC once; the status code each got."""
    calls = [
        lambda: stub.Ingest(batch([Source(rank=0).step(0)]), timeout=5, metadata=metadata),
        lambda: stub.Time(pb.TimeRequest(client_send_ns=1), timeout=5, metadata=metadata),
        lambda: stub.Summary(pb.SummaryRequest(), timeout=5, metadata=metadata),
        lambda: stub.RequestProfile(pb.ProfileRequest(num_steps=1), timeout=5, metadata=metadata),
        lambda: stub.RequestProbe(
            pb.ProbeRequest(probe="gemm", params_json="{}", host="node-a"),
            timeout=5,
            metadata=metadata,
        ),
        lambda: stub.PollControl(pb.ControlPoll(after_seq=0), timeout=5, metadata=metadata),
    ]
    codes = []
    for call in calls:
        try:
            call()
            codes.append("OK")
        except grpc.RpcError as exc:
            codes.append(exc.code().name)
    return codes


def test_without_the_token_every_call_is_unauthenticated_and_nothing_is_stored(
    guarded: tuple[int, AnalyzerCore],
) -> None:
    port, core = guarded
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.AnalyzerStub(channel)
        assert set(_every_call(stub, [])) == {"UNAUTHENTICATED"}
        wrong = [("authorization", "Bearer " + TOKEN[:-1] + "X")]
        assert set(_every_call(stub, wrong)) == {"UNAUTHENTICATED"}
        assert set(_every_call(stub, [("authorization", TOKEN)])) == {"UNAUTHENTICATED"}
    assert core.high_water() == {} and core.store.num_buffered == 0
    assert core.control.poll(0) == []  # no profile or probe request was issued


def test_with_the_token_the_client_ingests_reads_and_requests(
    guarded: tuple[int, AnalyzerCore], tmp_path: Path
) -> None:
    port, core = guarded
    security = ClientSecurity.resolve(str(tmp_path / "token"), env={})
    with AnalyzerClient(f"127.0.0.1:{port}", security=security) as client:
        reply = client.ingest(batch([Source(rank=0).step(0)]).SerializeToString())  # raw path
        assert reply.num_accepted == 1
        assert client.ingest(batch([Source(rank=1).step(0)])).num_accepted == 1  # the stub
        assert json.loads(client.summary())["run"] is not None
        assert client.request_profile(num_steps=1).request_id
    assert len(core.high_water()) == 2
    bare = AnalyzerClient(f"127.0.0.1:{port}", security=ClientSecurity())
    with bare, pytest.raises(TransportError, match="UNAUTHENTICATED"):
        bare.ingest(batch([Source(rank=2).step(0)]))


def test_clients_find_the_token_file_in_the_environment(tmp_path: Path) -> None:
    path = _token_file(tmp_path)
    assert ClientSecurity.resolve(env={"DIAG_TOKEN_FILE": str(path)}).token == TOKEN
    assert ClientSecurity.resolve(env={}).token is None


@pytest.mark.parametrize(
    ("text", "why"),
    [("", "holds no token"), ("\n\nx", "holds no token"), ("a" * 5000, "over 4096 bytes")],
)
def test_a_bad_token_file_is_one_line(tmp_path: Path, text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        read_token(_token_file(tmp_path, text))
    with pytest.raises(ConfigError, match="cannot read the token file"):
        read_token(tmp_path / "missing")


def test_a_bind_beyond_loopback_needs_a_token_or_insecure(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="without a token"):
        serve(AnalyzerConfig(run_dir=str(tmp_path / "run"), bind="0.0.0.0:0"))
    assert not (tmp_path / "run").exists()  # refused before anything was opened
    check_exposure("0.0.0.0:0", ServerSecurity(), insecure=True)
    check_exposure("0.0.0.0:0", ServerSecurity(token=TOKEN), insecure=False)
    check_exposure("[::1]:0", ServerSecurity(), insecure=False)
    check_exposure("localhost:7000", ServerSecurity(), insecure=False)


# -- TLS -----------------------------------------------------------------------------------


@pytest.fixture
def pki() -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate it signed
    (tests/data/tls/README.md says how they were made)."""
    return Path(__file__).resolve().parents[2] / "data" / "tls"


def _tls_analyzer(tmp_path: Path, pki: Path, mutual: bool) -> tuple[grpc.Server, int, AnalyzerCore]:
    cfg = AnalyzerConfig(
        run_dir=str(tmp_path / "run"), token_file=str(_token_file(tmp_path)),
        tls_cert=str(pki / "server.pem"), tls_key=str(pki / "server.key"),
        tls_ca=str(pki / "ca.pem") if mutual else "", triage_interval_s=0,
    )  # fmt: skip
    return _serve(cfg)


def test_tls_with_the_token_works_and_a_plain_channel_does_not(tmp_path: Path, pki: Path) -> None:
    server, port, core = _tls_analyzer(tmp_path, pki, mutual=False)
    try:
        good = ClientSecurity.resolve(str(tmp_path / "token"), str(pki / "ca.pem"), env={})
        with AnalyzerClient(f"127.0.0.1:{port}", security=good, timeout_s=10) as client:
            assert client.ingest(batch([Source(rank=0).step(0)])).num_accepted == 1
        plain = ClientSecurity(token=TOKEN)  # the right token, no TLS
        client = AnalyzerClient(f"127.0.0.1:{port}", security=plain, timeout_s=3)
        with client, pytest.raises(TransportError, match="UNAVAILABLE"):
            client.ingest(batch([Source(rank=1).step(0)]))
        assert len(core.high_water()) == 1
    finally:
        server.stop(None).wait()
        core.close()


def test_mutual_tls_refuses_a_client_without_a_certificate(tmp_path: Path, pki: Path) -> None:
    server, port, core = _tls_analyzer(tmp_path, pki, mutual=True)
    try:
        token, ca = str(tmp_path / "token"), str(pki / "ca.pem")
        anonymous = ClientSecurity.resolve(token, ca, env={})
        client = AnalyzerClient(f"127.0.0.1:{port}", security=anonymous, timeout_s=3)
        with client, pytest.raises(TransportError, match="UNAVAILABLE"):
            client.ingest(batch([Source(rank=0).step(0)]))
        known = ClientSecurity.resolve(
            token, ca, str(pki / "client.pem"), str(pki / "client.key"), env={}
        )
        with AnalyzerClient(f"127.0.0.1:{port}", security=known, timeout_s=10) as client:
            assert client.ingest(batch([Source(rank=1).step(0)])).num_accepted == 1
        assert list(core.high_water()) and len(core.high_water()) == 1
    finally:
        server.stop(None).wait()
        core.close()


def test_incomplete_tls_settings_are_one_line_errors(tmp_path: Path, pki: Path) -> None:
    with pytest.raises(ConfigError, match="both --tls-cert and --tls-key"):
        ServerSecurity.from_files(tls_cert=str(pki / "server.pem"))
    with pytest.raises(ConfigError, match="not a PEM file"):
        ServerSecurity.from_files(tls_cert=str(_token_file(tmp_path)), tls_key=str(pki / "x"))
    with pytest.raises(ConfigError, match="both --tls-cert and --tls-key"):
        ClientSecurity.resolve(tls_cert=str(pki / "client.pem"), env={})
