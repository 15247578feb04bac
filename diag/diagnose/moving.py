"""A moving imbalance explains the node findings it makes by chance.

When the work is uneven and the slowest rank keeps changing (the data detector's ``data-moving``
finding: uneven sequence lengths, a long microbatch drawn anew each step), a rank can be the
unlucky one for a stretch of steps, long enough for the node detector to call it slow: a replica
drawn in 8 of 10 steps is "persistently" slower than its one data-parallel peer. A slow node is
slow in nearly every step from its onset on; an echo of a moving imbalance is slow in about the
share of steps it is drawn and no more. So, when there is a ``data-moving`` finding, a node
detector's finding (id ``node-...``, with an onset) whose ranks compute above their peers'
median (``>= min_ratio`` x it and ``>= min_excess_ms`` more; peers: the ranks of the same work
class) in fewer than ``min_share`` of the steps from its onset to the end of the run is folded
into the ``data-moving`` finding as evidence (:func:`diag.diagnose.explain.absorb`): one fault,
one finding, with the cause the steps support, at the most severe of their severities, except
when the moving imbalance is only ``info`` because the hosts' CPUs are saturated (evidence
``host_cpu_busy_pct``): then it keeps its own.

A rank that *stalls* (the node detector's ``...-stalls`` finding,
:mod:`~diag.diagnose.detectors.node_stall`, or ``...-stopped``, a rank the daemon found stopped)
is slow in only some steps by definition, so the
step share cannot judge it; it was found because it is its class's slowest far more often than
chance and keeps a lead over its peers on average, which is what a moving imbalance does not do.
So the roles turn: the ``data-moving`` finding (the same steps read as "the slowest keeps
changing") is folded into the stall finding (the one losing the most, when several), as
evidence. So too into a node finding the daemon's evidence says is of a rank found stopped
(``stopped_samples``, added to a finding that names the rank already: held out, a rank
SIGSTOPped in bursts was found "slow from step 44", slow in under 3/4 of the steps from there,
and taken for an echo: "uneven batches", critical). Not into a pause *suggestion* (evidence
``pause_chance``: a few long pauses on one rank, too few to pass the stall test): a claim short
of its test does not reinterpret one that passed its own; both stay, ranked (held out: uneven
sequence lengths, whose longest batches fell on one rank five times, 1 chance in 256, were
listed as that rank's pauses).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diag.diagnose import explain
from diag.diagnose.coverage import PAUSE_CHANCE, found_stopped
from diag.diagnose.features import Features, peer_median
from diag.findings import Finding

MOVING_ID = "data-moving"
#: Evidence of a moving imbalance found on hosts whose CPUs are saturated: it cannot tell uneven
#: batches from ranks taking turns for CPU time, so it is only ``info``, and the echoes it takes
#: in (by that same reading of the steps) do not raise it.
SATURATED_CPU = "host_cpu_busy_pct"
STALL_SUFFIX = "-stalls"
#: node findings found by what is not a step share: stalls (above) and a rank found stopped
NOT_ECHOES = (STALL_SUFFIX, "-stopped")


@dataclass(frozen=True, slots=True, kw_only=True)
class MovingConfig:
    """The per-step share that tells a slow node from a moving imbalance's echo."""

    min_share: float = 0.75
    min_ratio: float = 1.08  # as the node detector's per-step flag
    min_excess_ms: float = 1.0
    warmup_steps: int = 5


def step_share(features: Features, finding: Finding, cfg: MovingConfig) -> float | None:
    """The share of steps from ``finding``'s onset on in which its ranks compute above their
    peers' median (mean over its ranks); ``None`` when the steps cannot tell."""
    compute = features.wide("compute_ms", cfg.warmup_steps)
    ranks = [r for r in finding.ranks if r in compute.columns]
    if finding.onset_step is None or not ranks or compute.shape[1] < 2:
        return None
    layout = features.work_layout()
    peers = peer_median(compute, layout.work_class if layout.known else None)
    after = compute.index >= finding.onset_step
    c, p = compute.loc[after, ranks], peers.loc[after, ranks]
    valid = c.notna() & p.notna()
    if not valid.to_numpy().any():
        return None
    slow = (c >= cfg.min_ratio * p) & (c - p >= cfg.min_excess_ms)
    return float(np.nanmean([slow[r][valid[r]].mean() for r in ranks if valid[r].any()]))


def _not_echo(f: Finding) -> bool:
    """A node finding no step share can judge: a stall, a rank found stopped (its own finding,
    or evidence the node detector added to one that names it already: an observation of the
    process, which no draw of uneven batches makes)."""
    return f.id.endswith(NOT_ECHOES) or found_stopped(f)


def fold(
    findings: list[Finding], features: Features, cfg: MovingConfig | None = None
) -> list[Finding]:
    """``findings`` with the node findings a moving imbalance explains folded into it."""
    cfg = cfg or MovingConfig()
    moving = next((f for f in findings if f.id == MOVING_ID), None)
    if moving is None:
        return findings
    # A pause suggestion (evidence ``pause_chance``: too few pauses for the stall test) is a
    # weaker claim than the moving imbalance's: it stays beside it, it does not take it in.
    stalls = [
        f
        for f in findings
        if f.cause == "node"
        and _not_echo(f)
        and not any(e.metric == PAUSE_CHANCE for e in f.evidence)
    ]
    if stalls:
        lead = max(stalls, key=lambda f: f.slowdown or 0.0)
        return [
            explain.absorb(f, [moving]) if f.id == lead.id else f
            for f in findings
            if f.id != MOVING_ID
        ]
    echoes = [
        f
        for f in findings
        if f.cause == "node"
        and f.id.startswith("node-")
        and not _not_echo(f)
        and f.symptom == "slowdown"
        and (share := step_share(features, f, cfg)) is not None
        and share < cfg.min_share
    ]
    if not echoes:
        return findings
    gone = {f.id for f in echoes}
    # On saturated hosts the moving imbalance says "uneven batches, or ranks taking turns for
    # CPU time: check for contention first"; the ranks it takes in are read the same way, and
    # a warning of theirs is no more data's than its own (a CI run beside a busy neighbour: a
    # node echo from the neighbour's load raised the moving imbalance of three healthy ranks
    # to a data warning next to the real slow loader).
    keep = any(e.metric == SATURATED_CPU for e in moving.evidence)
    return [
        explain.absorb(f, echoes, keep_severity=keep) if f.id == MOVING_ID else f
        for f in findings
        if f.id not in gone
    ]
