"""The daemon's Unix socket server for hook frames.

Hooks (and ``diag run``'s launcher) connect to ``listen_sock`` and write length-prefixed
``EventBatch`` frames. One thread multiplexes every connection with a selector. A malformed frame
or batch closes that connection only (one warning line, counted); events already received from it,
and every other connection, are unaffected.

The other direction carries control frames (length-prefixed ``ControlMessage``): whatever
:meth:`HookListener.broadcast` is given, and on connect what ``on_connect`` returns. Every write is
done by the listener thread, non-blocking, from a per-connection outbox of at most
``max_outbox_bytes``: a frame that does not fit in a connection's outbox is skipped for that
connection (counted), and a connection whose peer stopped reading or went away only loses its own
control frames. So a hook that never reads cannot stall the daemon or the other hooks.

Given a :class:`~diag.daemon.hook_watch.HookWatch`, the listener tells it each connection's latest
``HookHealth`` and when a connection closes, so a hook that stops reporting is noticed.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from diag import schema
from diag.daemon.hook_watch import HookWatch
from diag.errors import ConfigError, SchemaError
from diag.proto import diag_pb2 as pb
from diag.transport import codec, framing

log = logging.getLogger(__name__)

#: Called from the listener thread with each decoded batch: its proto events and their dataclasses.
BatchHandler = Callable[[list[pb.Event], list[schema.Event]], None]
#: Called from the listener thread for each new connection: the frames it is sent first.
ConnectHandler = Callable[[], Sequence[bytes]]
_MAX_SUN_PATH = 107
_RECV_BYTES = 256 * 1024
_SEND_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)  # EPIPE as an error, never SIGPIPE


class HookListener:
    """Accepts hook connections on a Unix stream socket; hands decoded batches to ``on_batch``;
    writes control frames back (:meth:`broadcast`, ``on_connect``)."""

    def __init__(
        self,
        path: str | Path,
        on_batch: BatchHandler,
        on_connect: ConnectHandler | None = None,
        *,
        max_outbox_bytes: int = 64 * 1024,
        watch: HookWatch | None = None,
    ) -> None:
        self.path = Path(path)
        self._watch = watch
        self._on_batch = on_batch
        self._on_connect = on_connect
        self._max_outbox = max_outbox_bytes
        self._selector = selectors.DefaultSelector()
        self._decoders: dict[socket.socket, framing.FrameDecoder] = {}
        # Control frames not yet written, per open connection; None once writing to it failed.
        self._outbox: dict[socket.socket, bytearray | None] = {}
        self._out_lock = threading.Lock()
        self._num_pending_out = 0  # connections with a non-empty outbox (read without the lock)
        self._accepting = True
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.num_connections = 0  # connections accepted so far
        self.num_batches = 0  # well-formed batches received
        self.num_events = 0
        self.num_malformed = 0  # connections closed for a malformed frame or batch
        self.num_control_frames = 0  # control frames queued to a connection (broadcast + connect)
        self.num_control_skipped = 0  # frames not queued: outbox full or the connection broken
        self._server = self._bind()
        self._inode = os.stat(self.path).st_ino
        self._selector.register(self._server, selectors.EVENT_READ)

    def _bind(self) -> socket.socket:
        """Listen on a private temporary name, then rename it into place.

        The rename is atomic: the socket appears with mode 600 and already listening, and a stale
        socket file from a dead daemon is replaced. So "the path exists" means "ready".
        """
        if len(os.fsencode(self.path)) > _MAX_SUN_PATH:
            raise ConfigError(
                f"listen socket path is longer than {_MAX_SUN_PATH} bytes: {self.path}"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{os.getpid()}.sock.tmp")
        if len(os.fsencode(tmp)) > _MAX_SUN_PATH:
            tmp = self.path  # no room for a temporary name: bind in place
            self.path.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(os.fspath(tmp))
            os.chmod(tmp, 0o600)
            server.listen(128)
            if tmp != self.path:
                os.replace(tmp, self.path)
        except OSError as exc:
            server.close()
            raise ConfigError(f"cannot listen on {self.path}: {exc}") from None
        server.setblocking(False)
        return server

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="diag-listener", daemon=True)
        self._thread.start()

    @property
    def num_open(self) -> int:
        """Hook connections open now."""
        return len(self._decoders)

    def broadcast(self, frame: bytes) -> int:
        """Queue ``frame`` (already framed) to every open connection; thread-safe, never blocks.
        Returns the number of connections it was queued to; the listener thread writes it
        within ~50 ms to connections that read."""
        queued = 0
        with self._out_lock:
            for box in self._outbox.values():
                if self._queue(box, frame):
                    queued += 1
        return queued

    def _queue(self, box: bytearray | None, frame: bytes) -> bool:
        """Append ``frame`` to one outbox (caller holds the lock); whole frames only, so the
        stream stays frame-aligned. A frame larger than the limit still goes to an empty box."""
        if box is None or (box and len(box) + len(frame) > self._max_outbox):
            self.num_control_skipped += 1
            return False
        if not box:
            self._num_pending_out += 1
        box += frame
        self.num_control_frames += 1
        return True

    def _write_outboxes(self) -> None:
        """Write what each outbox holds, as much as each socket takes now (listener thread)."""
        if not self._num_pending_out:
            return
        with self._out_lock:
            for conn, box in self._outbox.items():
                if not box:
                    continue
                try:
                    sent = conn.send(box, _SEND_FLAGS)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    # The peer stopped reading for good (closed, reset): keep reading what it sent.
                    log.debug("cannot write control frames to a hook connection: %s", exc)
                    self.num_control_skipped += 1
                    self._outbox[conn] = None
                    self._num_pending_out -= 1
                    continue
                del box[:sent]
                if not box:
                    self._num_pending_out -= 1

    def _loop(self) -> None:
        while not self._stopping.is_set():
            if not self._accepting and self._server.fileno() >= 0:
                self._close_server()
            self._write_outboxes()
            for key, _ in self._selector.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._server:
                    self._accept()
                else:
                    self._read(sock)
        for sock in list(self._decoders):  # what is already buffered still counts
            while self._read(sock):
                pass
            if sock in self._decoders:
                self._drop(sock)
        if self._server.fileno() >= 0:
            self._close_server()
        self._selector.close()

    def _accept(self) -> None:
        try:
            conn, _ = self._server.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)
        self._decoders[conn] = framing.FrameDecoder()
        self._selector.register(conn, selectors.EVENT_READ)
        # The outbox exists before the greeting is prepared: a request broadcast meanwhile reaches
        # this connection too (at least once: the hook drops the duplicate), never zero times.
        with self._out_lock:
            self._outbox[conn] = bytearray()
        self.num_connections += 1
        greeting: Sequence[bytes] = ()
        if self._on_connect is not None:
            try:
                greeting = self._on_connect()
            except Exception:  # the daemon's bug must not cost the connection its events
                log.exception("preparing the control frames of a new hook connection failed")
        with self._out_lock:
            box = self._outbox.get(conn)
            for frame in greeting:
                self._queue(box, frame)

    def _read(self, conn: socket.socket) -> bool:
        """Read what ``conn`` has; True if it gave data and is still open."""
        try:
            data = conn.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            log.warning("hook connection error: %s; closing it", exc)
            self._drop(conn)
            return False
        decoder = self._decoders[conn]
        if not data:
            if decoder.pending_bytes:
                log.warning(
                    "hook connection closed in the middle of a frame (%d bytes lost)",
                    decoder.pending_bytes,
                )
            self._drop(conn)
            return False
        try:
            for frame in decoder.feed(data):
                batch, events = codec.decode_batch(frame)
                if self._watch is not None:
                    for ev in events:
                        if isinstance(ev, schema.HookHealth):
                            self._watch.health(conn, ev)
                self.num_batches += 1
                self.num_events += len(events)
                try:
                    self._on_batch(list(batch.events), events)
                except Exception:  # the daemon's bug must not kill every hook connection
                    log.exception("handling a hook batch failed; it is lost")
        except SchemaError as exc:
            self.num_malformed += 1
            log.warning("closing a hook connection that sent a malformed frame: %s", exc)
            self._drop(conn)
            return False
        return True

    def _drop(self, conn: socket.socket) -> None:
        self._selector.unregister(conn)
        del self._decoders[conn]
        if self._watch is not None:
            self._watch.closed(conn)
        with self._out_lock:
            if self._outbox.pop(conn, None):
                self._num_pending_out -= 1
        conn.close()

    def _close_server(self) -> None:
        self._selector.unregister(self._server)
        self._server.close()
        try:
            if os.stat(self.path).st_ino == self._inode:  # still ours, not a newer daemon's
                self.path.unlink()
        except FileNotFoundError:
            pass

    def stop(self, grace_s: float = 0.5) -> None:
        """Stop accepting, read what open connections send for up to ``grace_s``, close all."""
        self._accepting = False
        deadline = time.monotonic() + grace_s
        while self._thread is not None and self.num_open and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        elif self._server.fileno() >= 0:
            self._close_server()
            self._selector.close()
