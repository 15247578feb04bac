"""The hook's side of the hook -> daemon stream: framed event batches over a Unix socket.

Used only from the hook thread. Events wait in a bounded backlog until written; while the daemon is
unreachable the sender retries every ``reconnect_interval_s`` and, when the backlog is full, drops
the oldest events and counts them (``num_dropped``). A write that fails or stalls past
``timeout_s`` closes the connection; the unsent batch stays in the backlog and is written again on
the next connection (the analyzer drops repeats by ``(source, seq)``).

The daemon may write control frames back on the same connection (length-prefixed serialized
``ControlMessage``s); :meth:`FrameSender.poll_control` reads whatever has arrived without blocking.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable

from diag.schema import Event
from diag.transport import codec
from diag.transport import framing as frames

log = logging.getLogger(__name__)

MAX_BATCH_EVENTS = 1000
MAX_CONTROL_BYTES = 1 << 20  # read at most this much control data per poll


class FrameSender:
    """Bounded backlog + reconnecting Unix stream socket. Not thread-safe: one owner thread."""

    def __init__(
        self,
        path: str,
        *,
        sender: str,
        max_backlog: int,
        reconnect_interval_s: float,
        timeout_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.sender = sender
        self.max_backlog = max(1, max_backlog)
        self.reconnect_interval_s = reconnect_interval_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._backlog: deque[Event] = deque()
        self._sock: socket.socket | None = None
        self._next_attempt = 0.0
        self.num_sent = 0
        self.num_dropped = 0
        self.last_error = ""
        self._warned = False
        self._control = frames.FrameDecoder()

    @property
    def backlog(self) -> int:
        return len(self._backlog)

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def add(self, events: Iterable[Event]) -> None:
        backlog = self._backlog
        for ev in events:
            if len(backlog) >= self.max_backlog:
                backlog.popleft()
                self.num_dropped += 1
            backlog.append(ev)

    def retry_now(self) -> None:
        """Allow the next :meth:`flush` to try connecting without waiting for the interval."""
        self._next_attempt = 0.0

    def _connect(self) -> bool:
        now = self._clock()
        if now < self._next_attempt:
            return False
        self._next_attempt = now + self.reconnect_interval_s
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout_s)
        try:
            sock.connect(self.path)
        except OSError as exc:
            sock.close()
            self._fail(f"daemon socket {self.path} unreachable: {exc}")
            return False
        self._sock = sock
        self._warned = False
        self._control = frames.FrameDecoder()  # a new connection starts a new control stream
        return True

    def _fail(self, message: str) -> None:
        self.last_error = message
        if not self._warned:
            log.warning("diag hook: %s (will retry)", message)
            self._warned = True

    def flush(self) -> None:
        """Write everything in the backlog that the daemon takes now; never raises."""
        if not self.path:
            self.num_dropped += len(self._backlog)
            self._backlog.clear()
            return
        if not self._backlog or (self._sock is None and not self._connect()):
            return
        while self._backlog and self._sock is not None:
            n = min(len(self._backlog), MAX_BATCH_EVENTS)
            batch = [self._backlog[i] for i in range(n)]
            try:
                payload = codec.encode_batch(batch, sender=self.sender, sent_ns=time.time_ns())
                self._sock.sendall(frames.encode_frame(payload))
            except OSError as exc:
                self.close()
                self._fail(f"write to {self.path} failed: {exc}")
                return
            for _ in range(n):
                self._backlog.popleft()
            self.num_sent += n

    def poll_control(self) -> list[bytes]:
        """The control frames the daemon wrote since the last poll; never blocks.

        A closed or failed connection is closed here (the next flush reconnects). A malformed frame
        header (:class:`~diag.errors.SchemaError`) desynchronizes the stream: the connection is
        closed and the error raised for the caller to count.
        """
        out: list[bytes] = []
        got = 0
        while self._sock is not None and got < MAX_CONTROL_BYTES:
            sock = self._sock
            try:
                readable, _, _ = select.select([sock], [], [], 0)
                if not readable:
                    break
                data = sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.close()
                self._fail(f"read from {self.path} failed: {exc}")
                break
            if not data:
                self.close()
                self._fail(f"daemon closed {self.path}")
                break
            got += len(data)
            try:
                out.extend(self._control.feed(data))
            except Exception:
                self.close()
                raise
        return out

    def drop_backlog(self) -> None:
        """Give up on everything unsent (at exit), counting it as dropped."""
        self.num_dropped += len(self._backlog)
        self._backlog.clear()

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
