"""Probes in child processes: the daemon's probe runner starts a real low-priority child, gets its
result back as an event, and kills one past its timeout; and a probe request end to end:
``diag replay``'s daemon runner asks a real analyzer (127.0.0.1:0), a real daemon pulls the request,
runs the probe in a child process and ships the result, and the runner reads it back from the run
store."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.daemon import Daemon
from diag.replay.plan import ProbePlan
from diag.replay.remote import daemon_runner
from diag.replay.replay import Target
from diag.transport.client import AnalyzerClient
from probes.numerics import NumericsParams
from probes.validate import validate
from tests.fakes.daemon_doubles import (
    CHEAP_NUMERICS,
    RunningDaemon,
    ServedAnalyzer,
    probe_request,
    probe_runner,
    wait_for,
)

pytestmark = pytest.mark.integration


def test_a_cheap_probe_runs_in_a_child_process_and_comes_back_as_an_event() -> None:
    events: list[schema.Event] = []
    runner = probe_runner(events)
    runner.start()
    t0 = time.monotonic()
    assert runner.submit(probe_request(host="node1", rank=1))
    wait_for(lambda: bool(events), timeout_s=150, what="the probe result")
    runner.stop()
    (ev,) = events
    assert isinstance(ev, schema.ProbeResultEvent)
    assert (ev.status, ev.probe, ev.request_id, ev.rank) == ("ok", "numerics", "r1", 1)
    assert ev.device == "cpu@node1" and ev.detail and ev.duration_ns > 0
    assert json.loads(ev.params_json)["size"] == 8
    assert runner.num_run == 1
    print(f"probe in a child process: {time.monotonic() - t0:.2f} s")
    assert os.getpriority(os.PRIO_PROCESS, 0) < 19  # the daemon's own priority is untouched


def test_a_probe_past_its_timeout_is_killed_and_reported() -> None:
    events: list[schema.Event] = []
    runner = probe_runner(events, grace_s=0.0)
    runner.run_one(
        probe_request(), validate("numerics", '{"timeout_s": 0.01}'), time.monotonic_ns()
    )
    assert [e.status for e in events] == ["timeout"]  # type: ignore[attr-defined]


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
            plan = ProbePlan("numerics", NumericsParams(size=8, depth=2, timeout_s=120.0))
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


def test_a_probes_folder_where_the_daemon_runs_or_on_pythonpath_is_not_what_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m probes`` in the daemon's working directory once ran a user's own ``probes/``."""
    shadow = tmp_path / "probes"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text(
        "import json\n"
        'row = {"status": "ok", "metric": "shadowed", "detail": "shadowed", "value": 1}\n'
        "print(json.dumps([row]))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    events: list[schema.Event] = []
    runner = probe_runner(events)
    req = probe_request(params=CHEAP_NUMERICS)
    runner.run_one(req, validate("numerics", CHEAP_NUMERICS), 0)
    assert events, "no result"
    assert all(e.status == "ok" and e.probe == "numerics" for e in events), events  # type: ignore[attr-defined]
    assert not any("shadowed" in str(e) for e in events), events
