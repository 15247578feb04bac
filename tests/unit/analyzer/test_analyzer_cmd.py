"""``diag analyzer`` as a process: SIGKILL at any moment loses no acknowledged event and stores
none twice once the daemon has resent its batches; SIGTERM flushes and exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import grpc
import pyarrow.parquet as pq

from diag.cli.analyzer_cmd import is_loopback
from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc as pb_grpc
from diag.store.run_store import RunStore
from tests.fakes.events import Source, batch
from tests.fakes.paths import REPO


def _start(run_dir: Path, tmp: Path, name: str) -> tuple[subprocess.Popen[str], int]:
    port_file = tmp / f"{name}.port"
    config = tmp / "analyzer.toml"
    config.write_text("[analyzer]\nflush_interval_s = 0.02\n")  # flush often: kills land mid-flush
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag.cli.main", "analyzer", "--run-dir", str(run_dir),
         "--port-file", str(port_file), "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()  # printed once serving, after the port file is written
    assert line.startswith("analyzer listening on 127.0.0.1:"), (line, proc.stderr.read())
    port = int(port_file.read_text())
    assert line.strip() == f"analyzer listening on 127.0.0.1:{port}"
    return proc, port


def _batches() -> list[pb.EventBatch]:
    sources = [Source(host="n0", rank=r) for r in range(4)] + [Source(host="n0")]
    out = []
    for i in range(60):
        evs = [s.step(i) for s in sources[:4]] + [s.collective(i) for s in sources[:2]]
        evs.append(sources[4].gpu(i, 0))
        out.append(batch(evs))
    return out


def _on_disk(run_dir: Path) -> Counter[tuple[str, int]]:
    c: Counter[tuple[str, int]] = Counter()
    for part in (run_dir / "store").glob("*/part-*.parquet"):
        t = pq.read_table(part, columns=["source", "seq"])
        c.update(zip(t["source"].to_pylist(), t["seq"].to_pylist(), strict=True))
    return c


def test_sigkill_then_replay_stores_every_event_exactly_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    batches = _batches()
    proc, port = _start(run_dir, tmp_path, "first")
    acked: list[int] = []
    half_done = threading.Event()

    def send() -> None:  # the daemon: one batch in flight, in order
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.AnalyzerStub(ch)
            for i, b in enumerate(batches):
                try:
                    stub.Ingest(b, timeout=5)
                except grpc.RpcError:
                    return
                acked.append(i)
                if i == len(batches) // 2:
                    half_done.set()

    sender = threading.Thread(target=send)
    sender.start()
    assert half_done.wait(20)
    proc.send_signal(signal.SIGKILL)  # while batches are still flowing
    proc.wait(10)
    sender.join(10)
    assert 0 < len(acked) < len(batches)

    proc, port = _start(run_dir, tmp_path, "second")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.AnalyzerStub(ch)
        replies = [stub.Ingest(b, timeout=5) for b in batches]  # replay the whole spool
    for i in acked:  # acknowledged before the kill: already stored, so all duplicates now
        assert replies[i].num_duplicates == len(batches[i].events), i
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0

    expected = {(e.env.source, e.env.seq) for b in batches for e in b.events}
    on_disk = _on_disk(run_dir)
    assert set(on_disk) == expected and set(on_disk.values()) == {1}
    assert not list((run_dir / "store" / "wal").iterdir())  # all folded on SIGTERM
    store = RunStore.open(run_dir)
    assert sum(len(store.frame(k)) for k in store.kinds()) == len(expected)
    assert (run_dir / "logs" / "analyzer.log").exists()


def test_loopback_detection() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("[::]") and not is_loopback("10.0.0.1")


def test_a_second_analyzer_on_the_same_run_dir_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc, _ = _start(run_dir, tmp_path, "first")
    try:
        second = subprocess.run(
            [sys.executable, "-m", "diag.cli.main", "analyzer", "--run-dir", str(run_dir)],
            cwd=REPO, capture_output=True, text=True, timeout=30,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert second.returncode == 2
        assert f"in use by another analyzer (pid {proc.pid})" in second.stderr
        assert second.stdout == ""
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
