"""Alerts: each new or escalated finding goes to a webhook and/or a command, off the triage path.

:meth:`Alerter.observe` is called with every triage result (live passes and the run's final one).
A finding is alerted when its severity is at least ``min_severity`` and it is **new** (an id not
alerted before) or **escalated** (its severity rose since it was last alerted); a finding that
stays as it was is never sent twice, one that fades and comes back at the same severity neither.

Each alert is one JSON object: the triage JSON (``run``, ``findings``: as ``diag triage --json``
prints, all current findings, the alerted one first) plus ``text``, one line usable as is by
Slack-style incoming webhooks ("diag: critical link finding in job X: ..."), and ``alert``
(``finding_id``, ``reason``: ``new`` or ``escalated``, ``held_back``: alerts the rate limit held
back since the last one sent). Delivery:

- ``webhook``: HTTP POST, ``Content-Type: application/json``; a connection error, a timeout or a
  5xx/429 answer is retried (``retries`` times, backoff doubling from ``backoff_s``); another 4xx
  is not (the request is wrong, sending it again will not help). Redirects are not followed.
- ``command``: ``sh -c CMD`` with the JSON on stdin and the line in ``DIAG_ALERT_TEXT``; a
  non-zero exit or a timeout is retried as a 5xx is.

A worker thread does the sending; ``observe`` only enqueues (a bounded queue: beyond
``max_queue`` alerts the oldest is dropped and counted), so a slow or dead endpoint never holds up
ingest or triage. Rate limit: at most ``per_hour`` alerts an hour (a token bucket, full at
start); an alert beyond it is held back and counted, and the next one sent says how many were.
Failures are logged once per kind, never raised.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from diag.errors import ConfigError
from diag.findings import SEVERITIES, Finding, factor_text

log = logging.getLogger(__name__)

RETRYABLE_HTTP = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True, kw_only=True)
class AlertConfig:
    """Where alerts go and how often (see the module docstring)."""

    webhook: str = ""
    command: str = ""
    min_severity: str = "warning"
    per_hour: int = 30
    retries: int = 3
    backoff_s: float = 1.0
    timeout_s: float = 10.0
    max_queue: int = 256

    def __post_init__(self) -> None:
        if self.min_severity not in SEVERITIES:
            raise ConfigError(
                f"alert severity {self.min_severity!r} is not one of {', '.join(SEVERITIES)}"
            )
        if self.webhook and not self.webhook.startswith(("http://", "https://")):
            raise ConfigError(f"alert webhook {self.webhook[:200]!r} is not an http(s) URL")
        if self.per_hour < 1:
            raise ConfigError(f"alerts per hour must be at least 1 (got {self.per_hour})")

    @property
    def enabled(self) -> bool:
        return bool(self.webhook or self.command)


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert to deliver: its JSON payload and its one line."""

    payload: dict[str, Any]
    text: str


def alert_text(f: Finding, job: str) -> str:
    """The one line of an alert: severity, cause, job, summary, slowdown and confidence."""
    parts = [f"diag: {f.severity} {f.cause} finding in job {job or '?'}: {f.summary}"]
    if f.slowdown is not None and f.slowdown > 1.0:
        parts.append(f"({factor_text(f.slowdown)})")
    parts.append(f"[confidence {f.confidence:.2f}]")
    return " ".join(" ".join(parts).split())[:1000]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Alerter:
    """Decides which findings to alert on and delivers them on a worker thread."""

    def __init__(
        self,
        cfg: AlertConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        self.cfg = cfg
        self._clock = clock
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._cond = threading.Condition()
        self._queue: collections.deque[Alert] = collections.deque()
        self._alerted: dict[str, int] = {}  # finding id -> severity index last alerted
        self._tokens = float(cfg.per_hour)
        self._refilled = clock()
        self._logged: set[str] = set()
        self.num_sent = 0
        self.num_failed = 0
        self.num_held_back = 0  # rate-limited, not sent
        self.num_queue_dropped = 0
        self._held_since_sent = 0
        self._busy = False
        self._opener = urllib.request.build_opener(_NoRedirect)
        self._thread = threading.Thread(target=self._run, name="diag-alerts", daemon=True)
        self._thread.start()

    # -- deciding ---------------------------------------------------------------------------------

    def observe(self, run: dict[str, Any], findings: Sequence[Finding]) -> int:
        """Enqueue an alert for each new or escalated finding at or above the severity floor;
        the number enqueued. Never raises, never blocks on delivery."""
        floor = SEVERITIES.index(self.cfg.min_severity)
        triage = [f.to_json() for f in findings]
        job = str(run.get("id") or "")
        new = 0
        for i, f in enumerate(findings):
            level = SEVERITIES.index(f.severity)
            if level < floor:
                continue
            before = self._alerted.get(f.id)
            if before is not None and level <= before:
                continue
            self._alerted[f.id] = level
            reason = "new" if before is None else "escalated"
            text = alert_text(f, job)
            payload: dict[str, Any] = {
                "run": run,
                "findings": [triage[i], *triage[:i], *triage[i + 1 :]],
                "text": text,
                "alert": {"finding_id": f.id, "reason": reason, "held_back": 0},
            }
            self._enqueue(Alert(payload, text))
            new += 1
        return new

    def _enqueue(self, alert: Alert) -> None:
        with self._cond:
            if len(self._queue) >= self.cfg.max_queue:
                self._queue.popleft()
                self.num_queue_dropped += 1
            self._queue.append(alert)
            self._cond.notify()

    # -- delivering -------------------------------------------------------------------------------

    def _take_token(self) -> bool:
        now = self._clock()
        rate = self.cfg.per_hour / 3600.0
        self._tokens = min(float(self.cfg.per_hour), self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait()
                if not self._queue:
                    return
                alert = self._queue.popleft()
                self._busy = True
            try:
                if not self._take_token():
                    self.num_held_back += 1
                    self._held_since_sent += 1
                    self._log_once("rate", f"alert rate limit ({self.cfg.per_hour}/hour) reached; "
                                   "alerts are held back and counted")  # fmt: skip
                    continue
                alert.payload["alert"]["held_back"] = self._held_since_sent
                if self._deliver(alert):
                    self.num_sent += 1
                    self._held_since_sent = 0
                else:
                    self.num_failed += 1
            except Exception as exc:  # the alert thread never dies of one alert
                self.num_failed += 1
                self._log_once("bug", f"alert failed: {type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _deliver(self, alert: Alert) -> bool:
        body = json.dumps(alert.payload, allow_nan=False).encode()
        ok = True
        if self.cfg.webhook:
            ok &= self._retrying(lambda: self._post(body), "webhook")
        if self.cfg.command:
            ok &= self._retrying(lambda: self._command(body, alert.text), "command")
        return ok

    def _retrying(self, attempt: Callable[[], str | None], what: str) -> bool:
        """``attempt`` returns None on success, "retry: why" or "fail: why"."""
        delay = self.cfg.backoff_s
        for i in range(self.cfg.retries + 1):
            outcome = attempt()
            if outcome is None:
                return True
            kind, _, why = outcome.partition(": ")
            if kind != "retry" or i == self.cfg.retries or (self._stop.is_set() and i > 0):
                self._log_once(f"{what}:{why}", f"alert {what} failed: {why}")
                return False
            self._sleep(delay)
            delay *= 2
        return False

    def _post(self, body: bytes) -> str | None:
        req = urllib.request.Request(
            self.cfg.webhook,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "diag-alerts"},
        )
        try:
            with self._opener.open(req, timeout=self.cfg.timeout_s) as resp:
                resp.read(65536)
            return None
        except urllib.error.HTTPError as exc:
            kind = "retry" if exc.code in RETRYABLE_HTTP else "fail"
            return f"{kind}: HTTP {exc.code} from {self.cfg.webhook[:200]}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return f"retry: {self.cfg.webhook[:200]}: {reason}"

    def _command(self, body: bytes, text: str) -> str | None:
        env = {**os.environ, "DIAG_ALERT_TEXT": text}
        try:
            res = subprocess.run(
                ["/bin/sh", "-c", self.cfg.command],
                input=body,
                env=env,
                capture_output=True,
                timeout=self.cfg.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"retry: command timed out after {self.cfg.timeout_s:g} s"
        except OSError as exc:
            return f"fail: command could not start: {exc}"
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip().splitlines()
            return f"retry: command exited {res.returncode}{': ' + err[-1][:200] if err else ''}"
        return None

    def _log_once(self, key: str, message: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning("%s", message)

    # -- lifecycle --------------------------------------------------------------------------------

    def drain(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until every queued alert was handled; False if some remain."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (up to ``timeout_s``), then stop the worker."""
        self.drain(timeout_s)
        with self._cond:
            self._stop.set()
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join(timeout_s)
