"""A lossy link, from the ranks' own TCP connections: retransmissions on some host pairs only,
from the moment the job's steps got slower.

The group detector (:mod:`.link`) looks for collectives persistently slower per byte. A link that
drops packets does not slow every collective: TCP recovers most losses quickly and stalls on a
few (a retransmission timeout), so the job loses its time in bursts (measured on four emulated
nodes, one host's port dropping beyond a 16-packet queue: median step 26 -> 39 ms, p90 43 -> 107
ms, mean 45% slower) and the smoothed per-byte cost rarely stays 1.5x up. The kernel sees the
cause directly: the connections that cross the lossy port retransmit, the others do not
(:class:`~diag.schema.TcpPeerSample` ``bytes_retrans``).

Per directed host pair (the sending host and the host whose ranks' connections use the remote
address; loopback and unknown addresses left out): bytes acked and retransmitted. A *heavy* pair
carried at least ``heavy_share`` of the busiest pair's bytes over the run. A pair's onset is its
first sample retransmitting a quarter of ``min_loss`` or more after which at least ``sustained``
of its data-carrying samples do too; from its onset on, it is *lossy* when it retransmitted at
least ``min_loss`` of its bytes and ``min_ratio`` times the median of the other heavy pairs over
the same time (a lossy port, not a congested fabric where everyone loses). Counted from the
onset, not over the run: a port that starts dropping mid-run had its loss diluted by the clean
part before (a held-out run lost 0.29% of its bytes after its onset at step 30 of 80, 0.18%
over the run, under the 0.2% floor, and was missed). The samples are a second apart, so the
onset step is the step-time change point among the steps that started in the earliest lossy
pair's onset sample.

A finding only when the job slowed from then on: the mean step (every rank's median per step)
after the onset is ``min_slowdown`` or more above the ``baseline_steps`` steps before it, the
share lost is ``slowdown``. It names the lossy pairs' common host when they all send to it (its
way in) or all come from it (its way out), else their hosts; the closed loop's probe round can
then tell which end (:mod:`diag.analyzer.linkprobe`). Only where no group finding covers the run
already (that one carries the same ``tcp_loss`` evidence, :mod:`.link_hosts`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.diagnose.detectors.link_hosts import pair_reads
from diag.diagnose.detectors.node_slow import severity
from diag.diagnose.features import mean_change_point
from diag.findings import Evidence, Finding, LinkRef


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkLossConfig:
    """Thresholds (module docstring)."""

    heavy_share: float = 0.1
    min_loss: float = 0.002  # 0.2% of the bytes retransmitted
    min_ratio: float = 10.0  # ... and 10x the other heavy pairs' median
    sustained: float = 0.5
    baseline_steps: int = 20  # steps before the onset compared with those after (at most)
    min_baseline_steps: int = 5
    skip_steps: int = 2  # warm-up, never a baseline
    stall_ratio: float = 3.0  # a step this many times the median of those before it: a stall
    min_steps_after: int = 10
    min_slowdown: float = 0.1  # the job's mean step at least 10% longer after the onset
    warn_slowdown: float = 0.05
    critical_slowdown: float = 0.2


@dataclass(frozen=True, slots=True)
class _Pair:
    src: str
    dst: str
    acked: int  # over the run
    onset_ns: int | None  # when the interval of its first sustained-loss sample began
    onset_end_ns: int | None  # ... and ended (the sample's time)
    ts_ns: np.ndarray  # its samples: time, bytes acked and retransmitted in the interval
    sample_acked: np.ndarray
    sample_retrans: np.ndarray

    def since(self, t_ns: int) -> tuple[int, int]:
        """Bytes acked and retransmitted in the samples taken at ``t_ns`` or later (a sample's
        own time: its interval's start is the previous read's, a few us off the previous
        sample's time)."""
        keep = self.ts_ns >= t_ns
        return int(self.sample_acked[keep].sum()), int(self.sample_retrans[keep].sum())

    def loss_since(self, t_ns: int) -> float:
        acked, retrans = self.since(t_ns)
        return retrans / acked if acked else 0.0

    @property
    def loss(self) -> float:
        """The share of its bytes retransmitted from its onset sample on (0 without one)."""
        return 0.0 if self.onset_end_ns is None else self.loss_since(self.onset_end_ns)


def _pairs(tcp: pd.DataFrame, cfg: LinkLossConfig) -> list[_Pair]:
    df = pair_reads(tcp, ("bytes_acked", "bytes_retrans"))
    if df.empty:
        return []
    out = []
    for (src, dst), g in df.groupby(["host", "dst"], sort=True):
        span = _onset(g, cfg)
        out.append(
            _Pair(str(src), str(dst), int(g["bytes_acked"].sum()),
                  span[0] if span else None, span[1] if span else None,
                  g["ts_ns"].to_numpy(dtype=np.int64), g["bytes_acked"].to_numpy(dtype=np.int64),
                  g["bytes_retrans"].to_numpy(dtype=np.int64))
        )  # fmt: skip
    return out


def _onset(g: pd.DataFrame, cfg: LinkLossConfig) -> tuple[int, int] | None:
    """The interval (start, end ns) of the pair's first lossy sample after which ``sustained``
    of its data-carrying samples are lossy too (``None``: no such sample). A sample is lossy
    when it retransmitted a quarter of ``min_loss`` or more of what it acked (a few hundred
    bytes at connection set-up are not a lossy link: seen on a run whose port lost nothing
    before its fault)."""
    data = g[g["bytes_acked"] > 0]
    lost = (data["bytes_retrans"] >= data["bytes_acked"] * cfg.min_loss / 4).to_numpy()
    for i in range(len(lost)):
        if lost[i] and lost[i:].mean() >= cfg.sustained:
            row = data.iloc[i]
            return int(row["ts_ns"]) - int(row["interval_ns"]), int(row["ts_ns"])
    return None


def detect(
    tcp: pd.DataFrame,
    step_events: pd.DataFrame,
    hosts_of: Mapping[int, str],
    cfg: LinkLossConfig | None = None,
) -> list[Finding]:
    """At most one lossy-link finding (module docstring)."""
    cfg = cfg or LinkLossConfig()
    pairs = _pairs(tcp, cfg)
    if not pairs or step_events.empty:
        return []
    busiest = max(p.acked for p in pairs)
    heavy = [p for p in pairs if busiest and p.acked >= cfg.heavy_share * busiest]
    lossy: list[_Pair] = []
    floors: dict[tuple[str, str], float] = {}  # per lossy pair: the other heavy pairs' loss then
    for p in heavy:
        if p.onset_end_ns is None:
            continue
        others = [o.loss_since(p.onset_end_ns) for o in heavy if o is not p]
        floor = statistics.median(others) if others else 0.0
        if p.loss >= cfg.min_loss and p.loss >= cfg.min_ratio * floor:
            lossy.append(p)
            floors[p.src, p.dst] = floor
    if not lossy:
        return []
    first = min(lossy, key=lambda p: (p.onset_ns, p.src, p.dst))
    per_step = job_steps(step_events)
    if per_step.empty:
        return []
    at = _onset_index(per_step, first, cfg)
    after = per_step.iloc[at:]
    before = per_step.iloc[max(cfg.skip_steps, at - cfg.baseline_steps) : at]
    if len(after) < cfg.min_steps_after or len(before) < cfg.min_baseline_steps:
        return []
    base, slow = float(before["dur"].mean()), float(after["dur"].mean())
    if not base > 0 or slow < base * (1 + cfg.min_slowdown):
        return []
    slowdown = 1.0 - base / slow
    onset = int(after["step"].iloc[0])
    hosts, where = _where(lossy)
    ranks = tuple(sorted(r for r, h in hosts_of.items() if h in hosts))

    evidence = []
    for p in sorted(lossy, key=lambda p: -p.loss):
        assert p.onset_end_ns is not None
        acked, retrans = p.since(p.onset_end_ns)
        floor = floors[p.src, p.dst]
        evidence.append(
            Evidence(
                metric="tcp_loss", subject=f"{p.src} -> {p.dst}", value=p.loss, reference=floor,
                unit="fraction",
                note=f"{retrans} of {acked} bytes retransmitted since the pair's loss began; "
                f"the other heavy host pairs' median over the same time {floor:.4%}",
            )
        )  # fmt: skip
    evidence.append(
        Evidence(
            metric="step_time", subject="job", value=slow / 1e6, reference=base / 1e6,
            unit="ms", note=f"mean step since step {onset} against the {len(before)} steps before",
        )
    )  # fmt: skip
    worst = max(lossy, key=lambda p: p.loss)
    rest = floors[worst.src, worst.dst]
    return [
        Finding(
            id=f"link-loss:{'-'.join(hosts)}",
            symptom="slowdown",
            cause="link",
            severity=severity(slowdown, cfg.warn_slowdown, cfg.critical_slowdown),
            ranks=ranks,
            hosts=hosts,
            link=LinkRef(ranks=ranks, hosts=hosts, group=""),
            onset_step=onset,
            detected_step=int(after["step"].iloc[min(len(after), cfg.min_steps_after) - 1]),
            slowdown=slowdown,
            confidence=min(0.9, 0.55 + 0.1 * math.log10(worst.loss / max(rest, 1e-5))),
            summary=(
                f"TCP connections {worst.src} -> {worst.dst} retransmit {worst.loss:.2%} of "
                f"their bytes (the other host pairs {rest:.2%}) since step {onset}, and the "
                f"job's steps take {slow / base:.2f}x as long on average (stalls, not a steady "
                f"slowdown): a lossy link; suspect {where}"
            ),
            evidence=tuple(evidence),
        )
    ]


def _onset_index(per_step: pd.DataFrame, p: _Pair, cfg: LinkLossConfig) -> int:
    """The onset step's index: the connections' samples are a second apart, so among the steps
    that started in the interval where the loss began, the split of the step durations into a
    before and an after of least summed squared deviation from their means
    (:func:`~diag.diagnose.features.mean_change_point`: the stalls are the change, which the
    robust split the other detectors use leaves out as spikes), or the first step of the
    interval before that split that took ``stall_ratio`` times the median step before it or
    longer (a lone stall ahead of the split's run of them: a retransmission timeout is 200 ms;
    a busy host's noise doubled a 30 ms step); the first step after the interval began when
    none started in it."""
    assert p.onset_ns is not None and p.onset_end_ns is not None
    starts = per_step["start_ns"].to_numpy()
    inside = [i for i in range(len(starts)) if p.onset_ns <= starts[i] <= p.onset_end_ns]
    inside = [i for i in inside if i > cfg.skip_steps]
    if inside:
        x = per_step["dur"].to_numpy(dtype=float)
        lo = max(cfg.skip_steps, inside[0] - cfg.baseline_steps)
        hi = min(len(x), inside[-1] + cfg.baseline_steps)
        t = mean_change_point(x, inside, start=lo, stop=hi)
        if t is None:
            return inside[0]
        # an earlier stall of the interval, alone before the split's run of them: the onset
        stall = cfg.stall_ratio * float(np.median(x[lo:t]))
        first = [i for i in inside if i < t and x[i] >= stall]
        return first[0] if first else t
    later = [i for i in range(len(starts)) if starts[i] >= p.onset_ns]
    return later[0] if later else len(starts)


def job_steps(step_events: pd.DataFrame) -> pd.DataFrame:
    """Per step: when its first rank started and the median duration over the ranks (``dur``)."""
    if not {"step", "start_ns", "end_ns"} <= set(step_events.columns):
        return pd.DataFrame()
    df = step_events.assign(dur=step_events["end_ns"] - step_events["start_ns"])
    df = df[df["dur"] > 0]
    return (
        df.groupby("step", sort=True)
        .agg(start_ns=("start_ns", "min"), dur=("dur", "median"))
        .reset_index()
    )


def _where(lossy: list[_Pair]) -> tuple[tuple[str, ...], str]:
    dsts, srcs = {p.dst for p in lossy}, {p.src for p in lossy}
    if len(dsts) == 1 and len(lossy) > 1:
        (h,) = dsts
        return (h,), f"host {h}'s way in (every lossy connection goes to it)"
    if len(srcs) == 1 and len(lossy) > 1:
        (h,) = srcs
        return (h,), f"host {h}'s way out (every lossy connection comes from it)"
    hosts = tuple(sorted(dsts | srcs))
    if len(hosts) == 2:
        return (
            hosts,
            f"between {hosts[0]} and {hosts[1]} (the sender's way out or the receiver's way in)",
        )
    return hosts, f"on the hosts {', '.join(hosts)}"
