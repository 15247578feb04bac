"""Which host's link: a slow collective group's suspect narrowed from its TCP connections.

Group timings cannot tell which of the hosts a group spans has the slow link (one ring spans them
all). The node daemons read the kernel's statistics of every TCP connection the ranks hold
(:class:`~diag.schema.TcpPeerSample`: per rank and remote address). A queue or loss on a host's
link shows in every connection whose packets cross it, *data or acknowledgements*: a rate limit
on traffic into host C delays the data its left neighbour sends it and the acknowledgements of
what C sends its right neighbour, so the round-trip time of both rises; a host's slow outgoing
link does the same with the directions swapped. Connections between two other hosts are not
touched.

Per *directed host pair* (the sending host, which reports the sample, and the host whose daemon
reports the remote address as its own; loopback and unknown addresses left out), over the
samples that carried data (``bytes_acked`` > 0), after the finding's onset (the wall-clock start
of its onset step, earliest over the ranks) and before it:

- **rtt**: the median smoothed RTT; **rate**: bytes acked per second of ``busy_us`` (time the
  connections had data to send: the path's pace while it was used); **loss**: bytes
  retransmitted / bytes acked;
- **slowness** = the larger of ``log((rtt after + rtt_floor) / (rtt before + rtt_floor))`` and
  ``log(rate before / rate after)``: how many times slower the pair got (a finding without an
  onset compares each pair with the median of the others instead).

Only *heavy* pairs count: those that carried at least ``heavy_share`` of the busiest pair's bytes
after the onset (a ring's neighbours; a few hundred bytes of a rendezvous message measure the
scheduler, not the link).

In a ring (gloo's and NCCL's all-reduce on one rank per host) each host has one heavy pair in and
one out, and a slow link cannot be pinned on one host from them: a limit on traffic into C slows
B -> C (its data queues) and C -> D (its acknowledgements do), a limit on traffic out of B slows
B -> C (its data) and A -> B (its acknowledgements), and a stalled ring slows its upstream
pairs too (measured on four emulated nodes: the host named by the contrast below was the
culprit's neighbour in 4 of 25 runs). So when the best candidate host has fewer than
``min_host_pairs`` heavy pairs, the answer is the **pair** of hosts of the slowest heavy pair:
the link between them, the sender's way out or the receiver's way in (in those 25 runs always
the culprit's pair); a point-to-point probe from a third host decides which end (not built
yet: the finding says which probe). With more heavy pairs per host (a mesh, several rings,
all-to-all), per host its *contrast*: the median slowness of the heavy pairs that touch it minus
that of the heavy pairs that do not. A **host** is named when the largest contrast is at least
``min_contrast`` and at least ``margin`` x the next host's; the **two** hosts with the largest
contrasts when the first is not that far ahead (too close to call). Otherwise the hosts of the
slowest heavy pair, when it is ``min_contrast`` slower and (beyond two hosts) some heavy pair
stayed ``min_contrast`` faster than it; else nothing (the slowness is everywhere, or nowhere:
nothing local to name).

:func:`refine` narrows a link finding (several hosts) accordingly: hosts and link hosts become the
named host (or pair), its ranks the ranks on them, with one ``tcp_slowness`` (and, lossy,
``tcp_loss``) evidence item per heavy pair touching them; one ``tcp_localization`` item says
what the connections decided (1 host, 2 a pair, 0 nothing) and what they were compared with.
"""

from __future__ import annotations

import ipaddress
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pandas as pd

from diag.findings import Evidence, Finding, LinkRef


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkHostsConfig:
    """Thresholds of the localization (module docstring)."""

    heavy_share: float = 0.1  # of the busiest pair's bytes after the onset: a pair that counts
    rtt_floor_us: float = 1000.0  # added to both RTTs: a 20 -> 60 us change is no queue
    min_contrast: float = math.log(1.5)  # a host's pairs this many times slower than the rest
    margin: float = 1.25  # ... and this many times the next host's contrast
    min_host_pairs: int = 3  # heavy pairs touching a host named alone (a ring gives each two)
    min_loss: float = 0.005  # retransmitted / acked bytes worth naming in the evidence


@dataclass(frozen=True, slots=True)
class PairStat:
    """One directed host pair's connections, after the onset and before it."""

    src: str
    dst: str
    bytes_acked: int  # after
    rtt_us: float
    rtt_before_us: float | None  # None: no data-carrying sample before (or no other pairs)
    rate: float | None  # bytes per busy second after; None: no busy time reported
    rate_before: float | None
    loss: float
    slowness: float = 0.0  # log of how many times slower (module docstring)
    heavy: bool = False


def _routable(ip: str) -> bool:
    try:
        return not ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def hosts_by_ip(tcp: pd.DataFrame) -> dict[str, str]:
    """Address -> the host whose daemon reported it as a local address (loopback left out)."""
    if tcp.empty or not {"local_ip", "host"} <= set(tcp.columns):
        return {}
    pairs = tcp[["local_ip", "host"]].drop_duplicates()
    return {str(ip): str(h) for ip, h in zip(pairs["local_ip"], pairs["host"], strict=True)
            if _routable(str(ip))}  # fmt: skip


def pair_reads(tcp: pd.DataFrame, sums: tuple[str, ...]) -> pd.DataFrame:
    """Per directed host pair (``host``, the sending host; ``dst``, the host whose daemon
    reports the remote address as its own) and daemon read (``ts_ns``): the columns ``sums``
    summed over the ranks' rows, ``interval_ns`` the longest. Loopback and unknown addresses and
    a host's connections to itself are left out; empty when a column is missing.

    One sample per host pair and read: the daemon reads every rank's connections at once and
    stamps its rows alike, so the pair's bytes at one time are their sum. Judged rank by rank, a
    rank whose connections to the host carried only 30 KB in a second would call its two lost
    segments a lossy sample (seen beside a busy loop: 48 bytes retransmitted by a light
    connection at the job's start put a lossy pair's onset at step 4 of a loss from step 30)."""
    need = {"host", "remote_ip", "ts_ns", "interval_ns", *sums}
    if tcp.empty or not need <= set(tcp.columns):
        return pd.DataFrame()
    where = hosts_by_ip(tcp)
    df = tcp.assign(dst=tcp["remote_ip"].astype(str).map(where))
    df = df[df["dst"].notna() & (df["dst"] != df["host"])]
    if df.empty:
        return pd.DataFrame()
    agg = {c: (c, "sum") for c in sums} | {"interval_ns": ("interval_ns", "max")}
    return df.groupby(["host", "dst", "ts_ns"], sort=True).agg(**agg).reset_index()


def addresses(tcp: pd.DataFrame) -> dict[str, str]:
    """Host -> the local address its ranks' connections carried the most bytes on (loopback
    left out): where a probe to that host should go to cross the job's link."""
    need = {"local_ip", "host", "bytes_acked"}
    if tcp.empty or not need <= set(tcp.columns):
        return {}
    df = tcp[tcp["local_ip"].astype(str).map(_routable)]
    if df.empty:
        return {}
    sums = df.groupby(["host", "local_ip"], sort=True)["bytes_acked"].sum().reset_index()
    best = sums.sort_values(["host", "bytes_acked"], ascending=[True, False], kind="stable")
    return {
        str(h): str(ip) for h, ip in best.groupby("host", sort=True)["local_ip"].first().items()
    }


def pair_stats(
    tcp: pd.DataFrame, onset_ns: int | None, cfg: LinkHostsConfig | None = None
) -> list[PairStat]:
    """Every directed host pair that carried data after ``onset_ns`` (the whole run when
    ``None``), with its slowness and whether it is heavy (module docstring)."""
    cfg = cfg or LinkHostsConfig()
    need = {"host", "remote_ip", "ts_ns", "bytes_acked", "bytes_retrans", "rtt_us"}
    if tcp.empty or not need <= set(tcp.columns):
        return []
    where = hosts_by_ip(tcp)
    df = tcp[tcp["bytes_acked"] > 0].copy()
    df["dst"] = df["remote_ip"].astype(str).map(where)
    df = df[df["dst"].notna() & (df["dst"] != df["host"])]
    if "busy_us" not in df.columns:
        df["busy_us"] = 0
    if df.empty:
        return []
    after = df["ts_ns"] >= onset_ns if onset_ns is not None else pd.Series(True, index=df.index)
    raw = []
    for (src, dst), g in df.groupby(["host", "dst"], sort=True):
        a, b = g[after.loc[g.index]], g[~after.loc[g.index]]
        if a.empty:
            continue
        acked = int(a["bytes_acked"].sum())
        raw.append(
            PairStat(
                src=str(src), dst=str(dst), bytes_acked=acked,
                rtt_us=float(a["rtt_us"].median()),
                rtt_before_us=float(b["rtt_us"].median()) if len(b) else None,
                rate=_rate(a), rate_before=_rate(b),
                loss=float(a["bytes_retrans"].sum()) / acked if acked else 0.0,
            )
        )  # fmt: skip
    if not raw:
        return []
    if onset_ns is None:  # no before: each pair against the median of the others
        raw = [
            replace(
                p,
                rtt_before_us=_median([o.rtt_us for o in raw if o is not p]),
                rate_before=_median([o.rate for o in raw if o is not p]),
            )
            for p in raw
        ]
    busiest = max(p.bytes_acked for p in raw)
    return [
        replace(p, slowness=_slowness(p, cfg), heavy=p.bytes_acked >= cfg.heavy_share * busiest)
        for p in raw
    ]


def _rate(g: pd.DataFrame) -> float | None:
    busy = float(g["busy_us"].sum())
    return float(g["bytes_acked"].sum()) / (busy / 1e6) if busy > 0 and len(g) else None


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def _slowness(p: PairStat, cfg: LinkHostsConfig) -> float:
    out = 0.0
    if p.rtt_before_us is not None:
        out = math.log((p.rtt_us + cfg.rtt_floor_us) / (p.rtt_before_us + cfg.rtt_floor_us))
    if p.rate and p.rate_before:
        out = max(out, math.log(p.rate_before / p.rate))
    return out


def _pairs_touching(heavy: list[PairStat], host: str) -> int:
    return sum(host in (p.src, p.dst) for p in heavy)


def contrasts(stats: list[PairStat]) -> dict[str, float]:
    """Per host, the median slowness of the heavy pairs touching it minus that of the heavy
    pairs not touching it (hosts with both kinds only)."""
    heavy = [p for p in stats if p.heavy]
    out = {}
    for h in sorted({x for p in heavy for x in (p.src, p.dst)}):
        mine = [p.slowness for p in heavy if h in (p.src, p.dst)]
        rest = [p.slowness for p in heavy if h not in (p.src, p.dst)]
        if mine and rest:
            out[h] = statistics.median(mine) - statistics.median(rest)
    return out


def localize(stats: list[PairStat], cfg: LinkHostsConfig | None = None) -> tuple[str, ...]:
    """The host (one name) or host pair (two) the heavy pairs point at; ``()`` when they do
    not single one out (module docstring)."""
    cfg = cfg or LinkHostsConfig()
    heavy = [p for p in stats if p.heavy]
    if not heavy:
        return ()
    ranked = sorted(contrasts(stats).items(), key=lambda hc: (-hc[1], hc[0]))
    if ranked and _pairs_touching(heavy, ranked[0][0]) < cfg.min_host_pairs:
        ranked = []  # a ring: one pair in, one out (see the module docstring): the slowest pair
    if ranked and ranked[0][1] >= cfg.min_contrast:
        second = ranked[1][1] if len(ranked) > 1 else 0.0
        if ranked[0][1] >= cfg.margin * max(second, 0.0):
            return (ranked[0][0],)
        return tuple(sorted((ranked[0][0], ranked[1][0])))  # too close to call between two
    worst = max(heavy, key=lambda p: (p.slowness, p.src, p.dst))
    if worst.slowness < cfg.min_contrast:
        return ()
    others = [p.slowness for p in heavy if p is not worst]
    spanned = {h for p in heavy for h in (p.src, p.dst)}
    if len(spanned) > 2 and others and worst.slowness - min(others) < cfg.min_contrast:
        return ()  # every pair about as slow: nothing local to name
    return tuple(sorted((worst.src, worst.dst)))


def onset_ns(step_events: pd.DataFrame, step: int | None) -> int | None:
    """When step ``step`` started (the earliest rank), wall-clock ns; ``None`` unknown."""
    if step is None or step_events.empty or not {"step", "start_ns"} <= set(step_events.columns):
        return None
    at = step_events.loc[step_events["step"] == step, "start_ns"]
    return int(at.min()) if len(at) else None


def refine(
    f: Finding,
    tcp: pd.DataFrame,
    step_events: pd.DataFrame,
    hosts_of: Mapping[int, str],
    cfg: LinkHostsConfig | None = None,
) -> Finding:
    """``f`` (a link finding) narrowed to the host or host pair its connections name (module
    docstring); unchanged when it joins two hosts or fewer already or there are no
    connection statistics."""
    if f.cause != "link" or f.link is None or len(f.link.hosts) < 2 or tcp.empty:
        return f
    cfg = cfg or LinkHostsConfig()
    start = onset_ns(step_events, f.onset_step)
    stats = [s for s in pair_stats(tcp, start, cfg) if {s.src, s.dst} <= set(f.link.hosts)]
    if not stats:
        return f
    named = localize(stats, cfg)
    versus = "before the onset" if start is not None else "the other host pairs"
    decided = Evidence(
        metric="tcp_localization",
        subject=", ".join(named) if named else ", ".join(f.link.hosts),
        value=float(len(named)),
        unit="hosts",
        note=f"{sum(s.heavy for s in stats)} heavy host pairs of {len(stats)} compared with "
        f"{versus}; contrast per host: "
        + ", ".join(f"{h} {c:+.2f}" for h, c in contrasts(stats).items())
        + " (0: they do not single out a host or pair)",
    )
    if not named or (len(named) == 2 and set(named) == set(f.link.hosts)):
        return replace(f, evidence=(*f.evidence, decided))
    ranks = tuple(sorted(r for r, h in hosts_of.items() if h in named)) or f.ranks
    pairs = sorted(
        (s for s in stats if s.heavy and set(named) & {s.src, s.dst}), key=lambda s: -s.slowness
    )
    shown = "; ".join(_show(s) for s in pairs[:4])
    what = (
        f"host {named[0]}'s link" if len(named) == 1 else f"the link between {' and '.join(named)}"
    )
    # the group-level summary named every host the group spans: keep its measurement only
    head = f.summary.split(": suspect the link", 1)[0]
    probe = (
        f"confirm with point-to-point bandwidth probes to and from {named[0]} (another host)"
        if len(named) == 1
        else f"a point-to-point bandwidth probe between a third host and each of {named[0]} and "
        f"{named[1]} tells which end"
    )
    evidence = [decided]
    for s in pairs:
        evidence.append(
            Evidence(
                metric="tcp_slowness", subject=f"{s.src} -> {s.dst}",
                value=math.exp(s.slowness), reference=1.0, unit="x",
                note=f"{_show(s)}; vs {versus}",
            )
        )  # fmt: skip
        if s.loss is not None and s.loss >= cfg.min_loss:
            evidence.append(
                Evidence(
                    metric="tcp_loss", subject=f"{s.src} -> {s.dst}", value=s.loss,
                    unit="fraction", note="bytes retransmitted / bytes acked after the onset",
                )
            )  # fmt: skip
    return replace(
        f,
        ranks=ranks,
        hosts=named,
        link=LinkRef(ranks=ranks, hosts=named, group=f.link.group),
        summary=f"{head}: the ranks' TCP connections name {what}: {shown}; {probe}",
        evidence=(*f.evidence, *evidence),
    )


def _show(s: PairStat) -> str:
    rtt = f"RTT {s.rtt_us / 1000:.1f} ms" + (
        f" (was {s.rtt_before_us / 1000:.1f})" if s.rtt_before_us is not None else ""
    )
    rate = (
        f", {s.rate / 1e6:.0f} MB/s busy (was {s.rate_before / 1e6:.0f})"
        if s.rate and s.rate_before
        else ""
    )
    loss = f", {s.loss:.1%} retransmitted" if s.loss else ""
    return f"{s.src} -> {s.dst} {math.exp(s.slowness):.1f}x slower: {rtt}{rate}{loss}"
