"""Alerts: new and escalated findings POSTed to a real HTTP server on 127.0.0.1:0."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from diag.analyzer.alerts import AlertConfig, Alerter
from diag.errors import ConfigError
from diag.findings import Finding

RUN = {"id": "job-7", "world_size": 4}


def _finding(fid: str, severity: str = "warning", cause: str = "node") -> Finding:
    return Finding(id=fid, symptom="slowdown", cause=cause, severity=severity, ranks=(2,),
                   onset_step=30, detected_step=32, slowdown=1.4, confidence=0.9,
                   summary=f"rank 2 computes 1.4x longer than its peers ({fid})")  # fmt: skip


class Hook:
    """A webhook receiver: records each POST; answers the queued statuses first, then 200."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.statuses: list[int] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with owner.lock:
                    status = owner.statuses.pop(0) if owner.statuses else 200
                    owner.bodies.append({"status": status, "type": self.headers["Content-Type"],
                                         "json": json.loads(body)})  # fmt: skip
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"

    def delivered(self) -> list[dict]:
        with self.lock:
            return [b["json"] for b in self.bodies if b["status"] == 200]


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.server.shutdown()
    h.server.server_close()


def _alerter(hook: Hook, **kw: object) -> Alerter:
    return Alerter(AlertConfig(webhook=hook.url, **kw), sleep=lambda s: None)  # type: ignore[arg-type]


def test_new_and_escalated_findings_are_posted_once(hook: Hook) -> None:
    a = _alerter(hook)
    try:
        assert a.observe(RUN, [_finding("node-rank2"), _finding("data-1", "info")]) == 1
        assert a.observe(RUN, [_finding("node-rank2")]) == 0  # unchanged: not again
        assert a.observe(RUN, [_finding("node-rank2", "critical")]) == 1  # escalated
        assert a.observe(RUN, [_finding("node-rank2", "warning")]) == 0  # lowered: no alert
        assert a.drain(10)
    finally:
        a.close()
    got = hook.delivered()
    assert [g["alert"]["reason"] for g in got] == ["new", "escalated"]
    first = got[0]
    assert first["run"] == RUN and first["findings"][0]["id"] == "node-rank2"
    assert [f["id"] for f in first["findings"]] == ["node-rank2", "data-1"]  # the whole triage
    assert first["text"].startswith("diag: warning node finding in job job-7: rank 2 computes")
    assert "\n" not in first["text"] and "[confidence 0.90]" in first["text"]
    assert hook.bodies[0]["type"] == "application/json"
    assert a.num_sent == 2 and a.num_failed == 0


def test_a_5xx_is_retried_and_a_4xx_is_not(hook: Hook) -> None:
    hook.statuses = [503, 502]
    a = _alerter(hook, retries=3)
    try:
        a.observe(RUN, [_finding("a")])
        assert a.drain(10)
        assert len(hook.bodies) == 3 and len(hook.delivered()) == 1
        hook.statuses = [400]
        a.observe(RUN, [_finding("b")])
        assert a.drain(10)
    finally:
        a.close()
    assert len(hook.bodies) == 4  # the 400 was not sent again
    assert a.num_sent == 1 and a.num_failed == 1


def test_an_unreachable_webhook_gives_up_and_never_raises() -> None:
    a = Alerter(AlertConfig(webhook="http://127.0.0.1:1/none", retries=2), sleep=lambda s: None)
    try:
        assert a.observe(RUN, [_finding("a")]) == 1
        assert a.drain(30)
    finally:
        a.close()
    assert a.num_failed == 1 and a.num_sent == 0


def test_the_rate_limit_holds_back_and_counts(hook: Hook) -> None:
    now = [0.0]
    a = Alerter(AlertConfig(webhook=hook.url, per_hour=2), clock=lambda: now[0],
                sleep=lambda s: None)  # fmt: skip
    try:
        a.observe(RUN, [_finding(f"f{i}") for i in range(5)])
        assert a.drain(10)
        assert len(hook.delivered()) == 2 and a.num_held_back == 3
        now[0] += 1800.0  # half an hour: one token back
        a.observe(RUN, [_finding("late")])
        assert a.drain(10)
    finally:
        a.close()
    got = hook.delivered()
    assert len(got) == 3 and got[-1]["alert"]["finding_id"] == "late"
    assert got[-1]["alert"]["held_back"] == 3


def test_bad_settings_are_one_line() -> None:
    with pytest.raises(ConfigError, match="not an http"):
        AlertConfig(webhook="file:///etc/passwd")
    with pytest.raises(ConfigError, match="severity"):
        AlertConfig(command="true", min_severity="loud")
    assert not AlertConfig().enabled
