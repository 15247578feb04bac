"""Flight Recorder dumps without the GIL: torch's control-plane server on a private socket.

``_dump_fr_trace()`` builds and pickles the whole ring in one C++ call that holds the GIL
(~5-9 us per entry: 2-5 ms for a 512-entry ring), and any Python the training thread wants
meanwhile, a forward pass's next operator or the release of a tensor a backward has done with,
waits for all of it: the steady-state p99 of ``bench/overhead.py``. torch also serves the same
recorder as JSON from its control-plane ``WorkerServer`` (``fr_trace_json``): a C++ HTTP server
whose threads build the dump without ever taking the GIL. The hook thread starts one on a Unix
socket in a private directory (mode 0700: only this user reaches it), asks it for each harvest
and waits for the reply in ``recv`` (GIL released); the JSON is then decoded a few entries at a
time between the hook's pacing ticks (:func:`diag.flight_recorder.load_fr_json`).

Where the server cannot start (a torch without it or without the handler, a socket path too long,
a bind that fails) or a fetch fails, the hook falls back to ``_dump_fr_trace``; the caller decides.
The server runs torch's own threads (its HTTP pool: ``max(8, cores - 1)`` idle threads) and
logs its start and stop as c10d warnings on stderr.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from typing import Any

HANDLER = "fr_trace_json"
_REQUEST = (
    f"POST /handler/{HANDLER} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
    "Connection: close\r\n\r\n"
).encode()
_MAX_UNIX_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS
#: The largest reply read (a 20,000-entry ring is ~9 MB of JSON).
MAX_REPLY_BYTES = 64 << 20


class FrServerError(OSError):
    """The server did not answer with a dump (one line: what it said or what failed)."""


class FrServer:
    """A running control-plane server of this process (:meth:`start`), asked for Flight
    Recorder dumps (:meth:`fetch`) until :meth:`close`."""

    def __init__(self, path: str, directory: str, server: Any) -> None:
        self.path = path
        self._dir = directory
        self._server = server

    @classmethod
    def start(cls, torch: Any) -> FrServer | None:
        """Start the server, or ``None`` where this torch has no ``fr_trace_json`` handler or
        the server cannot start (the caller dumps with ``_dump_fr_trace`` then)."""
        c10d = getattr(getattr(torch, "_C", None), "_distributed_c10d", None)
        make = getattr(c10d, "_WorkerServer", None)
        names = getattr(c10d, "_get_handler_names", None)
        if make is None or names is None:
            return None
        try:
            if HANDLER not in names():
                return None
        except Exception:
            return None
        directory = ""
        for parent in (None, "/tmp"):
            with contextlib.suppress(OSError):
                directory = tempfile.mkdtemp(prefix="diag-fr-", dir=parent)  # mode 0700
                if len(os.path.join(directory, "fr.sock")) <= _MAX_UNIX_PATH:
                    break
                shutil.rmtree(directory, ignore_errors=True)
                directory = ""
        if not directory:
            return None
        path = os.path.join(directory, "fr.sock")
        try:
            server = make(path)
        except Exception:
            shutil.rmtree(directory, ignore_errors=True)
            return None
        return cls(path, directory, server)

    def fetch(self, timeout_s: float) -> bytes:
        """The recorder's JSON dump; :class:`FrServerError` (an ``OSError``) when the server
        does not answer within ``timeout_s`` or answers with anything but a dump."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(self.path)
            conn.sendall(_REQUEST)
            reply = _read_all(conn)
        return _body(reply)

    def close(self) -> None:
        """Stop the server and remove its socket's directory (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(Exception):
                server.shutdown()
        shutil.rmtree(self._dir, ignore_errors=True)


def _read_all(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes (``Connection: close``)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = conn.recv(1 << 18)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise FrServerError(f"Flight Recorder dump over {MAX_REPLY_BYTES >> 20} MiB")
        chunks.append(chunk)


def _body(reply: bytes) -> bytes:
    """The body of an HTTP/1.1 reply with status 200 and its whole ``Content-Length``."""
    head, sep, body = reply.partition(b"\r\n\r\n")
    if not sep:
        raise FrServerError(f"no HTTP reply from the control-plane server ({len(reply)} bytes)")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 2)
    if len(status) < 2 or status[1] != "200":
        why = body[:120].decode("utf-8", "replace").splitlines()[0] if body else ""
        raise FrServerError(f"control-plane server said {lines[0]!r}: {why}")
    for line in lines[1:]:
        name, _, value = line.partition(":")
        length = value.strip()
        if name.strip().lower() != "content-length" or not length.isdigit():
            continue
        if int(length) != len(body):
            raise FrServerError(f"dump cut short: {len(body)} of {length} bytes")
    return body
