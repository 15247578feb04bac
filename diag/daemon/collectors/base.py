"""What a daemon collector is, and how its events get their envelope.

A collector reads one data source (a GPU backend, ``/proc``) when the daemon calls
:meth:`Collector.collect`, every :attr:`Collector.interval_s` seconds on its own schedule. It fills
the payload, ``ts_ns`` and (for per-rank data) ``rank``/``local_rank``; the daemon stamps the rest
of the envelope (``host``, ``job_id``, ``source``, ``seq``) with :func:`stamp`, since only the
daemon numbers its events. A collector signals "my data source is absent" by raising
:class:`~diag.errors.CollectorUnavailable` (the daemon then disables it); any other exception is a
failed cycle (reported, skipped).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

from diag.schema import Event

E = TypeVar("E", bound=Event)

#: Envelope placeholders a collector puts in the events it builds; :func:`stamp` replaces them.
UNSTAMPED: dict[str, object] = {"host": "", "source": "", "seq": -1}


@runtime_checkable
class Collector(Protocol):
    """One periodic data source of the daemon."""

    name: ClassVar[str]
    interval_s: float  # seconds between two collect() calls

    def collect(self, now_ns: int) -> Iterable[Event]:
        """One cycle; ``now_ns`` (wall-clock ns since the epoch) becomes the events' ``ts_ns``."""
        ...

    def close(self) -> None:
        """Release the data source (called once, at daemon shutdown)."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class RankRef:
    """A rank process a collector was told about (:meth:`RankAware.track`)."""

    rank: int
    local_rank: int


@runtime_checkable
class RankAware(Protocol):
    """A collector that samples rank processes, told about them as ``RankInfo`` events arrive."""

    def track(self, pid: int, rank: int, local_rank: int) -> None: ...


@runtime_checkable
class HangAware(Protocol):
    """A collector told when a local rank reports a hang (a ``HangReport`` passing through)."""

    def on_hang(self, rank: int) -> None: ...


def stamp(event: E, *, host: str, job_id: str, source: str, seq: int) -> E:
    """``event`` with the daemon's envelope: its host, job, source name and next sequence number."""
    return dataclasses.replace(event, host=host, job_id=job_id, source=source, seq=seq)
