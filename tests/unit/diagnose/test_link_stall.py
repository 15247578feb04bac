"""A link that stops carrying data: job-wide stalls while the connections of a host pair hold data
and deliver none of it are a link finding naming that pair's hosts; stalls the connections did
not cause (their data acked, their wait the receiver's window, or no data at all) are not."""

from __future__ import annotations

import pandas as pd
import pytest

from diag.diagnose.detectors.link_stall import detect

MS = 1_000_000
S = 1_000 * MS
IP = {"node-a": "10.9.0.1", "node-b": "10.9.0.2", "node-c": "10.9.0.3", "node-d": "10.9.0.4"}
RING = [("node-a", "node-b"), ("node-b", "node-c"), ("node-c", "node-d"), ("node-d", "node-a")]
HOSTS_OF = {0: "node-a", 1: "node-b", 2: "node-c", 3: "node-d"}
T0 = 1_000 * S
BASE_MS = 30.0


def _steps(stalls: dict[int, float], n: int = 200) -> pd.DataFrame:
    """Every rank's steps, ``stalls``: step -> how long it stalled beyond the base step (ms)."""
    rows, t = [], T0
    for step in range(n):
        dur = int((BASE_MS + stalls.get(step, 0.0)) * MS)
        for rank in range(4):
            rows.append({"rank": rank, "step": step, "start_ns": t, "end_ns": t + dur})
        t += dur
    return pd.DataFrame(rows)


def _window(steps: pd.DataFrame, step: int) -> tuple[int, int]:
    rows = steps[steps["step"] == step]
    return int(rows["start_ns"].min()), int(rows["end_ns"].max())


def _tcp(steps: pd.DataFrame, stalled: set[tuple[str, str]], stall_steps: list[int], *,
         how: str = "network", pairs: list[tuple[str, str]] = RING,
         stall_bytes: int = 1_000) -> pd.DataFrame:  # fmt: skip
    """One sample a second per pair: 50 MB acked over 0.3 s of network-limited busy time; a
    ``stalled`` pair's sample that overlaps a stall: nothing acked, busy throughout the stall
    (``how``: "network" -- network-limited, "rwnd" -- the receiver's window held it back,
    "idle" -- no data to send)."""
    end = int(steps["end_ns"].max())
    windows = [_window(steps, s) for s in stall_steps]
    rows = []
    for ts in range(T0 + S, end + 2 * S, S):
        for src, dst in pairs:
            acked, busy, rwnd = 50_000_000, 300_000, 0
            hit = [(a, b) for a, b in windows if min(b, ts) - max(a, ts - S) > 0]
            if (src, dst) in stalled and hit:
                a, b = hit[0]
                held_us = (min(b, ts) - max(a, ts - S)) // 1000
                acked = stall_bytes
                busy = 0 if how == "idle" else held_us * 2  # two connections held data
                rwnd = busy if how == "rwnd" else 0
            rows.append({
                "host": src, "local_ip": IP[src], "remote_ip": IP[dst], "ts_ns": ts,
                "interval_ns": S, "bytes_acked": acked, "busy_us": busy,
                "rwnd_limited_us": rwnd, "sndbuf_limited_us": 0,
            })  # fmt: skip
    return pd.DataFrame(rows)


STALLS = {60: 900.0, 110: 700.0, 160: 800.0}


def test_stalls_while_a_pair_held_undelivered_data_name_that_link_from_the_first() -> None:
    steps = _steps(STALLS)
    tcp = _tcp(steps, {("node-b", "node-c")}, list(STALLS))
    (f,) = detect(tcp, steps, HOSTS_OF)
    assert f.cause == "link" and f.hosts == ("node-b", "node-c") and f.ranks == (1, 2)
    assert f.link is not None and f.link.hosts == ("node-b", "node-c")
    assert f.onset_step == 60 and f.severity == "critical"
    stalls = [e for e in f.evidence if e.metric == "tcp_stall"]
    assert [e.subject for e in stalls] == ["node-b -> node-c"] * 3
    assert all(e.value < 0.1 * e.reference for e in stalls)


def test_pairs_that_all_touch_one_host_name_that_host() -> None:
    steps = _steps(STALLS)
    into_d = {("node-c", "node-d"), ("node-a", "node-d")}
    (f,) = detect(_tcp(steps, into_d, list(STALLS), pairs=[*RING, ("node-a", "node-d")]), steps,
                  HOSTS_OF)  # fmt: skip
    assert f.hosts == ("node-d",) and f.ranks == (3,)


@pytest.mark.parametrize("how", ["rwnd", "idle"])
def test_stalls_the_connections_did_not_cause_are_not_a_link(how: str) -> None:
    """A paused receiver (its window full: the sender's wait is the window's) or a rank that had
    nothing to send: the stall is not the network's."""
    steps = _steps(STALLS)
    assert detect(_tcp(steps, {("node-b", "node-c")}, list(STALLS), how=how), steps, HOSTS_OF) == []


def test_no_stall_no_finding_and_a_stall_nobody_lost_data_in_is_not_a_link() -> None:
    steps = _steps({})
    assert detect(_tcp(steps, {("node-b", "node-c")}, []), steps, HOSTS_OF) == []
    steps = _steps(STALLS)
    assert detect(_tcp(steps, set(), list(STALLS)), steps, HOSTS_OF) == []


def test_a_stall_too_small_for_the_job_to_feel_is_not_a_finding() -> None:
    """One 100 ms stall in 200 steps of 30 ms: under the 10% floor from its step on."""
    steps = _steps({20: 100.0})
    assert detect(_tcp(steps, {("node-b", "node-c")}, [20]), steps, HOSTS_OF) == []


def test_no_tcp_samples_or_no_steps_is_no_finding() -> None:
    steps = _steps(STALLS)
    assert detect(pd.DataFrame(), steps, HOSTS_OF) == []
    assert detect(_tcp(steps, {("node-b", "node-c")}, list(STALLS)), pd.DataFrame(), HOSTS_OF) == []


def test_detected_when_the_sample_that_shows_the_stall_was_read() -> None:
    steps = _steps(STALLS)
    (f,) = detect(_tcp(steps, {("node-b", "node-c")}, list(STALLS)), steps, HOSTS_OF)
    stall_end = _window(steps, 60)[1]
    read_at = T0 + S * -(-(stall_end - T0) // S)  # the first read (one a second) after it ended
    in_progress = steps[steps["start_ns"] <= read_at]["step"].max()
    assert f.onset_step == 60 and f.detected_step == in_progress > 60


def test_a_sample_that_holds_the_catch_up_after_the_stall_still_shows_it() -> None:
    """A daemon sample is a second long: the one that holds a stall also holds the data sent
    once the link is back. 12 % of the pair's own rate over it is a stall; 40 % is not."""
    steps = _steps(STALLS)
    held = {("node-b", "node-c")}
    # the stalled samples' busy time is ~2x the overlap; the pair's own rate 50 MB / 0.3 s
    (f,) = detect(_tcp(steps, held, list(STALLS), stall_bytes=36_000_000), steps, HOSTS_OF)
    assert f.hosts == ("node-b", "node-c")
    assert detect(_tcp(steps, held, list(STALLS), stall_bytes=80_000_000), steps, HOSTS_OF) == []
