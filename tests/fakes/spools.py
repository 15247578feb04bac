"""Builders for the daemon's spool tests: numbered payloads, and a spool drained in order."""

from __future__ import annotations

from diag.daemon.spool import Spool


def drain(spool: Spool) -> list[bytes]:
    """Every pending payload, oldest first, each acknowledged."""
    out = []
    while (rec := spool.peek()) is not None:
        out.append(rec.payload)
        spool.ack(rec)
    return out


def payload(i: int, size: int = 100) -> bytes:
    """Batch ``i``: ``size`` bytes that name it."""
    return f"batch-{i:05d}-".encode().ljust(size, b"x")
