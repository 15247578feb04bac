"""The daemon's probe runner: validation, the child's command line, the result events (the child
processes themselves: tests/integration/test_probe_children.py)."""

from __future__ import annotations

import json
import sys

from diag import schema
from probes.validate import validate
from tests.fakes.daemon_doubles import CHEAP_NUMERICS, probe_request, probe_runner


def test_a_rejected_request_gets_a_result_saying_why_and_runs_nothing() -> None:
    events: list[schema.Event] = []
    runner = probe_runner(events)
    assert not runner.submit(probe_request("os.system", "{}", host="node1", rank=3))
    assert not runner.submit(probe_request(params='{"size": "__import__(\'os\')"}'))
    assert not runner.submit(probe_request(device="0;id"))
    assert [e.status for e in events] == ["rejected"] * 3  # type: ignore[attr-defined]
    assert "unknown probe" in events[0].detail and events[0].rank == 3  # type: ignore[attr-defined]
    assert runner.num_rejected == 3 and runner.num_run == 0


def test_the_child_gets_only_the_validated_params_the_device_and_low_priority() -> None:
    runner = probe_runner([])
    cmd, env = runner.command(probe_request(device="3"), validate("numerics", CHEAP_NUMERICS))
    assert cmd[:3] == [sys.executable, "-I", "-c"] and cmd[4] == "numerics"
    assert json.loads(cmd[cmd.index("--params") + 1])["size"] == 8
    assert cmd[cmd.index("--nice") + 1] == "19" and cmd[cmd.index("--device") + 1] == "cuda:0"
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    _, env = runner.command(probe_request(device="cpu"), validate("numerics", CHEAP_NUMERICS))
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_a_full_queue_refuses_at_once() -> None:
    events: list[schema.Event] = []
    runner = probe_runner(events, max_queue=1)  # not started: nothing drains the queue
    assert runner.submit(probe_request())
    assert not runner.submit(probe_request())
    assert [e.status for e in events] == ["failed"]  # type: ignore[attr-defined]
