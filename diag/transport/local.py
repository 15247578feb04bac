"""One-shot delivery of a few events to the node daemon's Unix socket (used by ``diag run``).

The hook keeps its own long-lived connection; this is for processes that have a handful of events
to report (the launcher's start and end of a run) and must not hang when no daemon listens.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence

from diag.errors import TransportError
from diag.schema import Event
from diag.transport import codec, framing


def send_events(
    sock_path: str, events: Sequence[Event], *, sender: str, timeout_s: float = 2.0
) -> None:
    """Send ``events`` as one frame; :class:`TransportError` (one line) if the daemon is away."""
    payload = framing.encode_frame(
        codec.encode_batch(events, sender=sender, sent_ns=time.time_ns())
    )
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(sock_path)
            sock.sendall(payload)
    except OSError as exc:
        raise TransportError(f"cannot reach the daemon at {sock_path}: {exc}") from None
