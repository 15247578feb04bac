"""The link probe round's plan: every host pair once, no host in two pairs of a round, requests
the daemons accept, in an order under which every pair meets."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from diag.analyzer.linkprobe import LinkProbeConfig, plan, schedule
from diag.errors import ConfigError
from probes.validate import validate

HOSTS = ["node-a", "node-b", "node-c", "node-d", "node-e"]
ADDR = {h: f"10.9.0.{i + 1}" for i, h in enumerate(HOSTS)}


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_the_schedule_pairs_every_two_hosts_once_and_each_host_once_per_round(n: int) -> None:
    hosts = HOSTS[:n] + ["node-f"][: max(0, n - 5)]
    rounds = schedule(hosts)
    pairs = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, pairs)) == sorted(map(sorted, itertools.combinations(hosts, 2)))
    for r in rounds:
        members = [h for p in r for h in p]
        assert len(members) == len(set(members))
    sinks = {p[0] for r in rounds for p in r}
    assert len(sinks) >= n - 1  # no host only sends, none only listens (but one at most)


def test_a_round_is_sink_then_source_per_pair_each_on_its_own_port_with_valid_params() -> None:
    orders = plan(HOSTS[:4], ADDR, rng=random.Random(3))
    assert len(orders) == 12  # six pairs, two ends each
    ports = []
    for sink, source in zip(orders[::2], orders[1::2], strict=True):
        ps, pc = validate("tcp_pair", sink.params_json), validate("tcp_pair", source.params_json)
        assert (ps.role, pc.role) == ("sink", "source") and ps.port == pc.port
        assert ps.bind == ADDR[sink.host] == pc.peer and pc.bind == ADDR[source.host] == ps.peer
        assert ps.size_bytes <= 1 << 20 and ps.duration_s <= 0.25
        ports.append(ps.port)
    assert len(set(ports)) == 6 and all(20000 <= p < 28010 for p in ports)
    per_host = {h: sum(o.host == h for o in orders) for h in HOSTS[:4]}
    assert set(per_host.values()) == {3}  # each host's n - 1 probes fit its daemon's queue


def test_every_daemon_meets_its_partners_in_round_order() -> None:
    """Each daemon runs its probes in the order received: simulate it and check every pair's
    two ends come up together (no waiting cycle)."""
    orders = plan(HOSTS, ADDR, rng=random.Random(1))
    queues = {h: [json.loads(o.params_json)["port"] for o in orders if o.host == h] for h in HOSTS}
    assert max(len(q) for q in queues.values()) <= 4
    done = 0
    while any(queues.values()):
        heads = {h: q[0] for h, q in queues.items() if q}
        ready = {port for port in heads.values() if list(heads.values()).count(port) == 2}
        assert ready, f"deadlock: {heads}"
        for h, port in heads.items():
            if port in ready:
                queues[h].pop(0)
        done += len(ready)
    assert done == 10


def test_fewer_than_three_hosts_or_a_host_without_an_address_is_refused() -> None:
    with pytest.raises(ConfigError, match="three hosts"):
        plan(HOSTS[:2], ADDR)
    with pytest.raises(ConfigError, match="no address: node-x"):
        plan([*HOSTS[:2], "node-x"], ADDR)
    with pytest.raises(ConfigError):
        LinkProbeConfig(max_hosts=8)
