"""Which host's link, asked directly: a slow link finding narrowed from point-to-point probes.

When the ranks' own connections do not single out one host (:mod:`.link_hosts`: a ring gives
each host one connection in and one out, so they name the pair of the slowest connection), the
analyzer's closed loop runs a probe round through the node daemons
(:mod:`diag.analyzer.linkprobe`): every pair of up to five of the job's hosts measures TCP
throughput both ways (:mod:`probes.tcp_pair`; each end reports the rate at which it received).
Their results come back as ``probe_result`` events; this module reads the round's matrix of
directed rates ``r[src -> dst]`` (MB/s; the receiver's host reports, the sender is the host
whose connections use the peer address) and names:

- a **host and direction** when even the best rate *into* (or *out of*) one host (two partners
  or more) is ``min_ratio`` times below the typical rate between the other hosts (the median of
  their log rates), and that contrast is ``margin`` times any other host's: a limit on that
  host's way in (or out). The best, not the median: a limit caps every rate through it, while
  load on a busy host (a nice-19 receiver waiting for a CPU) only lowers some (measured on four
  emulated nodes on 2 cores: 88 and 37 MB/s into a healthy host beside 1,900, its medians as low
  as the culprit's);
- else the **pair** of the slowest directed rate when it is ``min_ratio`` times below the median
  of all the others;
- else nothing: the probes found no slow link (the slowdown passed, or it is not the network's).

Two hosts cannot be told apart by probes between them (there is nothing to compare with), so
a round needs three or more. Probes that failed or timed out are named in the evidence with
the daemon's reason (``probe_failed``): the finding says why it stayed undecided.

:func:`refine` applies it to a link finding with probe results after its onset; a named host or
pair replaces what the connections named, and one ``probe_localization`` item (value: hosts
named, 0 none) says what the probes decided.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pandas as pd

from diag.diagnose.detectors.link_hosts import hosts_by_ip, onset_ns
from diag.findings import Evidence, Finding, LinkRef

PROBE = "tcp_pair"
#: Evidence metric: what the probe round decided (value: hosts named; 0 none).
PROBE_LOCALIZATION = "probe_localization"
PROBE_RATE = "probe_rate"
PROBE_FAILED = "probe_failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkProbeConfig:
    """Thresholds of the matrix (module docstring)."""

    min_ratio: float = 2.0  # rates this many times lower: a slow link (a limit is far more)
    margin: float = 1.5  # ... and this many times the next host's contrast (log)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a round's matrix names: ``hosts`` (one: ``direction`` "in" or "out" of it; two: the
    pair, ``direction`` "src->dst"; none), its rate and the others' median (MB/s)."""

    hosts: tuple[str, ...]
    direction: str = ""
    rate: float = math.nan
    others: float = math.nan


def rates(
    probes: pd.DataFrame, tcp: pd.DataFrame, since_ns: int | None
) -> dict[tuple[str, str], float]:
    """Directed host pair -> best rate (MB/s) of the ``tcp_pair`` results that came back
    ``ok`` at or after ``since_ns`` (a limit caps every measurement of a pair; load on either
    end only lowers some). A peer's host is the one whose daemon reported
    its address as its own (its ranks' connections, or its end of a probe); others are left
    out."""
    rows = _rows(probes, since_ns)
    if rows.empty:
        return {}
    where = hosts_by_ip(tcp)
    for host, params in zip(rows["host"], rows["params_json"], strict=True):
        where.setdefault(_param(params, "bind"), str(host))  # each end reports its own address
    rows = rows[rows["status"] == "ok"]
    got: dict[tuple[str, str], list[float]] = {}
    for host, params, value in zip(rows["host"], rows["params_json"], rows["value"], strict=True):
        src = where.get(_param(params, "peer"))
        if src is None or src == host or value is None or not value > 0:
            continue
        got.setdefault((src, str(host)), []).append(float(value))
    return {k: max(v) for k, v in got.items()}


def _rows(probes: pd.DataFrame, since_ns: int | None) -> pd.DataFrame:
    need = {"probe", "status", "host", "params_json", "value", "ts_ns"}
    if probes.empty or not need <= set(probes.columns):
        return pd.DataFrame()
    rows = probes[probes["probe"] == PROBE]
    if since_ns is not None:
        rows = rows[rows["ts_ns"] >= since_ns]
    return rows


def _param(params_json: object, key: str) -> str:
    try:
        params = json.loads(str(params_json))
    except ValueError:
        return ""
    return str(params.get(key, "")) if isinstance(params, dict) else ""


def _med_log(values: list[float]) -> float:
    return statistics.median(math.log(v) for v in values)


def localize(r: Mapping[tuple[str, str], float], cfg: LinkProbeConfig | None = None) -> Verdict:
    """The host (and direction) or pair the matrix ``r`` names (module docstring)."""
    cfg = cfg or LinkProbeConfig()
    hosts = sorted({h for pair in r for h in pair})
    if len(hosts) < 3:
        return Verdict(())
    scored: list[tuple[float, str, str, float, float]] = []  # contrast, host, dir, best, rest
    for h in hosts:
        rest = [v for (a, b), v in r.items() if h not in (a, b)]
        for direction, mine in (
            ("in", [v for (a, b), v in r.items() if b == h]),
            ("out", [v for (a, b), v in r.items() if a == h]),
        ):
            if len(mine) >= 2 and rest:
                # a limit caps every rate through it; load on a host only ever lowers some
                best, typical = max(mine), math.exp(_med_log(rest))
                scored.append((math.log(typical / best), h, direction, best, typical))
    scored.sort(key=lambda s: (-s[0], s[1], s[2]))
    if scored and scored[0][0] >= math.log(cfg.min_ratio):
        top = scored[0]
        second = max((s[0] for s in scored if s[1] != top[1]), default=0.0)
        if top[0] >= cfg.margin * max(second, 0.0):
            return Verdict((top[1],), top[2], top[3], top[4])
    (src, dst), slow = min(r.items(), key=lambda kv: (kv[1], kv[0]))
    others = [v for k, v in r.items() if k != (src, dst)]
    med = math.exp(_med_log(others))
    if math.log(med) - math.log(slow) >= math.log(cfg.min_ratio):
        return Verdict(tuple(sorted((src, dst))), f"{src}->{dst}", slow, med)
    return Verdict((), "", math.nan, med)


def failures(probes: pd.DataFrame, since_ns: int | None) -> list[Evidence]:
    """One ``probe_failed`` item per host whose probes did not come back ``ok`` (its reason)."""
    rows = _rows(probes, since_ns)
    if rows.empty:
        return []
    bad = rows[rows["status"] != "ok"]
    out = []
    for host, g in bad.groupby("host", sort=True):
        last = g.iloc[-1]
        detail = str(last.get("detail", "") or "no reason given")[:200]
        out.append(
            Evidence(
                metric=PROBE_FAILED, subject=str(host), value=float(len(g)), unit="probes",
                note=f"{last['status']}: {detail}",
            )
        )  # fmt: skip
    return out


def refine(
    f: Finding,
    probes: pd.DataFrame,
    tcp: pd.DataFrame,
    step_events: pd.DataFrame,
    hosts_of: Mapping[int, str],
    cfg: LinkProbeConfig | None = None,
) -> Finding:
    """``f`` (a link finding) narrowed to what its probe round named (module docstring);
    unchanged when no ``tcp_pair`` result came back after its onset."""
    if f.cause != "link" or f.link is None:
        return f
    start = onset_ns(step_events, f.onset_step)
    if _rows(probes, start).empty:
        return f
    r = rates(probes, tcp, start)
    v = localize(r, cfg)
    failed = failures(probes, start)
    n_hosts = len({h for pair in r for h in pair})
    what = _what(v)
    decided = Evidence(
        metric=PROBE_LOCALIZATION,
        subject=", ".join(v.hosts) if v.hosts else ", ".join(f.link.hosts),
        value=float(len(v.hosts)),
        reference=None if math.isnan(v.others) else v.others,
        unit="hosts",
        note=(
            f"point-to-point TCP probes between {n_hosts} hosts ({len(r)} directed pairs): "
            + (f"{what}: {v.rate:.1f} MB/s vs {v.others:.1f} MB/s between the others"
               if v.hosts else "no link stood out"
               + (f" (median {v.others:.1f} MB/s)" if not math.isnan(v.others) else ""))
            + (f"; {len(failed)} host(s) could not run theirs" if failed else "")
        ),
    )  # fmt: skip
    shown = [
        Evidence(
            metric=PROBE_RATE, subject=f"{a} -> {b}", value=rate,
            reference=None if math.isnan(v.others) else v.others, unit="MB/s",
            note="received by the probe at the second host",
        )
        for (a, b), rate in sorted(r.items(), key=lambda kv: kv[1])
        if not v.hosts or set(v.hosts) & {a, b}
    ][:6]  # fmt: skip
    evidence = (*f.evidence, decided, *shown, *failed)
    if not v.hosts:
        return replace(f, evidence=evidence)
    named = v.hosts
    ranks = tuple(sorted(r_ for r_, h in hosts_of.items() if h in named)) or f.ranks
    head = f.summary.split(": the ranks' TCP connections name", 1)[0]
    head = head.split(": suspect the link", 1)[0].split("; suspect ", 1)[0]
    summary = (
        f"{head}: point-to-point probes name {what} "
        f"({v.rate:.1f} MB/s against {v.others:.1f} MB/s between the other hosts)"
    )
    return replace(
        f,
        ranks=ranks,
        hosts=named,
        link=LinkRef(ranks=ranks, hosts=named, group=f.link.group),
        summary=summary,
        evidence=evidence,
    )


def _what(v: Verdict) -> str:
    if len(v.hosts) == 1:
        way = "into it" if v.direction == "in" else "out of it"
        return f"host {v.hosts[0]}'s link (traffic {way})"
    if len(v.hosts) == 2:
        src, dst = v.direction.split("->")
        return f"the link between {src} and {dst} (traffic {src} -> {dst})"
    return ""
