"""A link finding narrowed by the closed loop's point-to-point probe round: the matrix names the
host whose way in (or out) is slow, or the pair, or nothing; failed probes say why."""

from __future__ import annotations

import json
import math

import pandas as pd

from diag.diagnose.detectors.link_probe import (
    PROBE_FAILED,
    PROBE_LOCALIZATION,
    localize,
    rates,
    refine,
)
from diag.findings import Finding, LinkRef

HOSTS = ["node-a", "node-b", "node-c", "node-d"]
ADDR = {h: f"10.9.0.{i + 1}" for i, h in enumerate(HOSTS)}
FAST = 900.0


def _matrix(slow_in: str = "", slow_out: str = "", pair: tuple[str, str] | None = None,
            hosts: list[str] = HOSTS) -> dict[tuple[str, str], float]:  # fmt: skip
    r = {}
    for i, (a, b) in enumerate((a, b) for a in hosts for b in hosts if a != b):
        v = FAST * (1 + 0.3 * math.sin(i))  # jitter of a busy machine: +-30%
        if b == slow_in or a == slow_out or (a, b) == pair:
            v = 6.0
        r[(a, b)] = v
    return r


def test_a_host_whose_incoming_link_is_limited_is_named_with_its_direction() -> None:
    v = localize(_matrix(slow_in="node-c"))
    assert (v.hosts, v.direction) == (("node-c",), "in") and v.rate == 6.0 and v.others > 500


def test_a_host_whose_outgoing_link_is_limited_is_named_out() -> None:
    v = localize(_matrix(slow_out="node-b"))
    assert (v.hosts, v.direction) == (("node-b",), "out")


def test_one_slow_direction_between_two_hosts_names_the_pair() -> None:
    v = localize(_matrix(pair=("node-a", "node-d")))
    assert v.hosts == ("node-a", "node-d") and v.direction == "node-a->node-d"


def test_a_uniform_matrix_or_two_hosts_name_nothing() -> None:
    assert localize(_matrix()).hosts == ()
    assert localize(_matrix(slow_in="node-b", hosts=HOSTS[:2])).hosts == ()


def _probes(
    matrix: dict[tuple[str, str], float], ts: int = 10_000, failed: str = ""
) -> pd.DataFrame:
    rows = []
    for (src, dst), v in matrix.items():
        rows.append({
            "probe": "tcp_pair", "host": dst, "ts_ns": ts, "value": v,
            "status": "ok", "detail": "", "params_json": json.dumps(
                {"role": "sink", "peer": ADDR[src], "bind": ADDR[dst], "port": 20001}),
        })  # fmt: skip
    if failed:
        rows.append({"probe": "tcp_pair", "host": failed, "ts_ns": ts, "value": None,
                     "status": "timeout", "detail": "no connection from 10.9.0.1",
                     "params_json": "{}"})  # fmt: skip
    return pd.DataFrame(rows)


def _finding() -> Finding:
    return Finding(
        id="link:0", symptom="slowdown", cause="link", severity="warning", ranks=(0, 1, 2, 3),
        hosts=tuple(HOSTS), onset_step=30, detected_step=33, slowdown=0.5, confidence=0.6,
        summary="all_reduce of group 0 takes 2.1x longer: suspect the link between node-a, ...",
        link=LinkRef(ranks=(0, 1, 2, 3), hosts=("node-b", "node-c"), group="0"),
    )  # fmt: skip


STEPS = pd.DataFrame({"step": [29, 30, 30], "start_ns": [1_000, 5_000, 5_200]})
HOSTS_OF = {i: h for i, h in enumerate(HOSTS)}


def test_refine_narrows_the_finding_to_the_host_the_probes_name() -> None:
    f = refine(_finding(), _probes(_matrix(slow_in="node-c")), pd.DataFrame(), STEPS, HOSTS_OF)
    assert f.hosts == ("node-c",) and f.ranks == (2,) and f.link is not None
    assert f.link.hosts == ("node-c",) and f.link.group == "0"
    assert "probes name host node-c's link (traffic into it)" in f.summary
    (e,) = [e for e in f.evidence if e.metric == PROBE_LOCALIZATION]
    assert e.value == 1 and e.subject == "node-c"


def test_probes_before_the_onset_do_not_count_and_failures_say_why() -> None:
    early = _probes(_matrix(slow_in="node-c"), ts=2_000)
    assert refine(_finding(), early, pd.DataFrame(), STEPS, HOSTS_OF) == _finding()
    f = refine(_finding(), _probes(_matrix(), failed="node-d"), pd.DataFrame(), STEPS, HOSTS_OF)
    assert f.hosts == tuple(HOSTS)  # nothing stood out: unchanged but for the evidence
    (e,) = [e for e in f.evidence if e.metric == PROBE_LOCALIZATION]
    assert e.value == 0 and "no link stood out" in e.note and "1 host(s) could not" in e.note
    (bad,) = [e for e in f.evidence if e.metric == PROBE_FAILED]
    assert bad.subject == "node-d" and "no connection from 10.9.0.1" in bad.note


def test_a_peer_address_no_host_claimed_is_left_out() -> None:
    df = _probes(_matrix(slow_in="node-c"))
    df.loc[0, "params_json"] = json.dumps({"peer": "10.1.1.1", "bind": "10.9.0.2"})
    got = rates(df, pd.DataFrame(), None)
    assert len(got) == 11 and all("10.1.1.1" not in k for k in got)


def test_a_busy_healthy_host_with_some_slow_rates_does_not_hide_the_limited_one() -> None:
    """Measured on four emulated nodes on 2 cores: two rates into healthy node-a came out low (a
    nice-19 receiver waiting for a CPU) beside one of 1,900 MB/s; every rate into node-c was
    capped by its limit."""
    r = {
        ("node-a", "node-b"): 470.0, ("node-a", "node-c"): 25.4, ("node-a", "node-d"): 730.0,
        ("node-b", "node-a"): 88.0, ("node-b", "node-c"): 38.6, ("node-b", "node-d"): 2190.0,
        ("node-c", "node-a"): 36.8, ("node-c", "node-b"): 1833.0, ("node-c", "node-d"): 1300.0,
        ("node-d", "node-a"): 1886.0, ("node-d", "node-b"): 1689.0, ("node-d", "node-c"): 31.8,
    }  # fmt: skip
    v = localize(r)
    assert (v.hosts, v.direction) == (("node-c",), "in") and v.rate == 38.6


def test_steps_while_diag_probed_a_host_are_left_out_for_every_rank() -> None:
    from diag.diagnose.features import without_probe_steps

    steps = pd.DataFrame(
        [{"rank": r, "host": HOSTS[r], "step": s, "start_ns": s * 100, "end_ns": s * 100 + 90}
         for s in range(10) for r in range(4)]
    )  # fmt: skip
    probes = pd.DataFrame(
        [{"host": "node-c", "ts_ns": 450, "duration_ns": 200},  # steps 2-4 on node-c's rank
         {"host": "node-x", "ts_ns": 900, "duration_ns": 500},  # no rank of the job there
         {"host": "node-a", "ts_ns": 800, "duration_ns": 0}]  # rejected: never ran
    )  # fmt: skip
    kept = without_probe_steps(steps, probes)
    assert sorted(kept["step"].unique()) == [0, 1, 5, 6, 7, 8, 9]
    assert len(kept) == 7 * 4
    assert without_probe_steps(steps, pd.DataFrame()).equals(steps)
