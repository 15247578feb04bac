"""Link detector: collectives of one process group slow while compute is balanced and ranks
arrive together, so the time goes to the wire, not to a late rank.

Per collective (matched across ranks by ``(pg_name, seq_id)``, point-to-point ops left out):

- **arrival skew** = ``max(enqueue_ns) - min(enqueue_ns)`` over its ranks (raw host clocks: it
  assumes hosts are synced to well under a collective's duration);
- **transfer** = the smallest per-rank duration (``duration_ns``, else ``end_ns - start_ns``).
  The last rank to arrive waits for nobody, so its duration is the transfer itself, and each
  duration is measured on one host's clock. Without durations (e.g. gloo) the proxy is the
  smallest ``collective_wait_ns`` over the group's ranks in the collective's step: coarse (a
  rank's wait covers all its groups), and flagged in the evidence;
- **cost** = transfer / ``num_bytes`` (ns per byte, the inverse bandwidth; per call when bytes
  are unknown).

Per group and step the cost is the median over the group's collectives in the step. A step is
*slow* for a group when its cost is ``slow_ratio`` x its own baseline (the median over its first
``baseline_steps`` steps) or ``slow_ratio`` x the median of its peers (other groups of the same
size spanning as many hosts) in that step. A group is slow when, from an onset step on, at least
``persist_frac`` of its steps (and ``min_slow_steps``) are slow, and over those steps compute is
balanced (median of the per-step ``max / median compute_ns`` over ranks <= ``max_compute_ratio``)
and arrivals aligned (median skew <= ``max_skew_ratio`` x median transfer, or <= ``skew_floor_ns``).

Localization: the host pairs each group spans; the suspect pairs are those common to every slow
group and absent from the fast ones (or, when the fast groups use the same pairs, those common to
the slow groups: then the ranks point at the NICs). ``slowdown`` = median over slow steps of the
group's excess transfer (transfer - baseline cost x bytes) / the step's median duration (an upper
bound: collectives may overlap compute). Severity: ``critical`` at ``critical_slowdown``,
``warning`` at ``warn_slowdown``, else ``info`` (``warning`` when step durations are unknown).
Confidence = 0.4 + 0.3 x persistence + 0.15 (measured durations, not the proxy) + 0.1 (a unique
host pair, or a peer group that stayed fast), at most 0.95.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from diag.analysis.findings import Evidence, Finding, LinkRef
from diag.analysis.store import RunStore


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkConfig:
    """Thresholds of the link detector (see the module doc for the formulas)."""

    slow_ratio: float = 1.5  # cost / baseline (or / peers) for a slow step
    baseline_steps: int = 10  # a group's first steps: its own baseline
    min_slow_steps: int = 5  # fewer slow steps is noise
    persist_frac: float = 0.8  # share of steps from the onset on that must be slow
    max_compute_ratio: float = 1.15  # per-step max/median compute_ns above this: leave to node
    max_skew_ratio: float = 0.5  # median skew / median transfer above this: a late rank
    skew_floor_ns: int = 1_000_000  # skews under 1 ms always count as aligned
    warn_slowdown: float = 0.05
    critical_slowdown: float = 0.2


def detect_from_store(store: RunStore, cfg: LinkConfig | None = None) -> list[Finding]:
    """:func:`detect` on the store's ``collective`` and ``step`` frames."""
    kinds = store.kinds()
    if "collective" not in kinds:
        return []
    steps = store.frame("step") if "step" in kinds else pd.DataFrame()
    return detect(store.frame("collective"), steps, cfg or LinkConfig())


def detect(collectives: pd.DataFrame, steps: pd.DataFrame, cfg: LinkConfig) -> list[Finding]:
    """Link findings from a ``collective`` frame and a ``step`` frame (may be empty)."""
    coll = _per_collective(collectives, steps)
    if coll.empty:
        return []
    hosts = _hosts_by_rank(collectives, steps)
    ranks_of = {g: tuple(sorted(r)) for g, r in coll.groupby("pg")["ranks"].first().items()}
    span = {g: tuple(sorted({hosts.get(r, "?") for r in rs})) for g, rs in ranks_of.items()}
    cost = coll.groupby(["pg", "step"])["cost"].median().unstack("pg").sort_index()
    imbalance = _compute_imbalance(steps)
    step_ns = steps.groupby("step")["duration_ns"].median() if len(steps) else pd.Series()
    slow: dict[str, dict] = {}
    for g in cost.columns:
        peers = [
            p
            for p in cost.columns
            if p != g and _kind(p, ranks_of, span) == _kind(g, ranks_of, span)
        ]
        res = _slow_group(g, cost, peers, coll, imbalance, step_ns, cfg)
        if res is not None:
            slow[g] = res
    if not slow:
        return []
    pairs = {g: _pairs(span[g]) for g in cost.columns}
    fast_pairs = set().union(*(pairs[g] for g in cost.columns if g not in slow))
    common = set.intersection(*(pairs[g] for g in slow))
    suspect = common - fast_pairs or common
    clusters = [sorted(slow)] if suspect and len(slow) > 1 else [[g] for g in sorted(slow)]
    return [
        _finding(
            c, slow, ranks_of, span, suspect, fast_pairs, bool(set(cost.columns) - set(slow)), cfg
        )
        for c in clusters
    ]


def _per_collective(collectives: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per matched collective: pg, seq, step, ranks, skew, transfer, bytes, cost, proxy."""
    c = collectives
    if c.empty:
        return pd.DataFrame()
    c = c[(c["rank"] >= 0) & (c["seq_id"] >= 0) & ~c["is_p2p"]].copy()
    if c.empty:
        return pd.DataFrame()
    c["pg"] = c["pg_name"].where(c["pg_name"] != "", "default")
    c["step"] = _steps_of(c, steps)
    dur = c["duration_ns"].astype("Float64")
    dur = dur.fillna((c["end_ns"] - c["start_ns"]).astype("Float64"))
    c["dur"] = dur.astype(float)
    rows = []
    wait = _wait_by_rank_step(steps)
    for (pg, seq), grp in c.groupby(["pg", "seq_id"], sort=True):
        ranks = tuple(sorted({int(r) for r in grp["rank"]}))
        durations = grp["dur"].dropna()
        step = int(grp["step"].max())
        proxy = durations.empty
        if proxy:
            waits = [wait.get((r, step)) for r in ranks]
            if step < 0 or any(w is None for w in waits):
                continue
            transfer = float(min(w for w in waits if w is not None))
        else:
            transfer = float(durations.min())
        nbytes = float(grp["num_bytes"].max())
        rows.append(
            {
                "pg": pg,
                "seq": int(seq),
                "step": step,
                "ranks": ranks,
                "skew": float(grp["enqueue_ns"].max() - grp["enqueue_ns"].min()),
                "transfer": transfer,
                "bytes": nbytes,
                "cost": transfer / nbytes if nbytes > 0 else transfer,
                "proxy": proxy,
            }
        )
    out = pd.DataFrame(rows)
    return out[out["step"] >= 0] if len(out) else out


def _steps_of(c: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """The envelope step, else the rank's step whose end is the first at/after the enqueue."""
    out = c["step"].to_numpy(dtype=np.int64).copy()
    if steps.empty or (out >= 0).all():
        return out
    for rank, idx in c.groupby("rank").groups.items():
        st = steps[steps["rank"] == rank].sort_values("end_ns")
        if st.empty:
            continue
        pos = np.searchsorted(st["end_ns"].to_numpy(), c.loc[idx, "enqueue_ns"].to_numpy())
        cand = st["step"].to_numpy()[np.minimum(pos, len(st) - 1)]
        cand = np.where(pos < len(st), cand, -1)
        loc = c.index.get_indexer(idx)
        out[loc] = np.where(out[loc] >= 0, out[loc], cand)
    return out


def _wait_by_rank_step(steps: pd.DataFrame) -> dict[tuple[int, int], float]:
    if steps.empty:
        return {}
    s = steps[steps["rank"] >= 0]
    return {
        (int(r), int(k)): float(w)
        for r, k, w in zip(s["rank"], s["step"], s["collective_wait_ns"], strict=True)
    }


def _hosts_by_rank(*frames: pd.DataFrame) -> dict[int, str]:
    out: dict[int, str] = {}
    for f in frames:
        if len(f):
            for r, h in zip(f["rank"], f["host"], strict=True):
                if r >= 0:
                    out.setdefault(int(r), str(h))
    return out


def _compute_imbalance(steps: pd.DataFrame) -> pd.Series:
    """Per step: max / median ``compute_ns`` over ranks (1.0 is balanced)."""
    if steps.empty:
        return pd.Series(dtype=float)
    s = steps[(steps["rank"] >= 0) & (steps["compute_ns"] > 0)]
    agg = s.groupby("step")["compute_ns"].agg(["max", "median"])
    return agg["max"] / agg["median"]


def _kind(g: str, ranks_of: dict, span: dict) -> tuple[int, int]:
    return (len(ranks_of[g]), len(span[g]))


def _pairs(hosts: tuple[str, ...]) -> set[tuple[str, str]]:
    return set(combinations(hosts, 2)) if len(hosts) > 1 else {(hosts[0], hosts[0])}


def _slow_group(
    g: str,
    cost: pd.DataFrame,
    peers: list[str],
    coll: pd.DataFrame,
    imbalance: pd.Series,
    step_ns: pd.Series,
    cfg: LinkConfig,
) -> dict | None:
    """The group's slow period and its numbers, or ``None`` when it is not a link suspect."""
    series = cost[g].dropna()
    if len(series) < cfg.min_slow_steps:
        return None
    base = float(series.iloc[: cfg.baseline_steps].median())
    peer = cost[peers].median(axis=1).reindex(series.index) if peers else None
    self_slow = series >= cfg.slow_ratio * base
    is_slow = self_slow | (series >= cfg.slow_ratio * peer) if peer is not None else self_slow
    flags = is_slow.to_numpy()
    onset_i = None
    for i in range(len(flags)):
        if (
            flags[i]
            and flags[i:].mean() >= cfg.persist_frac
            and flags[i:].sum() >= cfg.min_slow_steps
        ):
            onset_i = i
            break
    if onset_i is None:
        return None
    slow_steps = series.index[onset_i:][flags[onset_i:]]
    balance = imbalance.reindex(slow_steps).dropna()
    if len(balance) and float(balance.median()) > cfg.max_compute_ratio:
        return None
    rows = coll[(coll["pg"] == g) & coll["step"].isin(slow_steps)]
    med_transfer = float(rows["transfer"].median())
    med_skew = float(rows["skew"].median())
    if med_skew > max(cfg.skew_floor_ns, cfg.max_skew_ratio * med_transfer):
        return None
    # A group slow from its first step has itself as baseline: use the peers' cost instead.
    ref = base if onset_i >= cfg.baseline_steps or peer is None else float(peer.median())
    excess = (rows["transfer"] - ref * rows["bytes"].where(rows["bytes"] > 0, 1.0)).clip(lower=0)
    per_step = excess.groupby(rows["step"]).sum()
    slowdown = None
    if len(step_ns.reindex(per_step.index).dropna()):
        slowdown = float(min(1.0, (per_step / step_ns.reindex(per_step.index)).median()))
    onset = int(series.index[onset_i])
    return {
        "onset": None if onset_i == 0 else onset,
        "detected": int(slow_steps[min(cfg.min_slow_steps, len(slow_steps)) - 1]),
        "persist": float(flags[onset_i:].mean()),
        "ratio": float(series.loc[slow_steps].median() / ref) if ref > 0 else float("inf"),
        "transfer": med_transfer,
        "skew": med_skew,
        "imbalance": float(imbalance.reindex(slow_steps).median()) if len(imbalance) else None,
        "slowdown": slowdown,
        "proxy": bool(rows["proxy"].any()),
    }


def _finding(
    groups: list[str],
    slow: dict[str, dict],
    ranks_of: dict[str, tuple[int, ...]],
    span: dict[str, tuple[str, ...]],
    suspect: set[tuple[str, str]],
    fast_pairs: set[tuple[str, str]],
    has_fast_peer: bool,
    cfg: LinkConfig,
) -> Finding:
    stats = [slow[g] for g in groups]
    ranks = tuple(sorted({r for g in groups for r in ranks_of[g]}))
    pair = sorted(suspect)[0] if len(suspect) == 1 else None
    hosts = (
        tuple(sorted(set(pair))) if pair else tuple(sorted({h for g in groups for h in span[g]}))
    )
    slowdowns = [s["slowdown"] for s in stats if s["slowdown"] is not None]
    slowdown = max(slowdowns) if slowdowns else None
    if slowdown is None:
        severity = "warning"
    else:
        severity = (
            "critical"
            if slowdown >= cfg.critical_slowdown
            else "warning"
            if slowdown >= cfg.warn_slowdown
            else "info"
        )
    persist = statistics.mean(s["persist"] for s in stats)
    measured = not any(s["proxy"] for s in stats)
    confidence = 0.4 + 0.3 * persist + 0.15 * measured + 0.1 * bool(pair or has_fast_peer)
    onsets = [s["onset"] for s in stats if s["onset"] is not None]
    name = ",".join(groups)
    where = f"between {' and '.join(hosts)}" if len(hosts) > 1 else f"inside {hosts[0]}"
    if pair and pair not in fast_pairs:
        probe = f"confirm with a point-to-point bandwidth probe between {pair[0]} and {pair[1]}"
    else:
        probe = (
            f"confirm with point-to-point bandwidth probes between ranks "
            f"{', '.join(map(str, ranks))} "
            f"({where}), against a fast group's ranks on the same hosts"
        )
    evidence = []
    for g, s in zip(groups, stats, strict=True):
        note = "proxy: collective_wait_ns" if s["proxy"] else ""
        evidence += [
            Evidence(
                metric="transfer_cost_ratio",
                subject=f"group {g}",
                value=s["ratio"],
                reference=1.0,
                unit="x",
                note=note,
            ),
            Evidence(
                metric="arrival_skew_ns",
                subject=f"group {g}",
                value=s["skew"],
                reference=s["transfer"],
                unit="ns",
                note="median skew vs median transfer",
            ),
        ]
        if s["imbalance"] is not None:
            evidence.append(
                Evidence(
                    metric="compute_imbalance",
                    subject=f"group {g}",
                    value=s["imbalance"],
                    reference=cfg.max_compute_ratio,
                    unit="max/median",
                )
            )
    return Finding(
        id=f"link:{name}",
        symptom="slowdown",
        cause="link",
        severity=severity,
        ranks=ranks,
        hosts=hosts,
        link=LinkRef(ranks=ranks, hosts=hosts, group=name),
        onset_step=min(onsets) if onsets else None,
        detected_step=max(s["detected"] for s in stats),
        slowdown=slowdown,
        confidence=min(0.95, confidence),
        summary=(
            f"collectives of group {name} (ranks {list(ranks)}) are "
            f"{stats[0]['ratio']:.1f}x slower per byte while compute is balanced and ranks "
            f"arrive together: suspect the link "
            f"{where}; {probe}"
        ),
        evidence=tuple(evidence),
    )
