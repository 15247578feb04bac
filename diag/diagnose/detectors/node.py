"""Node detector: ranks whose compute is persistently above that of the ranks doing the same work,
and the layout's own imbalance (a pipeline stage heavier than the others: ``structural``).

In synchronous training a slow rank makes everyone else wait in the collectives, so the signature
is two-sided: the culprit's ``compute_ms`` is above the median of its peers' while the peers'
``wait_ms`` grows by about that excess. A rank's *peers* are the ranks doing the same work: its
work class in the run's layout (:mod:`~diag.diagnose.layout`: same pipeline stage and TP
position, the other data-parallel replicas), every other rank when the layout is unknown. A rank
alone in its class (no data parallelism) has no peers: its stage answers for it (below).

``compute_ms`` is the rank's own compute (:mod:`diag.diagnose.features`: less the time its training
thread waited for a CPU), so a rank descheduled on an oversubscribed host is not taken for a slow
device. Per step and rank: ``ratio = compute_ms / median(peers' compute_ms)``; the step is
*flagged* when ``ratio >= min_ratio`` and the excess ``compute_ms - peers' median`` is at least
``max(min_excess_ms, min_excess_frac x job step)`` (scheduler jitter on a busy node makes a 2 ms
compute look 2x slow now and then), and ``ratio - 1`` is at least ``min_z`` (2) robust sigmas of
its class's ratios (per step, from the spread of the lower half of the class's ratios, which slow
ranks do not reach even when they are up to half of the class; then the median over the run's
steps; classes of 4 or more): where the work itself varies a lot from step to step (uneven
batches), a rank above its peers for a few steps in a row is not yet a slow node; in a steady job
(3% noise) this changes nothing. The rank is slow when flagged in ``>= min_frac`` of a sliding
window of ``window`` steps (warm-up steps skipped). ``onset_step`` is the change point of the
rank's ratio near the first such window (the step that best separates a lower median ratio before
from a higher one after, ``window`` steps each side); when it is within the first ``window``
analysed steps, or the rank was flagged from the first window on, or its median ratio before the
onset already held ``structural_share`` (half) of the gap after it (noise hid early flags), the
rank was slow from the start: ``onset_step`` None. A rank slow from the start among peers doing
the same work is still cause ``node`` (its replicas are not slow: it is not the layout); when
the layout is unknown it is ``node`` too (every rank presumed to do the same work), with the
confidence times ``UNKNOWN_LAYOUT_FROM_START`` (0.8) and a summary that says so.

One culprit set, one finding (:mod:`~diag.diagnose.detectors.node_groups`): slow ranks that
fill a whole host, replica or TP group are one finding naming the group and all its ranks
(largest first). When only some of its ranks (two or more) were found on their own (noise hid
the others), the set is judged as one: per step the lower quartile over its ranks of each one's
ratio to its peers (three quarters of them at least that slow), with the same flags,
persistence and wait check; if it holds, the set is named.

The layout's own imbalance: the pipeline stages are compared with each other (per step, the median
over each stage's ranks against the median of the other stages'), as are the TP positions of a
stage (and, for a layout inferred from time profiles, the work classes), with the same flags,
persistence and onset as ranks; ranks already found slow against their peers are left out of
their group. A group slower from the start is cause ``structural`` (the imbalance follows the
layout, across all of its replicas), one finding naming the group and its ranks, with no
telemetry corroboration (no device is at fault); a group that became slower at an onset is
``node``.

- ``slowdown`` (onset): ``(median job step in the anomaly - median job step before onset) /
  median job step in the anomaly``, at most the culprit's excess compute over that same step; the
  job step is the per-step median of ``duration_ms``.
- ``slowdown`` (from the start): the culprit's median excess compute over its peers' median,
  divided by the median job step.
- The peers' wait must explain the excess: peers' median ``wait_ms`` grows (onset: after - before;
  from the start: peers' wait - culprit's wait) by at least ``min_wait_explained`` x the excess.
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
- Evidence always says how peers were chosen (``peers``: how many, and the layout's source:
  "layout from table columns: 4 stages x 16 replicas x 1 TP position").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from diag.diagnose.detectors import node_evidence, node_groups
from diag.diagnose.features import (
    Features,
    Persistence,
    peer_median,
    persistence,
    persistent_columns,
)
from diag.diagnose.layout import Layout
from diag.findings import Evidence, Finding

#: A set of ranks is slow as a whole when this quantile of its ranks' ratios is (see _set_slow).
SET_QUANTILE = 0.25

#: Classes (or partitions of groups) smaller than this have no spread to judge by.
_MIN_SPREAD_CLASS = 4
#: A normal distribution's sigma over the MAD of its lower half (about its own median).
_LOW_MAD_SIGMA = 2.5

#: Confidence factor of a rank slow from the start when the layout is unknown: the ranks are
#: presumed to do the same work, but it may be its own pipeline stage (then: structural).
UNKNOWN_LAYOUT_FROM_START = 0.8


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
    min_z: float = 2.0  # ... and ratio - 1 >= this many robust sigmas of its class's spread
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
    key: Any  # a rank, or a layout group's key (stage, (stage, TP position), class id)
    run: Persistence
    onset: int | None  # step; None: from the start
    detected: int
    slowdown: float
    gap: float  # median ratio - 1 in the anomaly
    culprit_ms: float
    peers_ms: float
    wait_before: float | None
    wait_after: float
    anomaly: tuple[int, int]  # first and last step of the anomaly
    before: tuple[int, int] | None  # first and last analysed step before onset; None: from start
    own_before_ms: float | None  # its median compute before onset; None: from the start

    @property
    def rank(self) -> int:
        return int(self.key)


@dataclass(frozen=True, slots=True)
class _Frames:
    """What slow columns are found on: per step and column (a rank or a group), its compute and
    wait, its peers' median compute and wait, the job step, and the spread of its class's
    ratios to their peers (NaN: too few to tell)."""

    compute: pd.DataFrame
    wait: pd.DataFrame
    peers: pd.DataFrame
    peers_wait: pd.DataFrame
    job_step: pd.Series
    spread: pd.DataFrame | None = None


def _spread(ratio: pd.DataFrame, classes: Mapping[Any, Any] | None) -> pd.DataFrame:
    """Per column, the robust sigma of its class's ratios: per step ``_LOW_MAD_SIGMA x`` the
    median absolute deviation of the lower half of the class's ratios around their own median
    (the slow ones, even up to half of the class, are not in it, and what they do to their
    peers' medians shifts the lower half without spreading it), then the median over the run's
    steps (one number per class: a few ranks make a noisy estimate per step); NaN for classes
    under ``_MIN_SPREAD_CLASS`` columns."""
    values = ratio.to_numpy(dtype=float)
    out = np.full(values.shape[1], np.nan)
    members: dict[Any, list[int]] = {}
    for j, col in enumerate(ratio.columns):
        members.setdefault(classes.get(col) if classes is not None else 0, []).append(j)
    for cols in members.values():
        if len(cols) < _MIN_SPREAD_CLASS:
            continue
        v = values[:, cols]
        v = v[~np.isnan(v).any(axis=1)]
        if not len(v):
            continue
        low = np.sort(v, axis=1)[:, : (len(cols) + 1) // 2]  # each step's lower half
        mad = np.median(np.abs(low - np.median(low, axis=1, keepdims=True)), axis=1)
        out[cols] = float(np.median(_LOW_MAD_SIGMA * mad))
    return pd.DataFrame(
        np.broadcast_to(out, values.shape).copy(), index=ratio.index, columns=ratio.columns
    )


def detect(features: Features, cfg: NodeConfig | None = None) -> list[Finding]:
    """Slow ranks against the ranks doing the same work, one finding per slow host, replica or
    TP group; then the layout's own imbalance: a stage (or TP position, or inferred work class)
    slower than the others."""
    cfg = cfg or NodeConfig()
    compute = features.wide("compute_ms", cfg.warmup_steps)
    if compute.shape[1] < 2 or len(compute) < cfg.window:
        return []
    layout = features.work_layout()
    wait = features.wide("wait_ms", cfg.warmup_steps).reindex_like(compute)
    job_step = features.wide("duration_ms", cfg.warmup_steps).reindex_like(compute).median(axis=1)
    classes = layout.work_class if layout.known else None
    peers = peer_median(compute, classes)
    frames = _Frames(
        compute,
        wait,
        peers,
        peer_median(wait, classes),
        job_step,
        _spread(compute / peers, {c: (classes or {}).get(int(c), 0) for c in compute.columns}),
    )
    slow = {s.rank: s for s in _find_slow(frames, cfg)}
    hosts = features.hosts_of()
    out = []
    named: set[int] = set()
    for cand in node_groups.candidates(hosts, layout):
        members = [r for r in cand.ranks if r in slow]
        if len(members) < 2 or named & set(cand.ranks):
            continue
        whole = None
        if len(members) < len(cand.ranks):  # not every rank found on its own: judge the set
            whole = _set_slow(frames, cand.ranks, cfg)
            if whole is None:
                continue
        named |= set(cand.ranks)
        out.append(_rank_finding([slow[r] for r in members], cand, features, layout, cfg, whole))
    for rank in sorted(set(slow) - named):
        cand = node_groups.single(rank, hosts, layout)
        out.append(_rank_finding([slow[rank]], cand, features, layout, cfg))
    # A layout group's own imbalance is the one its other ranks share: ranks already found
    # slow against the ranks doing the same work are left out of their group's median.
    rest = [int(r) for r in compute.columns if int(r) not in slow]
    for partition in node_groups.partitions(layout, rest):
        for found in _find_slow(_group_frames(frames, partition), cfg):
            out.append(_layout_finding(found, partition, features, layout, cfg))
    return out


def _group_frames(frames: _Frames, partition: node_groups.Partition) -> _Frames:
    """Per group of ``partition``: the median over its ranks, its peer groups' median."""

    def per_group(wide: pd.DataFrame) -> pd.DataFrame:
        cols = {k: wide[list(ranks)].median(axis=1) for k, ranks in partition.members.items()}
        return pd.DataFrame(cols, index=wide.index)

    def of_peers(grouped: pd.DataFrame) -> pd.DataFrame:
        cols = {k: grouped[list(p)].median(axis=1) for k, p in partition.peers.items() if p}
        return pd.DataFrame(cols, index=grouped.index).reindex(columns=grouped.columns)

    compute, wait = per_group(frames.compute), per_group(frames.wait)
    peers = of_peers(compute)
    # Groups whose peers are each other (the stages; the TP positions of one stage) are a class.
    classes = {k: min([k, *p], key=str) for k, p in partition.peers.items()}
    spread = _spread(compute / peers, classes)
    return _Frames(compute, wait, peers, of_peers(wait), frames.job_step, spread)


def _set_slow(frames: _Frames, ranks: tuple[int, ...], cfg: NodeConfig) -> _Slow | None:
    """A set of ranks judged as one: per step, the lower quartile over its ranks of each one's
    ratio to its peers (three quarters of its ranks at least that slow: a few very slow ranks,
    or half of them, do not make the set slow), against the median of their peers' compute;
    flags, persistence, onset and the wait check as for a rank."""
    cols = [c for c in frames.compute.columns if int(c) in set(ranks)]
    ratio = (frames.compute[cols] / frames.peers[cols]).quantile(SET_QUANTILE, axis=1)
    peers = frames.peers[cols].median(axis=1)

    def one(series: pd.Series) -> pd.DataFrame:
        return series.to_frame(name=ranks[0])

    wait, peers_wait = frames.wait[cols].median(axis=1), frames.peers_wait[cols].median(axis=1)
    spread = frames.spread[cols].median(axis=1) if frames.spread is not None else None
    found = _find_slow(
        _Frames(
            one(peers * ratio),
            one(wait),
            one(peers),
            one(peers_wait),
            frames.job_step,
            one(spread) if spread is not None else None,
        ),
        cfg,
    )
    return found[0] if found else None


def _find_slow(frames: _Frames, cfg: NodeConfig) -> list[_Slow]:
    compute, peers = frames.compute, frames.peers
    ratio = compute / peers
    # A step is flagged when the rank is slower than its peers both relatively and absolutely:
    # on a busy node scheduler jitter makes 2 ms of compute look 2x slow now and then.
    floor = np.maximum(cfg.min_excess_ms, cfg.min_excess_frac * frames.job_step.to_numpy())
    flagged_frame = (ratio >= cfg.min_ratio) & ((compute - peers).ge(floor, axis=0))
    if frames.spread is not None:  # and beyond what its class's own spread makes common
        spread = frames.spread.to_numpy()
        beyond = np.isnan(spread) | (ratio.to_numpy() - 1.0 >= cfg.min_z * spread)
        flagged_frame &= beyond
    flagged = flagged_frame.to_numpy()
    slow = []
    # Only columns with a persistent run of flagged steps can be slow: find them all at once.
    for j in np.flatnonzero(persistent_columns(flagged, cfg.window, cfg.min_frac)):
        found = _slow_one(int(j), frames, ratio, flagged[:, j], cfg)
        if found is not None:
            slow.append(found)
    return slow


def _slow_one(
    j: int, frames: _Frames, ratio_frame: pd.DataFrame, flags: np.ndarray, cfg: NodeConfig
) -> _Slow | None:
    key = frames.compute.columns[j]
    run = persistence(flags, cfg.window, cfg.min_frac)
    if run is None:
        return None
    ratio = ratio_frame.iloc[:, j]
    run = _refine_onset(run, flags, ratio.to_numpy(), cfg)
    compute, wait, job_step = frames.compute.iloc[:, j], frames.wait.iloc[:, j], frames.job_step
    steps = frames.compute.index.to_numpy()
    anomaly = slice(run.onset_pos, run.end_pos + 1)
    culprit_ms = float(compute.iloc[anomaly].median())
    peers_ms = float(frames.peers.iloc[:, j].iloc[anomaly].median())
    excess = culprit_ms - peers_ms
    peers_wait = frames.peers_wait.iloc[:, j]
    wait_after = float(peers_wait.iloc[anomaly].median())
    gap = float(ratio.iloc[anomaly].median()) - 1.0
    before_gap = float(ratio.iloc[: run.onset_pos].median()) - 1.0 if run.onset_pos else 0.0
    held = gap > 0 and before_gap >= cfg.structural_share * gap
    from_start = run.onset_pos < cfg.window or held
    own_wait = float(wait.iloc[anomaly].median())
    if from_start:
        wait_before = None
        grown = wait_after - own_wait
        step_ms = float(job_step.iloc[anomaly].median())
        slowdown = excess / step_ms if step_ms > 0 else 0.0
    else:
        wait_before = float(peers_wait.iloc[: run.onset_pos].median())
        # The peers wait for the culprit: their wait grew since the onset, or (when the run was
        # already noisy before it) they wait more than the culprit does in the anomaly.
        grown = max(wait_after - wait_before, wait_after - own_wait)
        after = float(job_step.iloc[anomaly].median())
        before = float(job_step.iloc[: run.onset_pos].median())
        # The job got slower by this much, but no more than this rank's own excess explains.
        growth = (after - before) / after if after > 0 else 0.0
        slowdown = min(growth, excess / after) if after > 0 else 0.0
    if excess <= 0 or grown < cfg.min_wait_explained * excess:
        return None
    return _Slow(
        key=key,
        run=run,
        onset=None if from_start else int(steps[run.onset_pos]),
        detected=int(steps[run.detected_pos]),
        slowdown=max(0.0, slowdown),
        gap=gap,
        culprit_ms=culprit_ms,
        peers_ms=peers_ms,
        wait_before=wait_before,
        wait_after=wait_after,
        anomaly=(int(steps[run.onset_pos]), int(steps[run.end_pos])),
        before=None if from_start else (int(steps[0]), int(steps[run.onset_pos - 1])),
        own_before_ms=None if from_start else float(compute.iloc[: run.onset_pos].median()),
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


def _rank_finding(
    group: list[_Slow],
    culprits: node_groups.Culprits,
    features: Features,
    layout: Layout,
    cfg: NodeConfig,
    whole: _Slow | None = None,
) -> Finding:
    """One finding for slow ranks named as one set (a host, a replica, a TP group) or one
    rank, each compared with the ranks doing the same work: cause ``node``, from its onset or
    (``onset_step`` None) from the start. ``whole``: the set judged as one, when not every one
    of its ranks was found slow on its own (``group`` holds those that were)."""
    ranks = culprits.ranks
    hosts = features.hosts_of()
    lead = whole or max(group, key=lambda s: s.slowdown)
    onsets = [s.onset for s in group]
    onset = None if any(o is None for o in onsets) else min(o for o in onsets if o is not None)
    if whole is not None:
        onset = whole.onset
    scored = [whole] if whole is not None else group
    conf = float(np.mean([confidence(s.run.consistency, s.gap, cfg.confident_gap) for s in scored]))
    if onset is None and not layout.known:
        conf *= UNKNOWN_LAYOUT_FROM_START  # it may do other work by design: node or structural
    peers = _peers(ranks, layout, features)
    if layout.known:
        like = f"its {len(peers)} peers doing the same work"
    else:
        like = f"the other {len(peers)} ranks"
    when = f"from step {onset}" if onset is not None else "from the start"
    summary = (
        f"{culprits.who} computes {lead.gap:.0%} longer than {like} {when}; "
        f"peers wait {lead.wait_after:.1f} ms/step in collectives; job steps {lead.slowdown:.0%} "
        "slower"
    )
    if onset is None:
        summary += (
            " (slow from the first analysed step while its data-parallel peers are not: a slow "
            "node, not the layout)"
            if layout.known
            else " (layout unknown: if it does other work by design, e.g. its own pipeline "
            "stage, this is structural)"
        )
    evidence = [_compute_ev(f"rank {s.rank}", s) for s in group]
    if whole is not None:
        note = (
            f"lower quartile over its {len(ranks)} ranks ({len(group)} slow on their own) of "
            "each one's compute against its peers', in the anomaly"
        )
        evidence.append(_compute_ev(culprits.who.split(" (")[0], whole, note=note))
    evidence.append(_wait_ev(culprits.who, lead))
    evidence.extend(
        node_evidence.history(s.rank, s.own_before_ms, s.culprit_ms)
        for s in group
        if s.own_before_ms is not None
    )
    evidence.append(_layout_ev(culprits.who, layout, len(peers), "the ranks doing the same work"))
    return _corroborated(
        Finding(
            id=culprits.id,
            symptom="slowdown",
            cause="node",
            severity=severity(lead.slowdown, cfg.warning, cfg.critical),
            ranks=ranks,
            hosts=tuple(sorted({h for r in ranks if (h := hosts.get(r, ""))})),
            onset_step=onset,
            detected_step=min(s.detected for s in group),
            slowdown=lead.slowdown,
            confidence=conf,
            summary=summary,
            evidence=tuple(evidence),
        ),
        group,
        culprits.host,
        features,
        peers,
    )


def _layout_finding(
    found: _Slow,
    partition: node_groups.Partition,
    features: Features,
    layout: Layout,
    cfg: NodeConfig,
) -> Finding:
    """One finding for a layout group (a stage, a TP position, a work class) slower than the
    groups it is compared with: ``structural`` from the start, else ``node`` from its onset."""
    ranks = tuple(sorted(partition.members[found.key]))
    label = partition.labels[found.key]
    others = [r for k in partition.peers[found.key] for r in partition.members[k]]
    structural = found.onset is None
    when = (
        "from the start (structural: the layout's imbalance)"
        if structural
        else (f"from step {found.onset}")
    )
    kinds = "stages" if partition.kind == "stage" else f"{partition.kind}s"
    hosts = features.hosts_of()
    on = sorted({h for r in ranks if (h := hosts.get(r, ""))})
    if len(on) == 1 and sorted(r for r, h in hosts.items() if h == on[0]) == list(ranks):
        label = f"{label} = host {on[0]}"  # the group is a whole host: either may be at fault
    summary = (
        f"{label} ({node_groups.ranks_text(ranks)}) computes {found.gap:.0%} longer than the "
        f"other {kinds} {when}, across all its replicas; the others wait "
        f"{found.wait_after:.1f} ms/step; job steps {found.slowdown:.0%} slower"
    )
    evidence = [
        _compute_ev(
            label,
            found,
            note=f"median over its ranks in the anomaly vs the median of the other {kinds}",
        ),
        _wait_ev(label, found),
        _layout_ev(label, layout, len(others), f"the other {kinds}"),
    ]
    if found.own_before_ms is not None:
        evidence.append(
            Evidence(
                metric="own_compute_ms",
                subject=label,
                value=found.culprit_ms,
                reference=found.own_before_ms,
                unit="ms",
                note="its median in the anomaly vs its own before onset",
            )
        )
    conf = confidence(found.run.consistency, found.gap, cfg.confident_gap)
    finding = Finding(
        id=f"{'structural' if structural else 'node'}-{partition.ids[found.key]}",
        symptom="slowdown",
        cause="structural" if structural else "node",
        severity=severity(found.slowdown, cfg.warning, cfg.critical),
        ranks=ranks,
        hosts=tuple(on),
        onset_step=found.onset,
        detected_step=found.detected,
        slowdown=found.slowdown,
        confidence=conf,
        summary=summary,
        evidence=tuple(evidence),
    )
    if structural:
        return finding  # the layout's own imbalance: no device to corroborate
    return _corroborated(finding, [found], on[0] if len(on) == 1 else "", features, others)


def _peers(ranks: tuple[int, ...], layout: Layout, features: Features) -> list[int]:
    """The ranks the culprits were compared with: their work classes' other ranks."""
    everyone = sorted(features.hosts_of())
    if not layout.known:
        return [r for r in everyone if r not in ranks]
    classes = {layout.work_class.get(r) for r in ranks}
    return [r for r in everyone if r not in ranks and layout.work_class.get(r) in classes]


def _compute_ev(subject: str, s: _Slow, note: str = "") -> Evidence:
    return Evidence(
        metric="compute_ms",
        subject=subject,
        value=s.culprit_ms,
        reference=s.peers_ms,
        unit="ms",
        note=note or "median in the anomaly vs the peers' median",
    )


def _wait_ev(who: str, s: _Slow) -> Evidence:
    return Evidence(
        metric="peers_wait_ms",
        subject=who,
        value=s.wait_after,
        reference=s.wait_before,
        unit="ms",
        note="peers' median collective wait in the anomaly vs before onset"
        if s.wait_before is not None
        else "peers' median collective wait in the anomaly (from the start: no before)",
    )


def _layout_ev(who: str, layout: Layout, num_peers: int, compared: str) -> Evidence:
    return Evidence(
        metric="peers",
        subject=who,
        value=float(num_peers),
        unit="ranks",
        note=f"{layout.describe()}; compared with {compared}",
    )


def _corroborated(
    finding: Finding, group: list[_Slow], host: str, features: Features, peers: list[int]
) -> Finding:
    """The finding with what telemetry corroborates (:mod:`node_evidence`): +0.05 confidence
    per independent source, at most 0.99."""
    befores = [s.before for s in group if s.before is not None]
    found = node_evidence.corroborate(
        features,
        ranks=finding.ranks,
        host=host,
        anomaly=(min(s.anomaly[0] for s in group), max(s.anomaly[1] for s in group)),
        before=None
        if finding.onset_step is None or not befores
        else (min(b[0] for b in befores), min(b[1] for b in befores)),
        peers=tuple(peers),
    )
    conf = min(0.99, finding.confidence + 0.05 * len(found.sources))
    return replace(finding, confidence=conf, evidence=(*finding.evidence, *found.evidence))
