"""The analyzer's job metrics and alerts, through serve(): a real gRPC ingest, a real scrape."""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path

import grpc
import pytest

from diag.analyzer.service import serve
from diag.config import AnalyzerConfig
from diag.errors import TransportError
from tests.fakes.ingest import ingest
from tests.fakes.scenarios import Scenario
from tests.fakes.scrape import scrape


def _ingest(port: int, events: list) -> None:
    """The events as a daemon sends them, then one batch of garbage (refused and counted)."""
    ingest(port, events)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        raw = channel.unary_unary("/diag.v1.Analyzer/Ingest")  # bytes, as a broken client sends
        with pytest.raises(grpc.RpcError):
            raw(b"\xff\xff not a batch", timeout=10)


def test_findings_scores_and_ingest_are_scraped_and_the_finding_alerted(tmp_path: Path) -> None:
    posts: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    cfg = AnalyzerConfig(
        run_dir=str(tmp_path / "run"), flush_interval_s=0.1, triage_interval_s=0.2,
        metrics_port=0, alert_webhook=f"http://127.0.0.1:{receiver.server_port}/",
    )  # fmt: skip
    server, port, core = serve(cfg)
    try:
        assert core.metrics_url == f"http://127.0.0.1:{core.metrics_port}/metrics"
        events = Scenario(slow_ranks=(2,), onset_step=50, severity=0.3).events()
        _ingest(port, events)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (core.latest_triage and posts):
            time.sleep(0.05)
        got = scrape(core.metrics_url)
    finally:
        server.stop(None).wait()
        core.close()
        core.release()
        receiver.shutdown()
        receiver.server_close()

    job = got["diag_findings"][0][0]["job_id"]
    assert job == "job1"  # the run's id (the events' job id)
    assert [(lab["cause"], v) for lab, v in got["diag_findings"]] == [("node", 1)]
    ((lab, conf),) = got["diag_finding_confidence"]
    assert lab["ranks"] == "2" and lab["cause"] == "node" and 0 < conf <= 1
    scores = {lab["rank"]: v for lab, v in got["diag_rank_straggler_score"]}
    assert max(scores, key=scores.__getitem__) == "2" and scores["2"] > 1.1
    assert got["diag_ingest_events_total"] == [({"job_id": job}, float(len(events)))]
    assert got["diag_ingest_rejected_batches_total"] == [({"job_id": job}, 1.0)]
    assert got["diag_triage_passes_total"][0][1] >= 1
    latency = got["diag_finding_detection_latency_steps"]
    assert latency and latency[0][1] >= 0
    assert len(posts) == 1 and posts[0]["alert"]["reason"] == "new"
    assert posts[0]["findings"][0]["ranks"] == [2] and "node" in posts[0]["text"]


def test_metrics_off_by_default_and_a_taken_port_refuses_to_start(tmp_path: Path) -> None:
    server, _, core = serve(AnalyzerConfig(run_dir=str(tmp_path / "a"), triage_interval_s=0))
    try:
        assert core.metrics_url == "" and core.metrics_port == -1
        taken = serve(AnalyzerConfig(run_dir=str(tmp_path / "b"), triage_interval_s=0,
                                     metrics_port=0))  # fmt: skip
        try:
            with pytest.raises(TransportError, match="cannot serve metrics"):
                serve(AnalyzerConfig(run_dir=str(tmp_path / "c"), triage_interval_s=0,
                                     metrics_port=taken[2].metrics_port))  # fmt: skip
        finally:
            taken[0].stop(None).wait()
            taken[2].close()
            taken[2].release()
    finally:
        server.stop(None).wait()
        core.close()
