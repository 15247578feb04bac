"""``diag analyzer`` as a process: SIGKILL at any moment loses no acknowledged event and stores
none twice once the daemon has resent its batches; SIGTERM flushes and exits 0; a second analyzer
on the same run directory is refused. ``diag profile`` asks a running one, found through run.json
or --analyzer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow.parquet as pq
import pytest

from diag.proto import diag_pb2 as pb
from diag.proto import diag_pb2_grpc as pb_grpc
from diag.store.run_store import RunStore
from tests.fakes.cli import one_error_line, run_cli
from tests.fakes.events import Source, batch
from tests.fakes.paths import REPO

pytestmark = pytest.mark.integration
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


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
        env=ENV,
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


def test_a_second_analyzer_on_the_same_run_dir_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc, _ = _start(run_dir, tmp_path, "first")
    try:
        second = subprocess.run(
            [sys.executable, "-m", "diag.cli.main", "analyzer", "--run-dir", str(run_dir)],
            cwd=REPO, capture_output=True, text=True, timeout=30, env=ENV,
        )  # fmt: skip
        assert second.returncode == 2
        assert f"in use by another analyzer (pid {proc.pid})" in second.stderr
        assert second.stdout == ""
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0


@pytest.fixture(scope="module")
def analyzer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A run directory whose run.json names a running ``diag analyzer``."""
    tmp = tmp_path_factory.mktemp("profile")
    run_dir = tmp / "run"
    port_file = tmp / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag.cli.main", "analyzer", "--run-dir", str(run_dir),
         "--port-file", str(port_file)],
        cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("analyzer listening on"), line
        target = f"127.0.0.1:{int(port_file.read_text())}"
        (run_dir / "run.json").write_text(json.dumps({"run_id": "r1", "analyzer": target}))
        yield run_dir, target
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def _polled(target: str) -> list[pb.ProfileRequest]:
    with grpc.insecure_channel(target) as channel:
        reply = pb_grpc.AnalyzerStub(channel).PollControl(pb.ControlPoll(), timeout=5)
    return [m.profile for m in reply.messages]


def test_profile_through_run_json_and_through_analyzer(analyzer: tuple[Path, str]) -> None:
    run_dir, target = analyzer
    # No steps seen yet: the analyzer cannot choose a step, and says so in one line.
    line = one_error_line(run_cli("profile", str(run_dir)), "profile")
    assert "FAILED_PRECONDITION: the analyzer has seen no training step yet" in line
    assert _polled(target) == []
    res = run_cli("profile", str(run_dir), "--at-step", "3")
    assert res.returncode == 0, res.stderr
    (first,) = _polled(target)
    assert res.stdout == f"profile request {first.request_id}: 1 step at step 3 on all ranks\n"

    res = run_cli(
        "profile", "--analyzer", target, "--steps", "2", "--ranks", "2,0", "--at-step", "57"
    )
    assert res.returncode == 0, res.stderr
    second = _polled(target)[1]
    assert res.stdout == f"profile request {second.request_id}: 2 steps at step 57 on ranks 0, 2\n"

    res = run_cli("profile", str(run_dir), "--ranks", "1", "--json", "--at-step", "3")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    third = _polled(target)[2]
    assert data == {
        "request_id": third.request_id,
        "seq": 3,
        "at_step": 3,
        "num_steps": 1,
        "ranks": [1],
        "requested_ns": third.requested_ns,
        "expires_ns": third.expires_ns,
        "realign_steps": 0,  # no step seen: no lead known, a late rank goes at its next step
    }


def test_refused_request_is_one_line(analyzer: tuple[Path, str]) -> None:
    run_dir, _ = analyzer
    line = one_error_line(run_cli("profile", str(run_dir), "--steps", "0"), "profile")
    assert "INVALID_ARGUMENT: num_steps must be between 1 and 100, got 0" in line


def test_a_run_an_analyzer_still_writes_is_said_to_be_in_progress(tmp_path: Path) -> None:
    """diag triage on a live run once added a critical "wait in collectives; no culprit" hang:
    report and triage now say the run is still going, and judge no hang from the store."""
    run_dir = tmp_path / "run"
    proc, port = _start(run_dir, tmp_path, "a")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.AnalyzerStub(channel)
            for b in _batches()[:30]:
                stub.Ingest(b, timeout=10)
        res = run_cli("triage", str(run_dir), "--json")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["run"]["in_progress"] is True and out["run"]["writer_pid"] == proc.pid
        assert not [f for f in out["findings"] if f["symptom"] == "hang"], out["findings"]
        table = run_cli("triage", str(run_dir))
        assert f"the run is still going (analyzer pid {proc.pid} is writing it)" in table.stdout
        report = run_cli("report", str(run_dir))
        assert f"in progress (analyzer pid {proc.pid} writing)" in report.stdout
        # asking (here, and in the analyzer's own live triage) must not drop its guard: a
        # first version opened and closed the lock file, which releases a process's locks
        time.sleep(6)  # a live triage pass (every 5 s) has run summarize() in the analyzer
        second = subprocess.run(
            [sys.executable, "-m", "diag.cli.main", "analyzer", "--run-dir", str(run_dir)],
            cwd=REPO, capture_output=True, text=True, timeout=30, env=ENV,
        )  # fmt: skip
        assert second.returncode == 2 and f"(pid {proc.pid})" in second.stderr, second.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    done = json.loads(run_cli("report", str(run_dir), "--json").stdout)
    assert done["run"]["in_progress"] is False and done["run"]["writer_pid"] is None
