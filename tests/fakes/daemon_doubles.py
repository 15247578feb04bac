"""Test doubles for the daemon tests: a recording analyzer on 127.0.0.1, a fake hook, and probe
requests for the daemon's probe runner."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import TypeVar

import grpc

from diag import schema
from diag.analyzer.service import serve
from diag.config import AnalyzerConfig
from diag.daemon.daemon import Daemon, DaemonStats
from diag.daemon.probe_runner import ProbeRunner
from diag.errors import SchemaError
from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc
from diag.transport import codec
from diag.transport import framing as frames

E = TypeVar("E", bound=schema.Event)


class RecordingAnalyzer(diag_pb2_grpc.AnalyzerServicer):
    """Keeps every accepted event; drops repeats by per-source high-water mark like the real one.
    ``version`` is the schema version its replies give: "" (the default) is an analyzer older than
    1.13, which knows no column blocks and skips them as an unknown field."""

    def __init__(self, clock_skew_ns: int = 0, version: str = "") -> None:
        self.lock = threading.Lock()
        self.high_water: dict[str, int] = {}
        self.events: list[schema.Event] = []
        self.num_batches = 0
        self.num_column_batches = 0  # batches that held column blocks it read
        self.num_duplicates = 0
        self.clock_skew_ns = clock_skew_ns
        self.version = version

    def Ingest(self, request: pb.EventBatch, context: grpc.ServicerContext) -> pb.IngestReply:
        version = self.version
        if not codec.reads_columns(version):
            request = pb.EventBatch.FromString(request.SerializeToString())
            request.ClearField("columns")
        try:
            events = codec.events_from_batch(request)
        except SchemaError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        accepted = dup = 0
        with self.lock:
            self.num_batches += 1
            self.num_column_batches += len(request.columns) > 0
            before = dict(self.high_water)
            seen: set[tuple[str, int]] = set()
            for ev in events:
                key = (ev.source, ev.seq)
                if ev.seq > before.get(ev.source, -1) and key not in seen:
                    seen.add(key)
                    self.high_water[ev.source] = max(ev.seq, self.high_water.get(ev.source, -1))
                    self.events.append(ev)
                    accepted += 1
                else:
                    dup += 1
            self.num_duplicates += dup
        return pb.IngestReply(
            num_accepted=accepted,
            num_duplicates=dup,
            analyzer_time_ns=time.time_ns(),
            schema_version=version,
        )

    def Time(self, request: pb.TimeRequest, context: grpc.ServicerContext) -> pb.TimeReply:
        return pb.TimeReply(
            analyzer_time_ns=time.time_ns() + self.clock_skew_ns, schema_version=self.version
        )

    def of_kind(self, cls: type[E]) -> list[E]:
        with self.lock:
            return [e for e in self.events if isinstance(e, cls)]

    def received(self) -> list[tuple[str, int]]:
        with self.lock:
            return [(e.source, e.seq) for e in self.events]


class AnalyzerServer:
    """A real gRPC server for a RecordingAnalyzer; can stop and start again on the same port."""

    def __init__(self, servicer: RecordingAnalyzer, port: int = 0) -> None:
        self.servicer = servicer
        self.port = port
        self._server: grpc.Server | None = None
        self.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        for _ in range(50):
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            diag_pb2_grpc.add_AnalyzerServicer_to_server(self.servicer, server)
            port = server.add_insecure_port(f"127.0.0.1:{self.port}")
            if port:
                self.port = port
                server.start()
                self._server = server
                return
            time.sleep(0.05)  # the old listener is still closing
        raise RuntimeError(f"cannot bind 127.0.0.1:{self.port}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None


def hook_events(
    host: str, rank: int, pid: int, seqs: range, *, info: bool = False
) -> list[schema.Event]:
    source = f"{host}/rank{rank}/{pid}"
    out: list[schema.Event] = []
    for seq in seqs:
        if info and seq == seqs.start:
            out.append(
                schema.RankInfo(
                    ts_ns=time.time_ns(),
                    host=host,
                    rank=rank,
                    local_rank=rank,
                    source=source,
                    seq=seq,
                    pid=pid,
                    world_size=2,
                )
            )
            continue
        out.append(
            schema.StepEvent(
                ts_ns=time.time_ns(),
                host=host,
                rank=rank,
                local_rank=rank,
                source=source,
                seq=seq,
                step=seq,
                start_ns=0,
                end_ns=10,
                duration_ns=10,
            )
        )
    return out


class FakeHook:
    """A hook's socket: writes framed batches to the daemon, reads nothing back."""

    def __init__(self, path: str | Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))

    def send(self, events: list[schema.Event]) -> None:
        data = codec.encode_batch(events, sender="test-hook", sent_ns=time.time_ns())
        self.sock.sendall(frames.encode_frame(data))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()


def wait_for(cond: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class ReadingHook(FakeHook):
    """A hook connection that also reads what the daemon writes back, as framed messages."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._decoder = frames.FrameDecoder()
        self.messages: list[pb.ControlMessage] = []

    def read_for(self, seconds: float, until_count: int | None = None) -> list[pb.ControlMessage]:
        """Read frames for up to ``seconds`` (or until ``until_count`` messages are in)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until_count is not None and len(self.messages) >= until_count:
                break
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            self.messages += [pb.ControlMessage.FromString(f) for f in self._decoder.feed(data)]
        return self.messages


class ServedAnalyzer:
    """A real analyzer service on 127.0.0.1:0 in this process (``serve``), with its core."""

    def __init__(self, run_dir: Path) -> None:
        self.server, port, self.core = serve(AnalyzerConfig(run_dir=str(run_dir)))
        self.target = f"127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.stop(None).wait()
        self.core.close()


class RunningDaemon:
    """A real :class:`Daemon` running on a thread of this process until :meth:`stop`."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.stats: DaemonStats | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        self.stats = self.daemon.run()

    def stop(self) -> DaemonStats:
        self.daemon.request_stop()
        self.thread.join(15)
        assert not self.thread.is_alive() and self.stats is not None
        return self.stats


#: numerics probe parameters that run in well under a second on a CPU. The timeout is generous:
#: the child runs at nice 19 and imports torch, which took over 20 s on a saturated 2-core host.
CHEAP_NUMERICS = '{"size": 8, "depth": 2, "timeout_s": 120.0}'


def probe_runner(events: list[schema.Event], **kw: object) -> ProbeRunner:
    """A probe runner of host ``node1`` that appends its result events to ``events``."""
    return ProbeRunner("node1", events.append, **kw)  # type: ignore[arg-type]


def probe_request(
    probe: str = "numerics", params: str = CHEAP_NUMERICS, **kw: object
) -> pb.ProbeRequest:
    return pb.ProbeRequest(request_id="r1", seq=1, probe=probe, params_json=params, **kw)  # type: ignore[arg-type]
