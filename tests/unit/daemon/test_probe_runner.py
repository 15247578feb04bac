"""The daemon's probe runner: validation, a real low-priority child process, the result events."""

from __future__ import annotations

import json
import os
import sys
import time

from diag import schema
from diag.daemon.probe_runner import ProbeRunner
from diag.proto import diag_pb2 as pb
from probes.validate import validate
from tests.fakes.daemon_doubles import wait_for

CHEAP = '{"size": 8, "depth": 2, "timeout_s": 20.0}'


def _runner(events: list[schema.Event], **kw: object) -> ProbeRunner:
    return ProbeRunner("node1", events.append, **kw)  # type: ignore[arg-type]


def _req(probe: str = "numerics", params: str = CHEAP, **kw: object) -> pb.ProbeRequest:
    return pb.ProbeRequest(request_id="r1", seq=1, probe=probe, params_json=params, **kw)  # type: ignore[arg-type]


def test_a_rejected_request_gets_a_result_saying_why_and_runs_nothing() -> None:
    events: list[schema.Event] = []
    runner = _runner(events)
    assert not runner.submit(_req("os.system", "{}", host="node1", rank=3))
    assert not runner.submit(_req(params='{"size": "__import__(\'os\')"}'))
    assert not runner.submit(_req(device="0;id"))
    assert [e.status for e in events] == ["rejected"] * 3  # type: ignore[attr-defined]
    assert "unknown probe" in events[0].detail and events[0].rank == 3  # type: ignore[attr-defined]
    assert runner.num_rejected == 3 and runner.num_run == 0


def test_the_child_gets_only_the_validated_params_the_device_and_low_priority() -> None:
    runner = _runner([])
    cmd, env = runner.command(_req(device="3"), _numerics(CHEAP))
    assert cmd[:4] == [sys.executable, "-m", "probes", "numerics"]
    assert json.loads(cmd[cmd.index("--params") + 1])["size"] == 8
    assert cmd[cmd.index("--nice") + 1] == "19" and cmd[cmd.index("--device") + 1] == "cuda:0"
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    _, env = runner.command(_req(device="cpu"), _numerics(CHEAP))
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def _numerics(text: str) -> object:
    return validate("numerics", text)


def test_a_cheap_probe_runs_in_a_child_process_and_comes_back_as_an_event() -> None:
    events: list[schema.Event] = []
    runner = _runner(events)
    runner.start()
    t0 = time.monotonic()
    assert runner.submit(_req(host="node1", rank=1))
    wait_for(lambda: bool(events), timeout_s=60, what="the probe result")
    runner.stop()
    (ev,) = events
    assert isinstance(ev, schema.ProbeResultEvent)
    assert (ev.status, ev.probe, ev.request_id, ev.rank) == ("ok", "numerics", "r1", 1)
    assert ev.device == "cpu@node1" and ev.detail and ev.duration_ns > 0
    assert json.loads(ev.params_json)["size"] == 8
    assert runner.num_run == 1 and time.monotonic() - t0 < 60
    assert os.getpriority(os.PRIO_PROCESS, 0) < 19  # the daemon's own priority is untouched


def test_a_probe_past_its_timeout_is_killed_and_reported() -> None:
    events: list[schema.Event] = []
    runner = _runner(events, grace_s=0.0)
    runner.run_one(_req(), _numerics('{"timeout_s": 0.01}'), time.monotonic_ns())
    assert [e.status for e in events] == ["timeout"]  # type: ignore[attr-defined]


def test_a_full_queue_refuses_at_once() -> None:
    events: list[schema.Event] = []
    runner = _runner(events, max_queue=1)  # not started: nothing drains the queue
    assert runner.submit(_req())
    assert not runner.submit(_req())
    assert [e.status for e in events] == ["failed"]  # type: ignore[attr-defined]
