"""A probe request end to end: ``diag replay``'s daemon runner asks a real analyzer (127.0.0.1:0),
a real daemon pulls the request, runs the probe in a child process and ships the result, and the
runner reads it back from the run store."""

from __future__ import annotations

import time
from pathlib import Path

from diag.config import DaemonConfig
from diag.daemon.daemon import Daemon
from diag.replay.plan import ProbePlan
from diag.replay.remote import daemon_runner
from diag.replay.replay import Target
from diag.transport.client import AnalyzerClient
from probes.numerics import NumericsParams
from tests.fakes.daemon_doubles import RunningDaemon, ServedAnalyzer


def test_a_replay_probe_runs_on_the_targets_daemon(tmp_path: Path) -> None:
    analyzer = ServedAnalyzer(tmp_path / "run")
    cfg = DaemonConfig(
        listen_sock=str(tmp_path / "d.sock"),
        analyzer=analyzer.target,
        spool_dir=str(tmp_path / "spool"),
        host="node1",
        gpu_backend="none",
        flush_interval_s=0.05,
        rpc_timeout_s=2.0,
    )
    running = RunningDaemon(Daemon(cfg, final_flush_s=2.0))
    try:
        with AnalyzerClient(analyzer.target) as client:
            runner = daemon_runner(tmp_path / "run", client.request_probe)
            plan = ProbePlan("numerics", NumericsParams(size=8, depth=2, timeout_s=20.0))
            t0 = time.monotonic()
            (result,) = runner(plan, Target(role="suspect", rank=0, host="node1"))
            latency_s = time.monotonic() - t0
            (other,) = runner(plan, Target(role="peer", rank=1, host="node1"))
            impatient = daemon_runner(tmp_path / "run", client.request_probe, grace_s=1.0)
            wrong = impatient(
                ProbePlan("numerics", NumericsParams(size=8, depth=2, timeout_s=0.01)),
                Target(role="peer", rank=1, host="elsewhere"),
            )
    finally:
        stats = running.stop()
        analyzer.stop()
    print(f"probe latency through analyzer + daemon: {latency_s:.2f} s")
    assert result.status == "ok" and result.device == "cpu@node1" and result.params["size"] == 8
    assert other.detail == result.detail  # the same digest on the same CPU
    assert [r.status for r in wrong] == ["timeout"]  # no daemon on that host
    assert stats.num_control_messages == 3 and stats.num_batches_rejected == 0
