"""The link probe round: which of a slow group's hosts has the slow link, measured directly.

The closed loop (:mod:`diag.analyzer.autocapture`) asks for a round when a link finding spans
several hosts and the ranks' own connections did not single one out
(:mod:`diag.diagnose.detectors.link_hosts`). :func:`plan` turns up to ``max_hosts`` hosts and
the addresses their ranks' connections use into ``tcp_pair`` probe requests
(:mod:`probes.tcp_pair`), one sink and one source per host pair, every pair once: a round-robin
schedule (the circle method), so each host is in at most one pair per round and ``n`` hosts take
``n - 1`` rounds (``n`` when odd).

The requests go out together, in round order. Each node daemon runs its probes one at a time in
the order it received them (:mod:`diag.daemon.probe_runner`), so every daemon goes through the
rounds in order and a pair runs once both its hosts are done with their earlier rounds (a source
retries its connection while the sink's daemon finishes the previous one; no cycle can form, as
rounds only go forward). A host's probes (at most four) fit the daemon's queue for up to five
hosts. Each pair gets its own port (``port_base + i``); the sink listens on the address its
ranks' connections use, so the probe crosses the same link as the job's traffic. Small and
low-priority: each direction sends ``bursts`` bursts of ``size_bytes`` zeros (none started after
``duration_s``), at nice 19 (the daemon's probe runner).

The detector reads the results (:mod:`diag.diagnose.detectors.link_probe`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from diag.errors import ConfigError
from probes.tcp_pair import TcpPairParams

PROBE = "tcp_pair"


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkProbeConfig:
    """The round's size (module docstring)."""

    max_hosts: int = 5  # hosts probed in one round (their probes fit a daemon's queue)
    size_bytes: int = 1 << 20  # bytes of one burst, each way per pair
    duration_s: float = 0.25  # no new burst after this long, each way per pair
    bursts: int = 3  # timed bursts each way; the best counts (probes.tcp_pair)
    timeout_s: float = 30.0  # per probe, waiting for the other end included
    port_low: int = 20000  # each round's ports: port_base + pair index, the base drawn in
    port_high: int = 28000  # [port_low, port_high) (below Linux's ephemeral range)

    def __post_init__(self) -> None:
        if not 3 <= self.max_hosts <= 5:
            raise ConfigError("a link probe round takes 3 to 5 hosts (a daemon queues four)")
        if not 1024 <= self.port_low < self.port_high <= 65535 - 16:
            raise ConfigError("link probe ports must lie in [1024, 65519]")


@dataclass(frozen=True, slots=True)
class ProbeOrder:
    """One probe request to send: ``host``'s daemon runs ``tcp_pair`` with ``params_json``."""

    host: str
    params_json: str


def schedule(hosts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint ``(sink, source)`` host pairs covering every pair once (the circle
    method; with an odd count one host sits each round out). Sinks alternate so that no host
    only listens."""
    ring: list[str | None] = list(hosts)
    if len(ring) % 2:
        ring.append(None)
    n = len(ring)
    rounds: list[list[tuple[str, str]]] = []
    for k in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a is None or b is None:
                continue
            pairs.append((a, b) if (k + i) % 2 == 0 else (b, a))
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


def plan(
    hosts: Sequence[str],
    addresses: Mapping[str, str],
    cfg: LinkProbeConfig | None = None,
    rng: random.Random | None = None,
) -> list[ProbeOrder]:
    """The round's requests, in the order they must be sent (module docstring). ``addresses``:
    host -> the address its ranks' connections use; every host needs one."""
    cfg = cfg or LinkProbeConfig()
    hosts = list(hosts)[: cfg.max_hosts]
    missing = [h for h in hosts if h not in addresses]
    if len(hosts) < 3 or missing:
        raise ConfigError(
            f"a link probe round needs three hosts or more with known addresses "
            f"(hosts {', '.join(hosts)}; no address: {', '.join(missing) or 'none'})"
        )
    base = (rng or random.Random()).randrange(cfg.port_low, cfg.port_high)
    out: list[ProbeOrder] = []
    index = 0
    for pairs in schedule(hosts):
        for sink, source in pairs:
            port = base + index
            index += 1
            for host, role, peer in ((sink, "sink", source), (source, "source", sink)):
                params = TcpPairParams(
                    role=role,
                    peer=addresses[peer],
                    bind=addresses[host],
                    port=port,
                    size_bytes=cfg.size_bytes,
                    duration_s=cfg.duration_s,
                    bursts=cfg.bursts,
                    timeout_s=cfg.timeout_s,
                )
                out.append(ProbeOrder(host, json.dumps(_fields(params))))
    return out


def _fields(p: TcpPairParams) -> dict[str, object]:
    return {
        "role": p.role, "peer": p.peer, "bind": p.bind, "port": p.port,
        "size_bytes": p.size_bytes, "duration_s": p.duration_s, "bursts": p.bursts,
        "timeout_s": p.timeout_s,
    }  # fmt: skip
