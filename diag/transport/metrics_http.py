"""Serve a Prometheus registry on ``http://ADDR:PORT/metrics`` (``prometheus-client``'s own server).

The node daemon (:mod:`diag.daemon.metrics`) and the analyzer (:mod:`diag.analyzer.metrics`) each
serve their own registry this way, off by default, on loopback unless told otherwise. The server
runs on a daemon thread of its own; a scrape never touches the training job (the daemon and the
analyzer are separate processes) and reads only what the registry's collectors keep in memory.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from diag.errors import TransportError

#: the longest label value served (label values come from events: bounded)
MAX_LABEL = 128
#: HookHealth drop counters -> the ``reason`` label (the node's and the job's metrics alike)
DROP_REASONS = (
    ("queue", "num_queue_dropped"),
    ("fr", "num_fr_dropped"),
    ("undelivered", "num_undelivered"),
    ("unencodable", "num_unencodable"),
    ("oversize", "num_oversize"),
)


def label(value: object) -> str:
    """A label value: the text, at most :data:`MAX_LABEL` characters."""
    return str(value)[:MAX_LABEL]


@dataclass(slots=True)
class MetricsServer:
    """A started ``/metrics`` endpoint: its bound address and port; :meth:`close` stops it."""

    addr: str
    port: int
    _httpd: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)


def serve_metrics(registry: Any, addr: str, port: int) -> MetricsServer:
    """Start serving ``registry`` on ``addr:port`` (port 0: one the OS picks);
    :class:`TransportError` (one line) when the address cannot be bound."""
    from prometheus_client import start_http_server

    if not 0 <= port <= 65535:
        raise TransportError(f"metrics port {port} is not a port (0-65535)")
    try:
        httpd, thread = start_http_server(port, addr=addr, registry=registry)
    except (OSError, ValueError) as exc:
        raise TransportError(f"cannot serve metrics on {addr}:{port}: {exc}") from None
    thread.name = "diag-metrics"
    return MetricsServer(addr, int(httpd.server_port), httpd, thread)
