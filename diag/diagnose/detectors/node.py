"""Node detector: a rank (or every rank of a host) whose compute is persistently above its peers'.

In synchronous training a slow rank makes everyone else wait in the collectives, so the signature
is two-sided: the culprit's ``compute_ms`` is above the median of its peers' (the other ranks at
the same step) while the peers' ``wait_ms`` grows by about that excess.

``compute_ms`` is the rank's own compute (:mod:`diag.diagnose.features`: less the time its training
thread waited for a CPU), so a rank descheduled on an oversubscribed host is not taken for a slow
device. Per step and rank: ``ratio = compute_ms / median(peers' compute_ms)``; the step is
*flagged* when ``ratio >= min_ratio`` and the excess ``compute_ms - peers' median`` is at least
``max(min_excess_ms, min_excess_frac x job step)`` (scheduler jitter on a busy node makes a 2 ms
compute look 2x slow now and then). The rank is slow when flagged in ``>= min_frac`` of a sliding
window of ``window`` steps (warm-up steps skipped). ``onset_step`` is the change point of the
rank's ratio near the first such window (the step that best separates a lower median ratio before
from a higher one after, ``window`` steps each side); when it is within the first ``window``
analysed steps, or the rank was flagged from the first window on, or its median ratio before the
onset already held ``structural_share`` (half) of the gap after it (noise hid early flags), the
imbalance was there from the start: cause ``structural``, ``onset_step`` None.

- ``slowdown`` (onset): ``(median job step in the anomaly - median job step before onset) /
  median job step in the anomaly``, at most the culprit's excess compute over that same step; the
  job step is the per-step median of ``duration_ms``.
- ``slowdown`` (structural): the culprit's median excess compute over its peers' median, divided
  by the median job step.
- The peers' wait must explain the excess: peers' median ``wait_ms`` grows (onset: after - before;
  structural: peers' wait - culprit's wait) by at least ``min_wait_explained`` x the excess.
- ``confidence = consistency x (0.5 + 0.5 x min(1, (median ratio - 1) / confident_gap))``, capped
  at 0.99: consistency is the fraction of flagged steps from onset to the end of the anomaly; a
  gap of ``confident_gap`` (20%) or more counts fully (a slow host: the mean over its ranks).
- Corroboration (:mod:`~diag.diagnose.detectors.node_evidence`): the finding's evidence adds
  what else says the culprit is slow over the anomaly's wall-clock span: its GPU against its
  peers' GPUs (SM clock, throttle reasons, temperature, power), XID/ECC errors on its GPU, other
  processes' CPU on its host, and (onset findings) its own compute before onset vs after. Each
  independent source that agrees (``gpu``, ``gpu_errors``, ``host``; own history is not one, it
  restates the detection) raises the confidence:
  ``confidence = min(0.99, confidence + 0.05 x number of corroborating sources)``; without
  telemetry it is unchanged.
- severity: ``critical`` if slowdown >= 0.3, ``warning`` if >= 0.1, else ``info``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.diagnose.detectors import node_evidence
from diag.diagnose.features import (
    Features,
    Persistence,
    peer_median,
    persistence,
    persistent_columns,
)
from diag.findings import Evidence, Finding


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """Thresholds of the node detector (see the module docstring for how each is used)."""

    warmup_steps: int = 5  # first steps of the run ignored (compilation, allocator warm-up)
    min_ratio: float = 1.08  # per-step compute / peers' median that flags a step
    min_excess_ms: float = 1.0  # ... and compute above the peers' median by at least this much
    min_excess_frac: float = 0.05  # ... and by at least this share of the job's step
    window: int = 10  # sliding window, in steps
    min_frac: float = 0.8  # flagged fraction of a window that makes it persistent
    min_wait_explained: float = 0.5  # peers' wait growth / culprit's excess compute
    confident_gap: float = 0.2  # compute gap (ratio - 1) that counts fully toward confidence
    structural_share: float = 0.5  # gap before the onset / gap after it that means "no onset"
    warning: float = 0.1  # slowdown for severity "warning"
    critical: float = 0.3  # slowdown for severity "critical"


def severity(slowdown: float, warning: float, critical: float) -> str:
    """``critical`` / ``warning`` / ``info`` for a slowdown (fraction of step time lost)."""
    return "critical" if slowdown >= critical else "warning" if slowdown >= warning else "info"


def confidence(consistency: float, gap: float, confident_gap: float) -> float:
    """``consistency x (0.5 + 0.5 x min(1, gap / confident_gap))``, in [0, 0.99]."""
    size = min(1.0, max(0.0, gap) / confident_gap)
    return float(min(0.99, max(0.0, consistency * (0.5 + 0.5 * size))))


@dataclass(frozen=True, slots=True)
class _Slow:
    rank: int
    run: Persistence
    onset: int | None  # step, None for structural
    detected: int
    slowdown: float
    gap: float  # median ratio - 1 in the anomaly
    culprit_ms: float
    peers_ms: float
    wait_before: float | None
    wait_after: float
    anomaly: tuple[int, int]  # first and last step of the anomaly
    before: tuple[int, int] | None  # first and last analysed step before onset; None: structural
    own_before_ms: float | None  # the rank's median compute before onset; None: structural


def detect(features: Features, cfg: NodeConfig | None = None) -> list[Finding]:
    """Slow ranks, grouped into a slow host when every rank of that host is slow."""
    cfg = cfg or NodeConfig()
    compute = features.wide("compute_ms", cfg.warmup_steps)
    if compute.shape[1] < 2 or len(compute) < cfg.window:
        return []
    wait = features.wide("wait_ms", cfg.warmup_steps).reindex_like(compute)
    job_step = features.wide("duration_ms", cfg.warmup_steps).reindex_like(compute).median(axis=1)
    peers = peer_median(compute)
    ratio = compute / peers
    # A step is flagged when the rank is slower than its peers both relatively and absolutely:
    # on a busy node scheduler jitter makes 2 ms of compute look 2x slow now and then.
    floor = np.maximum(cfg.min_excess_ms, cfg.min_excess_frac * job_step.to_numpy())
    flagged_frame = (ratio >= cfg.min_ratio) & ((compute - peers).ge(floor, axis=0))
    slow = []
    # Only ranks with a persistent run of flagged steps can be slow: find them all at once.
    flagged = flagged_frame.to_numpy()
    for rank in compute.columns[persistent_columns(flagged, cfg.window, cfg.min_frac)]:
        found = _slow_rank(int(rank), compute, wait, job_step, peers, ratio, flagged_frame, cfg)
        if found is not None:
            slow.append(found)
    return _group_by_host(slow, features, cfg)


def _slow_rank(
    rank: int,
    compute: pd.DataFrame,
    wait: pd.DataFrame,
    job_step: pd.Series,
    peers: pd.DataFrame,
    ratio: pd.DataFrame,
    flagged: pd.DataFrame,
    cfg: NodeConfig,
) -> _Slow | None:
    flags = flagged[rank].to_numpy()
    run = persistence(flags, cfg.window, cfg.min_frac)
    if run is None:
        return None
    run = _refine_onset(run, flags, ratio[rank].to_numpy(), cfg)
    steps = compute.index.to_numpy()
    anomaly = slice(run.onset_pos, run.end_pos + 1)
    others = [c for c in compute.columns if c != rank]
    culprit_ms = float(compute[rank].iloc[anomaly].median())
    peers_ms = float(peers[rank].iloc[anomaly].median())
    excess = culprit_ms - peers_ms
    peers_wait = wait[others].median(axis=1)
    wait_after = float(peers_wait.iloc[anomaly].median())
    gap = float(ratio[rank].iloc[anomaly].median()) - 1.0
    before_gap = float(ratio[rank].iloc[: run.onset_pos].median()) - 1.0 if run.onset_pos else 0.0
    held = gap > 0 and before_gap >= cfg.structural_share * gap
    structural = run.onset_pos < cfg.window or held
    if structural:
        wait_before = None
        grown = wait_after - float(wait[rank].iloc[anomaly].median())
        step_ms = float(job_step.iloc[anomaly].median())
        slowdown = excess / step_ms if step_ms > 0 else 0.0
    else:
        wait_before = float(peers_wait.iloc[: run.onset_pos].median())
        # The peers wait for the culprit: their wait grew since the onset, or (when the run was
        # already noisy before it) they wait more than the culprit does in the anomaly.
        own_wait = float(wait[rank].iloc[anomaly].median())
        grown = max(wait_after - wait_before, wait_after - own_wait)
        after = float(job_step.iloc[anomaly].median())
        before = float(job_step.iloc[: run.onset_pos].median())
        # The job got slower by this much, but no more than this rank's own excess explains.
        growth = (after - before) / after if after > 0 else 0.0
        slowdown = min(growth, excess / after) if after > 0 else 0.0
    if excess <= 0 or grown < cfg.min_wait_explained * excess:
        return None
    return _Slow(
        rank=rank,
        run=run,
        onset=None if structural else int(steps[run.onset_pos]),
        detected=int(steps[run.detected_pos]),
        slowdown=max(0.0, slowdown),
        gap=gap,
        culprit_ms=culprit_ms,
        peers_ms=peers_ms,
        wait_before=wait_before,
        wait_after=wait_after,
        anomaly=(int(steps[run.onset_pos]), int(steps[run.end_pos])),
        before=None if structural else (int(steps[0]), int(steps[run.onset_pos - 1])),
        own_before_ms=None if structural else float(compute[rank].iloc[: run.onset_pos].median()),
    )


def _refine_onset(
    run: Persistence, flags: np.ndarray, ratio: np.ndarray, cfg: NodeConfig
) -> Persistence:
    """Move the onset to the change point of the rank's compute ratio near the first persistent
    window: the step ``t`` that splits the span from ``window`` steps before the earliest
    candidate to ``window`` steps after the latest into the two most homogeneous segments (least
    summed absolute deviation from each segment's median: a robust L1 change point) with a higher
    median after than before. Noise
    flags just before a real onset would otherwise pull the onset early (and into the
    "structural" range); a step just after it whose "before" segment holds a few slow steps
    scores worse than the true onset. A run flagged from the first window on keeps its onset:
    there is no "before" to compare with."""
    w = cfg.window
    if run.onset_pos < w and flags[:w].mean() >= cfg.min_frac:
        return run
    x = np.nan_to_num(ratio, nan=1.0, posinf=10.0, neginf=0.0)
    lo, hi = max(1, run.onset_pos - w), min(len(x) - 1, run.detected_pos)
    # One fixed span for every candidate split, so that costs compare like with like.
    start, stop = max(0, lo - w), min(len(x), hi + w)
    best, best_cost = run.onset_pos, np.inf
    for t in range(lo, hi + 1):
        before, after = x[start:t], x[t:stop]
        mb, ma = float(np.median(before)), float(np.median(after))
        if ma <= mb:
            continue
        cost = float(np.abs(before - mb).sum() + np.abs(after - ma).sum())
        if cost < best_cost:
            best, best_cost = t, cost
    onset = best if flags[best] else best + int(np.argmax(flags[best:]))
    if onset > run.detected_pos:
        return run
    end = run.end_pos
    return Persistence(onset, run.detected_pos, end, float(flags[onset : end + 1].mean()))


def _group_by_host(slow: list[_Slow], features: Features, cfg: NodeConfig) -> list[Finding]:
    hosts = features.hosts_of()
    by_host: dict[str, list[_Slow]] = {}
    for s in slow:
        by_host.setdefault(hosts.get(s.rank, ""), []).append(s)
    out = []
    for host, group in sorted(by_host.items()):
        all_of_host = bool(host) and len(group) == sum(1 for h in hosts.values() if h == host)
        if all_of_host and len(group) > 1:
            out.append(_finding(group, host, features, cfg, whole_host=True))
        else:
            out.extend(_finding([s], host, features, cfg, whole_host=False) for s in group)
    return out


def _finding(
    group: list[_Slow], host: str, features: Features, cfg: NodeConfig, *, whole_host: bool
) -> Finding:
    """One finding for a slow host (``whole_host``: all its ranks) or one slow rank on ``host``."""
    ranks = tuple(s.rank for s in group)
    lead = max(group, key=lambda s: s.slowdown)
    onsets = [s.onset for s in group]
    onset = None if any(o is None for o in onsets) else min(o for o in onsets if o is not None)
    structural = onset is None
    conf = float(np.mean([confidence(s.run.consistency, s.gap, cfg.confident_gap) for s in group]))
    if whole_host:
        who = f"host {host} (ranks {', '.join(map(str, ranks))})"
    else:
        who = f"rank {ranks[0]} on {host}" if host else f"rank {ranks[0]}"
    when = "from the start (structural)" if structural else f"from step {onset}"
    summary = (
        f"{who} computes {lead.gap:.0%} longer than its peers {when}; "
        f"peers wait {lead.wait_after:.1f} ms/step in collectives; job steps {lead.slowdown:.0%} "
        "slower"
    )
    evidence = [
        Evidence(
            metric="compute_ms",
            subject=f"rank {s.rank}",
            value=s.culprit_ms,
            reference=s.peers_ms,
            unit="ms",
            note="median in the anomaly vs the peers' median",
        )
        for s in group
    ]
    evidence.append(
        Evidence(
            metric="peers_wait_ms",
            subject=who,
            value=lead.wait_after,
            reference=lead.wait_before,
            unit="ms",
            note="peers' median collective wait in the anomaly vs before onset",
        )
    )
    evidence.extend(
        node_evidence.history(s.rank, s.own_before_ms, s.culprit_ms)
        for s in group
        if s.own_before_ms is not None
    )
    befores = [s.before for s in group if s.before is not None]
    found = node_evidence.corroborate(
        features,
        ranks=ranks,
        host=host,
        anomaly=(min(s.anomaly[0] for s in group), max(s.anomaly[1] for s in group)),
        before=None if structural else (min(b[0] for b in befores), min(b[1] for b in befores)),
    )
    evidence.extend(found.evidence)
    conf = min(0.99, conf + 0.05 * len(found.sources))  # conf <= 0.99: unchanged without sources
    return Finding(
        id=f"node-{host}" if whole_host else f"node-rank{ranks[0]}",
        symptom="slowdown",
        cause="structural" if structural else "node",
        severity=severity(lead.slowdown, cfg.warning, cfg.critical),
        ranks=ranks,
        hosts=(host,) if host else (),
        onset_step=onset,
        detected_step=min(s.detected for s in group),
        slowdown=lead.slowdown,
        confidence=conf,
        summary=summary,
        evidence=tuple(evidence),
    )
