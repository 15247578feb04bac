"""A link that stops carrying data for a while (a flapping port, a path outage): the job's steps
stall as a whole while the connections between two hosts hold data they cannot deliver.

A job-wide stall (a step every rank took ``stall_ratio`` times the median step or longer) has
many possible causes that no comparison of ranks can place: a save, an evaluation pass, a
paused host, the network. The kernel's per-connection statistics tell the network's share
(:class:`~diag.schema.TcpPeerSample`): ``busy_us`` is the time a connection had data to send, of
which ``rwnd_limited_us`` the receiver's window held it back and ``sndbuf_limited_us`` the
sender's own buffer; the rest is time the *network* set the pace, and bytes acked over it is the
path's rate. A link that goes down (or drops everything) leaves its connections busy with
nothing acked until the retransmission gets through: network-limited time with a rate near
zero. A stall with any other cause does not: a paused or slow rank leaves its peers' data acked
by its kernel (and, once its buffer is full, their wait is window-limited), and a rank that has
not sent has no busy time.

Per directed host pair (the sending host and the host whose daemon reports the remote address as
its own; loopback and unknown addresses left out), each daemon sample's sums: bytes acked and the
network-limited busy time. The pair's *own rate*: the median of bytes acked per network-limited
second over its samples that overlap no stall. A stall is *on* the pair when a sample that
covers at least half of the stall (or half of the sample) spent at least half of that overlap
network-limited (one connection's worth) and delivered at most ``collapse`` of its own rate
then. A stall explained when some heavy pair (``heavy_share`` of the busiest pair's bytes)
stalled in it.

A finding when the explained stalls cost at least ``min_slowdown`` of the job's time from the
first of them on (their excess over the median step, against the steps' summed time): cause
``link``, its hosts those of the stalled pairs (their common host when there are several and all
touch it, else every host they join; on a two-host job the one link between them), the onset the
first explained stall, the step it was detected in the one in progress when the daemon read the
sample that showed it. Only where no other link finding covers the run (:mod:`.link` finds a
steady slowdown, :mod:`.link_loss` a lossy one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.diagnose.detectors.link_hosts import pair_reads
from diag.diagnose.detectors.link_loss import job_steps
from diag.diagnose.detectors.node_slow import severity
from diag.findings import Evidence, Finding, LinkRef


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkStallConfig:
    """Thresholds (module docstring)."""

    stall_ratio: float = 3.0  # a step this many times the median step or longer: a stall
    skip_steps: int = 2  # warm-up: never a stall, never in the median
    heavy_share: float = 0.1
    #: a stalled path delivered at most this share of its own rate in the sample that held the
    #: stall (a second long, it holds the catch-up after the stall too: on the tuning mechanism
    #: beside a busy loop, 11-14 % in the samples of a 1 s stall, ~0 within it)
    collapse: float = 0.2
    busy_share: float = 0.5  # ... while network-limited for this share of the overlap or more
    min_slowdown: float = 0.1
    warn_slowdown: float = 0.05
    critical_slowdown: float = 0.2


@dataclass(frozen=True, slots=True)
class _Stall:
    step: int
    excess_ns: float  # its duration beyond the median step
    seen_ns: int  # when the first sample that shows it on a pair was read
    pairs: tuple[tuple[str, str, float, float], ...]  # (src, dst, rate then, own rate) stalled


def _samples(tcp: pd.DataFrame) -> pd.DataFrame:
    """Per directed host pair and daemon read (:func:`~.link_hosts.pair_reads`): bytes acked
    and the network-limited busy time (``net_us``: busy less window- and buffer-limited)."""
    if tcp.empty or "busy_us" not in tcp.columns:
        return pd.DataFrame()
    limited = sum(tcp[c] for c in ("rwnd_limited_us", "sndbuf_limited_us") if c in tcp.columns)
    net = tcp.assign(net_us=(tcp["busy_us"] - limited).clip(lower=0))
    return pair_reads(net, ("bytes_acked", "net_us"))


def _overlap(a0: np.ndarray, a1: np.ndarray, b0: int, b1: int) -> np.ndarray:
    return np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0, None)


def detect(
    tcp: pd.DataFrame,
    step_events: pd.DataFrame,
    hosts_of: Mapping[int, str],
    cfg: LinkStallConfig | None = None,
) -> list[Finding]:
    """At most one stalled-link finding (module docstring)."""
    cfg = cfg or LinkStallConfig()
    per_step = job_steps(step_events)
    if len(per_step) <= cfg.skip_steps + 2:
        return []
    dur = per_step["dur"].to_numpy(dtype=float)
    median = float(np.median(dur[cfg.skip_steps :]))
    stalled_idx = [i for i in range(cfg.skip_steps, len(dur)) if dur[i] >= cfg.stall_ratio * median]
    if not median > 0 or not stalled_idx:
        return []  # no stall: the connections are not read at all
    samples = _samples(tcp)
    if samples.empty:
        return []
    starts = per_step["start_ns"].to_numpy(dtype=np.int64)
    windows = [(int(starts[i]), int(starts[i] + dur[i])) for i in stalled_idx]

    s0 = (samples["ts_ns"] - samples["interval_ns"]).to_numpy(dtype=np.int64)
    s1 = samples["ts_ns"].to_numpy(dtype=np.int64)
    in_stall = np.zeros(len(samples), dtype=bool)
    for a, b in windows:
        in_stall |= _overlap(s0, s1, a, b) > 0
    acked = samples["bytes_acked"].to_numpy(dtype=float)
    net_us = samples["net_us"].to_numpy(dtype=float)
    keys = list(zip(samples["host"].astype(str), samples["dst"].astype(str), strict=True))
    by_pair: dict[tuple[str, str], list[int]] = {}
    for j, k in enumerate(keys):
        by_pair.setdefault(k, []).append(j)
    totals = {k: acked[js].sum() for k, js in by_pair.items()}
    busiest = max(totals.values(), default=0.0)
    own_rate: dict[tuple[str, str], float] = {}
    for k, js in by_pair.items():
        if busiest <= 0 or totals[k] < cfg.heavy_share * busiest:
            continue
        calm = [acked[j] / net_us[j] for j in js if not in_stall[j] and net_us[j] > 0]
        if calm:
            own_rate[k] = float(np.median(calm))

    stalls: list[_Stall] = []
    for i, (a, b) in zip(stalled_idx, windows, strict=True):
        span = _overlap(s0, s1, a, b)
        found, seen = [], []
        for k, rate in own_rate.items():
            for j in by_pair[k]:
                ov = float(span[j])
                if ov <= 0 or ov < 0.5 * min(b - a, s1[j] - s0[j]):
                    continue
                if net_us[j] * 1000 < cfg.busy_share * ov:
                    continue
                then = acked[j] / net_us[j]
                if then <= cfg.collapse * rate:
                    found.append((k[0], k[1], then, rate))
                    seen.append(int(s1[j]))
                    break
        if found:
            stalls.append(_Stall(int(per_step["step"].iloc[i]), dur[i] - median, min(seen),
                                 tuple(sorted(found))))  # fmt: skip
    if not stalls:
        return []
    first = stalls[0]
    at = int(np.searchsorted(per_step["step"].to_numpy(), first.step))
    total = float(dur[at:].sum())
    excess = sum(s.excess_ns for s in stalls)
    slowdown = excess / total if total > 0 else 0.0
    if slowdown < cfg.min_slowdown:
        return []
    # detected in the step in progress when the daemon read the sample that shows the first stall
    seen_at = int(np.searchsorted(starts, first.seen_ns, side="right")) - 1
    detected = int(per_step["step"].iloc[max(at, min(seen_at, len(starts) - 1))])
    pairs = sorted({(p[0], p[1]) for s in stalls for p in s.pairs})
    hosts, where = _where(pairs)
    ranks = tuple(sorted(r for r, h in hosts_of.items() if h in hosts))
    evidence = []
    for s in stalls:
        for src, dst, then, rate in s.pairs:
            evidence.append(
                Evidence(
                    metric="tcp_stall", subject=f"{src} -> {dst}", value=then, reference=rate,
                    unit="bytes/us",
                    note=f"step {s.step} stalled {s.excess_ns / 1e6:.0f} ms beyond the median "
                    f"step; its connections held data and delivered {then:.3g} bytes/us "
                    f"against their own {rate:.3g} (network-limited, not window-limited)",
                )
            )  # fmt: skip
    evidence.append(
        Evidence(
            metric="stall_time", subject="job", value=excess / 1e6, reference=total / 1e6,
            unit="ms", note=f"{len(stalls)} stalled step(s) from step {first.step} on, "
            f"against the time of every step since",
        )
    )  # fmt: skip
    steps_list = ", ".join(str(s.step) for s in stalls[:5]) + (" ..." if len(stalls) > 5 else "")
    return [
        Finding(
            id=f"link-stall:{'-'.join(hosts)}",
            symptom="slowdown",
            cause="link",
            severity=severity(slowdown, cfg.warn_slowdown, cfg.critical_slowdown),
            ranks=ranks,
            hosts=hosts,
            link=LinkRef(ranks=ranks, hosts=hosts, group=""),
            onset_step=first.step,
            detected_step=detected,
            slowdown=slowdown,
            confidence=min(0.9, 0.5 + 0.1 * math.log2(1 + len(stalls))),
            summary=(
                f"the job stalled at step(s) {steps_list} ({slowdown:.0%} of its time since "
                f"step {first.step}) while the connections {_pairs_text(pairs)} held data and "
                f"delivered almost none of it: the link stopped carrying data (a flapping port "
                f"or a path outage); suspect {where}"
            ),
            evidence=tuple(evidence),
        )
    ]


def _pairs_text(pairs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{a} -> {b}" for a, b in pairs)


def _where(pairs: list[tuple[str, str]]) -> tuple[tuple[str, ...], str]:
    """The hosts to name and how: the host every stalled pair touches (beyond one pair between
    the same two hosts), else every host the pairs join."""
    hosts = tuple(sorted({h for p in pairs for h in p}))
    if len(hosts) == 2:
        return hosts, f"between {hosts[0]} and {hosts[1]}"
    common = set(hosts)
    for p in pairs:
        common &= set(p)
    if len(common) == 1:
        (h,) = common
        return (h,), f"host {h}'s link (every stalled connection goes to or from it)"
    return hosts, f"on the hosts {', '.join(hosts)}"
