"""A tiny daemon stand-in for hook tests: a Unix socket that decodes frames into events."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from diag import schema
from diag.transport import codec
from diag.transport import framing as frames


class FrameSink(threading.Thread):
    """Accepts any number of connections on ``path`` and collects the decoded events in order."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = str(path)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen()
        self.server.settimeout(0.2)
        self.events: list[schema.Event] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._readers: list[threading.Thread] = []

    def run(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            reader = threading.Thread(target=self._read, args=(conn,), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _read(self, conn: socket.socket) -> None:
        decoder = frames.FrameDecoder()
        with conn:
            while data := conn.recv(1 << 16):
                for frame in decoder.feed(data):
                    _, events = codec.decode_batch(frame)
                    with self._lock:
                        self.events.extend(events)

    def peers_closed(self, timeout_s: float) -> bool:
        """Whether every connection accepted so far was closed by the hook (waits at most
        ``timeout_s``); False while one is still open."""
        deadline = time.monotonic() + timeout_s
        for reader in list(self._readers):
            reader.join(max(0.0, deadline - time.monotonic()))
        return not any(reader.is_alive() for reader in self._readers)

    def close(self) -> list[schema.Event]:
        """Stop accepting, wait for open connections to end, return every event received."""
        self._closing.set()
        self.join(2)
        for reader in self._readers:
            reader.join(2)
        self.server.close()
        with self._lock:
            return list(self.events)


def of_kind(events: list[schema.Event], kind: type[schema.Event]) -> list:  # type: ignore[type-arg]
    return [e for e in events if isinstance(e, kind)]
