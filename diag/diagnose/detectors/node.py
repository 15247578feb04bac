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
window of ``window`` steps (warm-up steps skipped), or in ``min_run`` steps in a row, or in a
*quick run* (:func:`~diag.diagnose.features.quick_runs`): a few steps in a row (at least
``quick_min_run``), each far beyond the flag (its strength: the least of ``ratio - 1`` over
``min_ratio - 1``, the excess over its floor, ``ratio - 1`` over ``min_z`` sigmas), as long as the
other ranks' steps make that chance ``quick_alpha`` over the whole table, and the rank stays
flagged after it like a window (a rank that stalls in bursts is not slow: node_stall). A rank 30%
slower is named three steps after its onset instead of six. ``onset_step`` is the change point of
the rank's ratio near the first such window (the step that best separates a lower median ratio
before from a higher one after, ``window`` steps each side); when it is within the first ``window``
analysed steps, or the rank was flagged from the first window on, or its median ratio before the
onset already held ``structural_share`` (half) of the gap after it (noise hid early flags), the
rank was slow from the start: ``onset_step`` None. A rank slow from the start among peers doing the
same work is still cause ``node`` (its replicas are not slow: it is not the layout); when the
layout is unknown it is ``node`` too (every rank presumed to do the same work), with the confidence
times ``UNKNOWN_LAYOUT_FROM_START`` (0.8) and a summary that says so.

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
layout, across all of its replicas), one finding naming the group and all its ranks (those left
out as slow on their own too: the stage is heavier for every replica), with no
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

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np
import pandas as pd

from diag.diagnose.coverage import PAUSE_CHANCE
from diag.diagnose.detectors import node_evidence, node_groups, node_stall, node_stopped
from diag.diagnose.detectors.node_slow import (
    UNKNOWN_LAYOUT_FROM_START,
    Frames,
    NodeConfig,
    Slow,
    class_spread,
    confidence,
    find_slow,
    group_frames,
    set_slow,
    severity,
)
from diag.diagnose.features import Features, peer_median
from diag.diagnose.layout import Layout
from diag.findings import Evidence, Finding, factor_text, job_cost_text

__all__ = ["NodeConfig", "confidence", "detect", "severity"]


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
    # the spread before the wait's peers: its ratio table and sorts were on top of them
    spread = class_spread(
        compute / peers, {c: (classes or {}).get(int(c), 0) for c in compute.columns}
    )
    # the wait's peers once a found rank needs them: not beside find_slow's temporaries
    frames = Frames(compute, wait, peers, lambda: peer_median(wait, classes), job_step, spread)
    slow = {s.rank: s for s in find_slow(frames, cfg)}
    hosts = features.hosts_of()
    out = []
    named: set[int] = set()
    for cand in node_groups.candidates(hosts, layout):
        members = [r for r in cand.ranks if r in slow]
        if len(members) < 2 or named & set(cand.ranks):
            continue
        if set(compute.columns) <= set(cand.ranks):
            continue  # a set holding every rank has no peers to be slow against
        whole = None
        if len(members) < len(cand.ranks):  # not every rank found on its own: judge the set
            whole = set_slow(frames, cand.ranks, cfg)
            if whole is None:
                continue
        named |= set(cand.ranks)
        out.append(
            _rank_finding([slow[r] for r in members], cand, features, hosts, layout, cfg, whole)
        )
    for rank in sorted(set(slow) - named):
        cand = node_groups.single(rank, hosts, layout)
        out.append(_rank_finding([slow[rank]], cand, features, hosts, layout, cfg))
    # the ranks' own tables are not needed after this: their peers' wait and spread go (each
    # step x rank table is ~50 MB at 131,072 ranks), their peers' compute serves the stalls
    del frames
    # Ranks that lose their time in bursts: not slower in most steps, slower on average. In the
    # steps of diag's own profiler windows each rank also pays its own profiler cost (a rank's
    # window steps, one in ten, made it "stall" in 38% of steps): taken out (or, with too few
    # windows to tell a rank's cost from a pause in one, those steps are left out)
    kept = _less_window_cost(compute, wait, job_step, peers, features.profiled_steps(), classes)
    stall_frames = node_stall.StallFrames(kept[0], kept[1], kept[2], classes, kept[3])
    for stall in node_stall.find_stalls(
        stall_frames,
        skip=set(slow) | named,
        min_t=cfg.stall_min_t,
        min_share_z=cfg.stall_min_share_z,
        min_loss=cfg.stall_min_loss,
        min_steps=cfg.stall_min_steps,
        min_wait_explained=cfg.min_wait_explained,
    ):
        out.append(_stall_finding(stall, features, hosts, layout, cfg))
    # Ranks found stopped by the daemon: evidence for a finding that names them, else their own.
    for stopped in node_stopped.find_stopped(
        features.proc,
        features.steps,
        job_step,
        classes,
        min_stopped=cfg.stopped_min,
        min_share=cfg.stopped_min_share,
    ):
        ev = _stopped_ev(stopped, layout)
        at = next((i for i, f in enumerate(out) if stopped.rank in f.ranks), None)
        if at is not None:
            f = out[at]
            conf = min(0.99, f.confidence + 0.05)
            out[at] = replace(f, confidence=conf, evidence=(*f.evidence, ev))
        else:
            out.append(_stopped_finding(stopped, ev, features, hosts, layout, cfg))
    # A layout group's own imbalance is the one its other ranks share: ranks already found
    # slow against the ranks doing the same work are left out of their group's median.
    rest = [int(r) for r in compute.columns if int(r) not in slow]
    for partition in node_groups.partitions(layout, rest):
        for found in find_slow(group_frames((compute, wait), job_step, partition), cfg):
            out.append(_layout_finding(found, partition, features, hosts, layout, cfg))
    return out


#: A rank's own profiler cost in a window step is its median excess over its peers in its
#: nearest window steps, this many (the one itself and three each side, fewer at the run's
#: ends): it follows a cost that changes over the run, and a pause is one value of seven.
COST_WINDOWS = 7
#: Fewer window steps than this, and a pause in one of them could pass for the cost.
MIN_WINDOWS_FOR_COST = 3


def _less_window_cost(
    compute: pd.DataFrame,
    wait: pd.DataFrame,
    job_step: pd.Series,
    peers: pd.DataFrame,
    profiled_steps: np.ndarray,
    classes: Mapping[int, int] | None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, pd.DataFrame]:
    """The stall detector's tables with diag's own profiler cost taken out of the window steps.

    In a window step each rank pays the profiler's recording and stop, each its own (on four
    ranks sharing two cores, one rank's window steps ran 36 ms longer than its peers' and its
    other steps 0.2 ms; from step 640 of the same run, 26 ms). That cost is the rank's median
    excess over its peers in its nearest :data:`COST_WINDOWS` window steps; it is taken off the
    rank's compute there (and the peers' medians redone), so what is left of a window step is the
    job's: a full garbage collection that falls in one still shows (held-out
    ``node.gc_pauses``: two of a rank's three pauses fell in window steps, and with those steps
    left out the rank went unnamed). With fewer than :data:`MIN_WINDOWS_FOR_COST` window steps
    the cost cannot be told from a pause in one of them: those steps are left out instead."""
    profiled = compute.index.isin(profiled_steps)
    num = int(profiled.sum())
    if not num:
        return compute, wait, job_step, peers
    if num < MIN_WINDOWS_FOR_COST:
        keep = ~profiled
        return compute[keep], wait[keep], job_step[keep], peers[keep]
    in_windows = compute[profiled].to_numpy(dtype=float)
    excess = in_windows - peers[profiled].to_numpy(dtype=float)
    half = COST_WINDOWS // 2
    cost = np.empty_like(excess)
    excess = np.nan_to_num(excess)  # a rank missing from a window step: no cost known there
    for i in range(num):  # a row per window step (a few): not a loop over ranks
        cost[i] = np.median(excess[max(0, i - half) : i + half + 1], axis=0)
    less = pd.DataFrame(in_windows - cost, index=compute.index[profiled], columns=compute.columns)
    compute = compute.copy()
    compute.loc[profiled] = less
    peers = peers.copy()
    peers.loc[profiled] = peer_median(less, classes)
    return compute, wait, job_step, peers


def _rank_finding(
    group: list[Slow],
    culprits: node_groups.Culprits,
    features: Features,
    hosts: dict[int, str],
    layout: Layout,
    cfg: NodeConfig,
    whole: Slow | None = None,
) -> Finding:
    """One finding for slow ranks named as one set (a host, a replica, a TP group) or one
    rank, each compared with the ranks doing the same work: cause ``node``, from its onset or
    (``onset_step`` None) from the start. ``whole``: the set judged as one, when not every one
    of its ranks was found slow on its own (``group`` holds those that were)."""
    ranks = culprits.ranks
    lead = whole or max(group, key=lambda s: s.slowdown)
    onsets = [s.onset for s in group]
    onset = None if any(o is None for o in onsets) else min(o for o in onsets if o is not None)
    if whole is not None:
        onset = whole.onset
    scored = [whole] if whole is not None else group
    conf = float(np.mean([confidence(s.run.consistency, s.gap, cfg.confident_gap) for s in scored]))
    if onset is None and not layout.known:
        conf *= UNKNOWN_LAYOUT_FROM_START  # it may do other work by design: node or structural
    peers = _peers(ranks, layout, hosts)
    if layout.known:
        like = f"its {len(peers)} peers doing the same work"
    else:
        like = f"the other {len(peers)} ranks"
    when = f"from step {onset}" if onset is not None else "from the start"
    summary = (
        f"{culprits.who} computes {factor_text(1 + lead.gap)} as long as {like} {when}; "
        f"peers wait {lead.wait_after:.1f} ms/step in collectives; {job_cost_text(lead.slowdown)}"
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


def _stall_finding(
    stall: node_stall.Stall,
    features: Features,
    hosts: dict[int, str],
    layout: Layout,
    cfg: NodeConfig,
) -> Finding:
    """One finding for a rank that stalls now and then (:mod:`node_stall`): cause ``node``."""
    culprits = node_groups.single(stall.rank, hosts, layout)
    peers = _peers(culprits.ranks, layout, hosts)
    like = (
        f"its {len(peers)} peers doing the same work"
        if layout.known
        else f"the other {len(peers)} ranks"
    )
    when = f"from step {stall.onset}" if stall.onset is not None else "from the start"
    summary = (
        f"{culprits.who} stalls intermittently {when}: it computes longer than all {like} in "
        f"{stall.slowest_share:.0%} of steps (chance {stall.chance_share:.0%}), and "
        f"{stall.excess_ms:.1f} ms/step longer than they do on average, though not in every "
        f"step (bursts: frozen, descheduled, blocked on a lock or paging); peers wait "
        f"{stall.wait_after:.1f} ms/step in collectives; {job_cost_text(stall.slowdown)}"
    )
    strength = min(stall.lead_t / cfg.stall_min_t, 2.0) - 1.0  # 0 at the threshold, 1 at 2x
    conf = 0.5 + 0.4 * max(0.0, strength)
    level = severity(stall.slowdown, cfg.warning, cfg.critical)
    if stall.chance_p is not None:  # a few long pauses, all its own: a suggestion
        summary = (
            f"{culprits.who} paused {stall.pauses} times {when} ({stall.pause_ms:.0f} ms longer "
            f"than {like} each time, {stall.pause_ms / max(stall.culprit_ms, 1e-9):.1f}x its mean "
            f"step compute; {stall.pauses} of the {stall.class_pauses} such pauses of its "
            f"class): a stop-the-world pause (garbage collection), a page-in, a frozen "
            f"process; peers wait {stall.wait_after:.1f} ms/step in collectives; "
            f"{job_cost_text(stall.slowdown)}. Too few pauses for a warning (chance puts pauses "
            f"like these on one rank of its class 1 time in "
            f"{1 / max(stall.chance_p, 1e-9):,.0f}): watch for more"
        )
        conf = 0.5 * (1.0 - stall.chance_p)
        level = "info"
    anomaly_ev = []
    if stall.chance_p is not None:
        anomaly_ev.append(
            Evidence(
                metric=PAUSE_CHANCE,
                subject=f"rank {stall.rank}",
                value=float(stall.chance_p),
                reference=None,
                unit="probability",
                note="the chance of this many of its class's long pauses falling on one rank: "
                "a suggestion, short of the corrected test",
            )
        )
    anomaly_ev += [
        Evidence(
            metric="compute_ms",
            subject=f"rank {stall.rank}",
            value=stall.culprit_ms,
            reference=stall.peers_ms,
            unit="ms",
            note="mean in the anomaly vs its peers' (per-step median) mean: the stalls are "
            "in the mean, not the median",
        ),
        Evidence(
            metric="slowest_share",
            subject=f"rank {stall.rank}",
            value=stall.slowest_share,
            reference=stall.chance_share,
            unit="fraction",
            note=f"share of steps it computes the longest of its class vs chance; its lead "
            f"over its peers is {stall.lead_t:.1f} standard errors above 0",
        ),
        Evidence(
            metric="peers_wait_ms",
            subject=culprits.who,
            value=stall.wait_after,
            reference=stall.wait_before,
            unit="ms",
            note="peers' mean collective wait in the anomaly vs before onset"
            if stall.wait_before is not None
            else "peers' mean collective wait in the anomaly (from the start: no before)",
        ),
        _layout_ev(culprits.who, layout, len(peers), "the ranks doing the same work"),
    ]
    finding = Finding(
        id=f"{culprits.id}-stalls",
        symptom="slowdown",
        cause="node",
        severity=level,
        ranks=culprits.ranks,
        hosts=tuple(sorted({h for r in culprits.ranks if (h := hosts.get(r, ""))})),
        onset_step=stall.onset,
        detected_step=stall.detected,
        slowdown=stall.slowdown,
        confidence=min(0.99, conf),
        summary=summary,
        evidence=tuple(anomaly_ev),
    )
    return _corroborated(finding, [stall], culprits.host, features, peers)


def _stopped_ev(stopped: node_stopped.Stopped, layout: Layout) -> Evidence:
    peers = "its peers doing the same work" if layout.known else "the other ranks"
    return Evidence(
        metric="stopped_samples",
        subject=f"rank {stopped.rank}",
        value=float(stopped.num_stopped),
        reference=float(stopped.peers_stopped),
        unit="samples",
        note=f"times its training thread was found stopped (T: SIGSTOP, a suspend, a tracer) "
        f"in {stopped.num_samples} reads of its state from step {stopped.onset}, against the "
        f"most of any of {peers}",
    )


def _stopped_finding(
    stopped: node_stopped.Stopped,
    ev: Evidence,
    features: Features,
    hosts: dict[int, str],
    layout: Layout,
    cfg: NodeConfig,
) -> Finding:
    """One finding for a rank the daemon found stopped again and again (:mod:`node_stopped`)."""
    culprits = node_groups.single(stopped.rank, hosts, layout)
    peers = _peers(culprits.ranks, layout, hosts)
    share = stopped.num_stopped / stopped.num_samples
    summary = (
        f"{culprits.who} was found stopped in {stopped.num_stopped} of {stopped.num_samples} "
        f"reads of its state ({share:.0%}) from step {stopped.onset}, its peers "
        f"{'never' if stopped.peers_stopped == 0 else 'at most once'}: frozen by a signal "
        "(SIGSTOP, a job-control or scheduler suspend) or a tracer (a debugger, a blocking stack "
        f"sampler); {job_cost_text(stopped.slowdown)}"
    )
    finding = Finding(
        id=f"{culprits.id}-stopped",
        symptom="slowdown",
        cause="node",
        severity=severity(stopped.slowdown, cfg.warning, cfg.critical),
        ranks=culprits.ranks,
        hosts=tuple(sorted({h for r in culprits.ranks if (h := hosts.get(r, ""))})),
        onset_step=stopped.onset,
        detected_step=stopped.detected,
        slowdown=stopped.slowdown,
        confidence=0.9,  # the state itself, read by the daemon: no statistics in between
        summary=summary,
        evidence=(
            ev,
            _layout_ev(culprits.who, layout, len(peers), "the ranks doing the same work"),
        ),
    )
    return finding


def _layout_finding(
    found: Slow,
    partition: node_groups.Partition,
    features: Features,
    hosts: dict[int, str],
    layout: Layout,
    cfg: NodeConfig,
) -> Finding:
    """One finding for a layout group (a stage, a TP position, a work class) slower than the
    groups it is compared with: ``structural`` from the start, else ``node`` from its onset."""
    ranks = tuple(sorted(partition.members[found.key]))
    label = partition.labels[found.key]
    others = [r for k in partition.peers[found.key] for r in partition.members[k]]
    structural = found.onset is None
    if structural:  # the layout's imbalance is every replica's, one also slow on its own too
        whole = [
            p for p in node_groups.partitions(layout, sorted(hosts)) if p.kind == partition.kind
        ]
        if whole and found.key in whole[0].members:
            ranks = tuple(sorted(set(ranks) | set(whole[0].members[found.key])))
    when = (
        "from the start (structural: the layout's imbalance)"
        if structural
        else (f"from step {found.onset}")
    )
    kinds = "stages" if partition.kind == "stage" else f"{partition.kind}s"
    on = sorted({h for r in ranks if (h := hosts.get(r, ""))})
    if len(on) == 1 and sorted(r for r, h in hosts.items() if h == on[0]) == list(ranks):
        label = f"{label} = host {on[0]}"  # the group is a whole host: either may be at fault
    summary = (
        f"{label} ({node_groups.ranks_text(ranks)}) computes {factor_text(1 + found.gap)} as "
        f"long as the other {kinds} {when}, across all its replicas; the others wait "
        f"{found.wait_after:.1f} ms/step; {job_cost_text(found.slowdown)}"
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


def _peers(ranks: tuple[int, ...], layout: Layout, hosts: dict[int, str]) -> list[int]:
    """The ranks the culprits were compared with: their work classes' other ranks."""
    everyone = sorted(hosts)
    if not layout.known:
        return [r for r in everyone if r not in ranks]
    classes = {layout.work_class.get(r) for r in ranks}
    return [r for r in everyone if r not in ranks and layout.work_class.get(r) in classes]


def _compute_ev(subject: str, s: Slow, note: str = "") -> Evidence:
    return Evidence(
        metric="compute_ms",
        subject=subject,
        value=s.culprit_ms,
        reference=s.peers_ms,
        unit="ms",
        note=note or "median in the anomaly vs the peers' median",
    )


def _wait_ev(who: str, s: Slow) -> Evidence:
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


class _Spans(Protocol):
    """What corroboration needs of a slow column: its anomaly and its steps before onset."""

    @property
    def anomaly(self) -> tuple[int, int]: ...
    @property
    def before(self) -> tuple[int, int] | None: ...


def _corroborated(
    finding: Finding, group: Sequence[_Spans], host: str, features: Features, peers: list[int]
) -> Finding:
    """The finding with what telemetry corroborates (:mod:`node_evidence`): +0.05 confidence
    per independent source, at most 0.99. ``group``: the slow ranks, sets or stalls it names."""
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
