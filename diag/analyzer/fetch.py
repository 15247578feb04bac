"""The closed loop's other half for collectives: fetch the raw rows a finding was judged without.

At fleet scale the node daemons ship one :class:`~diag.schema.CollectiveSummary` per rank, step
and group instead of every collective (:mod:`diag.daemon.collsum`) and keep the raw rows on the
node. A link finding judged from summaries (its evidence says so: ``from_summaries``) had per-step
sums and an arrival skew from the ranks' mean enqueue times; the exact per-call skews and
durations would confirm it or show a late rank instead. So after a live pass this asks the
daemons (:meth:`ControlBoard.request_fetch`, host ``"*"``) for the raw collectives of the
finding's group, over its onset and detection: ``before`` steps before the onset to ``after``
steps after its detection (at most ``max_steps``), for at most ``max_ranks`` ranks. The next pass
reads them: for a (group, step) whose every rank has raw rows, the link detector uses those and
not the summaries.

Budget: each (rank, step) is asked for once; at most ``max_per_pass`` requests per pass. A
request that fails is logged and retried by a later pass (nothing was marked asked).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from diag.diagnose.detectors.link import FROM_SUMMARIES
from diag.findings import Finding
from diag.proto import diag_pb2 as pb

log = logging.getLogger(__name__)

__all__ = ["FROM_SUMMARIES", "FetchConfig", "RawFetch", "from_summaries"]

#: (first_step, last_step, ranks) -> the request as sent.
Fetcher = Callable[[int, int, Sequence[int]], pb.CollectiveFetch]


@dataclass(frozen=True, slots=True)
class FetchConfig:
    before: int = 8
    after: int = 4
    max_steps: int = 32
    max_ranks: int = 1024
    max_per_pass: int = 4


def from_summaries(f: Finding) -> bool:
    """Whether ``f`` was judged, at least in part, from node summaries."""
    return any(e.metric == FROM_SUMMARIES and e.value for e in f.evidence)


@dataclass(frozen=True, slots=True)
class Want:
    first_step: int
    last_step: int
    ranks: tuple[int, ...]


class RawFetch:
    """Decides, per live pass, which raw collectives to ask the daemons for."""

    def __init__(self, fetch: Fetcher, cfg: FetchConfig | None = None) -> None:
        self._fetch = fetch
        self.cfg = cfg or FetchConfig()
        self._asked: set[tuple[int, int]] = set()  # (rank, step)
        self.requests: list[pb.CollectiveFetch] = []

    def wants(self, findings: Sequence[Finding]) -> list[Want]:
        """What a pass with ``findings`` would ask for now (nothing asked twice)."""
        out: list[Want] = []
        for f in findings:
            if not from_summaries(f) or f.severity == "info":
                continue
            ranks = sorted({*f.ranks, *(f.link.ranks if f.link else ())})[: self.cfg.max_ranks]
            onset = f.onset_step if f.onset_step is not None else f.detected_step
            if not ranks or onset is None:
                continue
            end = f.detected_step if f.detected_step is not None else onset
            first = max(onset - self.cfg.before, 0)
            last = min(max(end, onset) + self.cfg.after, first + self.cfg.max_steps - 1)
            new = [
                r for r in ranks if any((r, s) not in self._asked for s in range(first, last + 1))
            ]
            if new:
                out.append(Want(first, last, tuple(ranks)))
            if len(out) >= self.cfg.max_per_pass:
                break
        return out

    def step(self, findings: Sequence[Finding]) -> list[pb.CollectiveFetch]:
        """Ask for what :meth:`wants` says; the requests sent."""
        sent = []
        for w in self.wants(findings):
            try:
                req = self._fetch(w.first_step, w.last_step, w.ranks)
            except Exception as exc:  # the analyzer shutting down: a later pass asks again
                log.warning("fetching raw collectives failed: %s", exc)
                continue
            self._asked.update(
                (r, s) for r in w.ranks for s in range(w.first_step, w.last_step + 1)
            )
            sent.append(req)
        self.requests.extend(sent)
        return sent
