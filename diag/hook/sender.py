"""The hook's side of the hook -> daemon stream: framed event batches over a Unix socket.

Used only from the hook thread. Events wait in a bounded backlog until written; while the daemon is
unreachable the sender retries every ``reconnect_interval_s`` and, when the backlog is full, drops
the oldest events and counts them. A write that fails or stalls past ``timeout_s`` closes the
connection; the unsent batch goes back to the front of the backlog and is written again on the
next connection (the analyzer drops repeats by ``(source, seq)``).

Events are encoded here, in the hook thread, batch by batch. Events of one kind made together
(:class:`~diag.transport.codec.EventRows`: a harvest's collectives) go as one column block
(:func:`~diag.transport.codec.rows_to_block`), no dataclass or message per event: ~1.4 us an
event here against ~7 us made, encoded and batched one by one. An event that cannot be encoded
(a value its proto field cannot hold: a producer's bug) is dropped and counted; a block that
cannot be is encoded event by event instead, so only its bad events are lost; text that is not
valid Unicode never is one (:func:`~diag.transport.codec.escape_text`). A batch whose frame would
exceed ``max_frame_bytes`` is halved until each part fits (a block too, row by row); one event
too large for a frame on its own is dropped and counted. So no event can stop the stream: every
later one is still sent. The bound on the backlog counts events, a block's rows each.

What was dropped, by reason (:class:`DropCounts`, reported in ``HookHealth``): ``undelivered``
(the backlog overflowed while the daemon was unreachable or slow, or was left unsent at exit),
``unencodable``, ``oversize``.

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
from dataclasses import dataclass
from typing import TypeAlias

from diag.proto import diag_pb2 as pb
from diag.schema import Event
from diag.transport import codec
from diag.transport import framing as frames
from diag.transport.codec import EventRows

log = logging.getLogger(__name__)

MAX_BATCH_EVENTS = 1000
MAX_CONTROL_BYTES = 1 << 20  # read at most this much control data per poll
_Msg: TypeAlias = pb.Event | pb.EventColumns  # an event's message, or a block's


@dataclass(slots=True, eq=False)
class DropCounts:
    """Events the sender dropped, by reason (written by the hook thread only)."""

    undelivered: int = 0  # backlog full (daemon unreachable or slow), or unsent at exit
    unencodable: int = 0  # a value its proto field cannot hold
    oversize: int = 0  # larger than a frame on its own

    @property
    def total(self) -> int:
        return self.undelivered + self.unencodable + self.oversize


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
        max_frame_bytes: int = frames.MAX_FRAME_BYTES,
        tick: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.sender = sender
        self.max_backlog = max(1, max_backlog)
        self.reconnect_interval_s = reconnect_interval_s
        self.timeout_s = timeout_s
        self.max_frame_bytes = min(max_frame_bytes, frames.MAX_FRAME_BYTES)
        self._clock = clock
        self._tick = tick or (lambda: None)  # between events encoded (diag.hook.gil_share)
        self._backlog: deque[Event | EventRows] = deque()
        self._num_backlog = 0  # events in the backlog (a block's rows each)
        self._sock: socket.socket | None = None
        self._next_attempt = 0.0
        self.num_sent = 0
        self.dropped = DropCounts()
        self.last_error = ""
        self._warned = False
        self._warned_drops: set[str] = set()
        self._control = frames.FrameDecoder()

    @property
    def num_dropped(self) -> int:
        """Events dropped so far, every reason (:attr:`dropped` has them by reason)."""
        return self.dropped.total

    @property
    def backlog(self) -> int:
        """Events waiting to be written (a block's rows each)."""
        return self._num_backlog

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def add(self, events: Iterable[Event]) -> None:
        backlog = self._backlog
        for ev in events:
            backlog.append(ev)
            self._num_backlog += 1
        self._bound()

    def add_rows(self, rows: EventRows) -> None:
        """Events of one kind made together: sent as one column block."""
        if len(rows):
            self._backlog.append(rows)
            self._num_backlog += len(rows)
            self._bound()

    def _bound(self) -> None:
        """Drop the oldest events beyond ``max_backlog`` (counted)."""
        backlog = self._backlog
        while self._num_backlog > self.max_backlog:
            excess = self._num_backlog - self.max_backlog
            oldest = backlog[0]
            if isinstance(oldest, EventRows) and len(oldest) > excess:
                backlog[0] = oldest.split(excess)[1]
                lost = excess
            else:
                backlog.popleft()
                lost = _size(oldest)
            self._num_backlog -= lost
            self.dropped.undelivered += lost

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
            self.drop_backlog()
            return
        if not self._backlog or (self._sock is None and not self._connect()):
            return
        while self._backlog and self._sock is not None:
            encoded = self._encode(self._take(MAX_BATCH_EVENTS))
            try:
                self._write(encoded)
            except Exception as exc:  # a bug of ours: lose this batch (counted), not the thread
                for item, _ in encoded:
                    self._drop("unencodable", item, f"{type(exc).__name__}: {exc}")
                return

    def _take(self, most: int) -> list[Event | EventRows]:
        """The oldest items of the backlog holding at most ``most`` events (a block split)."""
        out: list[Event | EventRows] = []
        backlog = self._backlog
        room = most
        while backlog and room > 0:
            item = backlog.popleft()
            if isinstance(item, EventRows) and len(item) > room:
                item, rest = item.split(room)
                backlog.appendleft(rest)
            out.append(item)
            room -= _size(item)
        self._num_backlog -= most - room
        return out

    def _write(self, encoded: list[tuple[Event | EventRows, _Msg]]) -> None:
        """Send ``encoded`` in as many frames as it takes, removing what was sent; on a failed
        write put the rest back at the front of the backlog and close the connection."""
        while encoded and self._sock is not None:
            payload, k = self._fit(encoded)
            if k == 0:  # the first item alone is larger than a frame
                first = encoded[0][0]
                if isinstance(first, EventRows) and len(first) > 1:  # halve the block
                    encoded[:1] = self._encode(list(first.split(len(first) // 2)))
                else:
                    self._drop("oversize", encoded.pop(0)[0], f"{len(payload)} bytes encoded")
                continue
            try:
                self._sock.sendall(frames.encode_frame(payload))
            except OSError as exc:
                self._backlog.extendleft(item for item, _ in reversed(encoded))
                self._num_backlog += sum(_size(item) for item, _ in encoded)
                encoded.clear()
                self.close()
                self._fail(f"write to {self.path} failed: {exc}")
                return
            self.num_sent += sum(_size(item) for item, _ in encoded[:k])
            del encoded[:k]

    def _encode(self, batch: list[Event | EventRows]) -> list[tuple[Event | EventRows, _Msg]]:
        """The items of ``batch`` that encode, with their messages; the others dropped. A block
        that does not encode as one goes event by event (only its bad events are lost)."""
        out: list[tuple[Event | EventRows, _Msg]] = []
        tick = self._tick
        for item in batch:
            tick()
            if isinstance(item, EventRows):
                try:
                    out.append((item, codec.rows_to_block(item, tick)))
                    continue
                except Exception:  # text to escape, a bad value: one by one
                    try:
                        events = item.events()
                    except Exception as exc:  # not even events: the block is lost
                        self._drop("unencodable", item, f"{type(exc).__name__}: {exc}")
                        continue
                out.extend(self._encode(list(events)))
                continue
            try:
                out.append((item, codec.event_to_proto(item)))
            except Exception as exc:  # a producer's bug: lose this event, never the stream
                self._drop("unencodable", item, f"{type(exc).__name__}: {exc}")
        return out

    def _fit(self, encoded: list[tuple[Event | EventRows, _Msg]]) -> tuple[bytes, int]:
        """The serialized batch of the longest first half, quarter, ... of ``encoded`` that fits
        in a frame, and how many items it holds (0: not even the first one fits)."""
        k = len(encoded)
        while True:
            part = encoded[:k]
            batch = codec.protos_to_batch(
                (m for _, m in part if isinstance(m, pb.Event)),
                sender=self.sender,
                sent_ns=time.time_ns(),
            )
            batch.columns.extend(m for _, m in part if isinstance(m, pb.EventColumns))
            payload = batch.SerializeToString()
            if len(payload) <= self.max_frame_bytes:
                return payload, k
            if k == 1:
                return payload, 0
            k //= 2

    def _drop(self, reason: str, item: Event | EventRows, detail: str) -> None:
        """Count the events of ``item`` lost for ``reason`` (a :class:`DropCounts` field); the
        first of each reason is logged (the hook never prints)."""
        n = _size(item)
        setattr(self.dropped, reason, getattr(self.dropped, reason) + n)
        kind = item.kind if isinstance(item, EventRows) else type(item).kind
        what = f"{n} {kind} events" if n != 1 else f"a {kind} event"
        message = f"dropped {what} ({reason}: {detail})"
        self.last_error = message.splitlines()[0][:300]
        if reason not in self._warned_drops:
            self._warned_drops.add(reason)
            log.warning("diag hook: %s", self.last_error)

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
        self.dropped.undelivered += self._num_backlog
        self._backlog.clear()
        self._num_backlog = 0

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None


def _size(item: Event | EventRows) -> int:
    """How many events ``item`` holds."""
    return len(item) if isinstance(item, EventRows) else 1
