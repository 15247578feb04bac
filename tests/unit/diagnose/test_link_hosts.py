"""A slow group narrowed to one host from the ranks' TCP connections: a queue or loss on a host's
link shows in every connection crossing it (data or acknowledgements), not between others."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from diag.diagnose.detectors.link_hosts import contrasts, localize, pair_stats, refine
from diag.findings import Finding, LinkRef

S = 1_000_000_000
IP = {"node-a": "10.0.0.2", "node-b": "10.0.0.3", "node-c": "10.0.0.4", "node-d": "10.0.0.5"}
RING = [("node-a", "node-b"), ("node-b", "node-c"), ("node-c", "node-d"), ("node-d", "node-a")]


def _frame(
    pairs: list[tuple[str, str]],
    slow: dict[tuple[str, str], tuple[float, float, int]],
    seconds: int = 10,
    onset_s: int = 5,
    light: list[tuple[str, str]] = (),  # type: ignore[assignment]
) -> pd.DataFrame:
    """One sample per second per directed pair: 10 MB acked in 50 ms busy (200 MB/s) at 0.2 ms
    RTT, no loss, except the pairs in ``slow`` from ``onset_s`` on: (RTT ms, busy time factor,
    bytes retransmitted per sample). ``light`` pairs carry 2 KB a second with a wild RTT
    (rendezvous chatter: never counted)."""
    rows = []
    for t in range(seconds):
        for src, dst in pairs:
            rtt, busy, retrans = (
                slow.get((src, dst), (0.2, 1.0, 0)) if t >= onset_s else (0.2, 1.0, 0)
            )
            rows.append(
                dict(host=src, rank=list(IP).index(src), local_ip=IP[src], remote_ip=IP[dst],
                     ts_ns=t * S, bytes_acked=10_000_000, bytes_retrans=retrans,
                     busy_us=int(50_000 * busy), rtt_us=rtt * 1000)
            )  # fmt: skip
        for src, dst in light:
            rows.append(
                dict(host=src, rank=list(IP).index(src), local_ip=IP[src], remote_ip=IP[dst],
                     ts_ns=t * S, bytes_acked=2000, bytes_retrans=0, busy_us=100,
                     rtt_us=(30.0 if t % 2 else 0.1) * 1000)
            )  # fmt: skip
    # the rank's TCPStore connection over loopback never counts
    loop = dict(host="node-a", rank=0, local_ip="127.0.0.1", remote_ip="127.0.0.1", ts_ns=9 * S)
    rows.append(dict(loop, bytes_acked=10, bytes_retrans=0, busy_us=1, rtt_us=9e6))
    return pd.DataFrame(rows)


#: into C: its left neighbour's data queues (B -> C), so do the acknowledgements of what C sends
INTO_C = {("node-b", "node-c"): (8.0, 3.0, 0), ("node-c", "node-d"): (6.0, 2.5, 0)}


def test_a_rate_limit_into_one_host_of_a_ring_names_its_slowest_pair() -> None:
    # in a ring each host has one heavy pair in and one out: B's way out and C's way in both
    # explain B -> C, so the answer is that pair (a probe from a third host tells the end)
    tcp = _frame(RING, INTO_C, light=[("node-a", "node-c"), ("node-d", "node-b")])
    stats = pair_stats(tcp, 5 * S)
    assert {(p.src, p.dst) for p in stats if p.heavy} == set(RING)
    slower = {(p.src, p.dst): round(math.exp(p.slowness), 1) for p in stats if p.heavy}
    # RTT (8 + 1 ms floor) / (0.2 + 1) = 7.5x beats the rate (3x busier for the same bytes)
    assert slower[("node-b", "node-c")] == 7.5 and slower[("node-a", "node-b")] == 1.0
    assert contrasts(stats)["node-c"] > contrasts(stats)["node-b"] > 0
    assert localize(stats) == ("node-b", "node-c")


def test_with_more_heavy_pairs_per_host_the_host_is_named() -> None:
    # two rings (both directions, as gloo's chunked ring does): each host two pairs in, two out
    both_ways = RING + [(b, a) for a, b in RING]
    into_c = {p: (8.0, 3.0, 0) for p in both_ways if "node-c" in p}
    assert localize(pair_stats(_frame(both_ways, into_c), 5 * S)) == ("node-c",)


def test_a_lossy_link_names_its_host_by_its_pairs_rate() -> None:
    mesh = [(a, b) for a in IP for b in IP if a != b]
    slow = {p: (0.5, 4.0, 400_000) for p in mesh if "node-d" in p}
    assert localize(pair_stats(_frame(mesh, slow), 5 * S)) == ("node-d",)


def test_one_slow_pair_two_nodes_or_no_standout_name_a_pair_or_nothing() -> None:
    mesh = [(a, b) for a in IP for b in IP if a != b]
    only = _frame(mesh, {("node-b", "node-c"): (8.0, 3.0, 0)})
    assert localize(pair_stats(only, 5 * S)) == ("node-b", "node-c")  # either end: too close
    two = [("node-a", "node-b"), ("node-b", "node-a")]
    both = _frame(two, dict.fromkeys(two, (5.0, 2.0, 0)))
    assert localize(pair_stats(both, 5 * S)) == ("node-a", "node-b")
    assert localize(pair_stats(_frame(two, {}), 5 * S)) == ()
    spread = _frame(mesh, dict.fromkeys(mesh, (5.0, 2.0, 0)))  # everything: no one host
    assert localize(pair_stats(spread, 5 * S)) == ()
    assert localize(pair_stats(_frame(RING, {}), 5 * S)) == ()  # nothing slow


def test_without_an_onset_pairs_are_compared_with_each_other() -> None:
    tcp = _frame(RING, INTO_C, onset_s=0)
    assert localize(pair_stats(tcp, None)) == ("node-b", "node-c")


def _link_finding() -> Finding:
    hosts = tuple(IP)
    return Finding(
        id="link:pg0", symptom="slowdown", cause="link", severity="critical", ranks=(0, 1, 2, 3),
        hosts=hosts, link=LinkRef(ranks=(0, 1, 2, 3), hosts=hosts, group="pg0"), onset_step=30,
        detected_step=36, slowdown=0.4, confidence=0.8,
        summary="group pg0 is 2x slower per byte: suspect the link between node-a and node-b and "
        "node-c and node-d; confirm with probes between ranks 0, 1, 2, 3",
    )  # fmt: skip


def test_refine_narrows_the_finding_and_says_what_decided_it() -> None:
    tcp = _frame(RING, INTO_C)
    steps = pd.DataFrame({"step": [29, 30, 30], "start_ns": [4 * S, 5 * S, 5 * S + 10]})
    hosts_of = {i: h for i, h in enumerate(IP)}
    out = refine(_link_finding(), tcp, steps, hosts_of)
    pair = ("node-b", "node-c")
    assert out.hosts == pair and out.link is not None and out.link.hosts == pair
    assert out.ranks == (1, 2) and "the link between node-b and node-c" in out.summary
    assert "node-a and node-b" not in out.summary and out.summary.startswith("group pg0 is 2x")
    (decided,) = [e for e in out.evidence if e.metric == "tcp_localization"]
    assert decided.value == 2.0 and "4 heavy host pairs" in decided.note
    slowness = {e.subject: e.value for e in out.evidence if e.metric == "tcp_slowness"}
    # the heavy pairs touching B or C, slowest first
    assert set(slowness) == {"node-a -> node-b", "node-b -> node-c", "node-c -> node-d"}
    assert slowness["node-b -> node-c"] == pytest.approx(7.5)
    # no connection statistics, or nothing singled out: unchanged but for what was tried
    assert refine(_link_finding(), pd.DataFrame(), steps, hosts_of) == _link_finding()
    flat = refine(_link_finding(), _frame(RING, {}), steps, hosts_of)
    assert flat.hosts == _link_finding().hosts
    assert [e.value for e in flat.evidence if e.metric == "tcp_localization"] == [0.0]
