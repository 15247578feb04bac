"""Drift detector: training numerics going wrong (findings with symptom ``drift``).

Five findings, each at most once per run (rules in :mod:`~diag.diagnose.detectors.drift_rules`
and :mod:`~diag.diagnose.detectors.drift_nonfinite`):

- ``drift:nonfinite``: the first NaN or Inf (rank, step, module), from the hooks'
  :class:`~diag.schema.NonFinite` events and the step losses.
- ``drift:loss_spike``: a rank's step loss above its robust rolling baseline (median of the
  previous ``loss_window`` losses + ``loss_k`` x MAD, and at least ``loss_min_ratio`` x that
  median). Spikes on at least ``job_share`` of the ranks at one step are the job's (every replica
  has the same parameters, so the optimisation itself jumped: cause ``unknown``); spikes on fewer
  ranks are those ranks' batches (cause ``data``: the same parameters gave a much larger loss on
  their inputs).
- ``drift:grad_norm_spike``: the sampled global gradient norm (the median over ranks; DDP's
  all-reduce makes it equal on every replica) above its own baseline of the previous
  ``grad_window`` samples (``grad_k``, ``grad_min_ratio``).
- ``drift:replica``: data-parallel replicas whose parameter checksums differ. With three or more
  replicas the strict majority is healthy and the odd rank is named (cause ``node``: silent data
  corruption suspected, confidence 0.9, 0.95 when the later fingerprints keep the same odd
  ranks); with two the divergence is reported without a culprit (confidence 0.5).
  ``onset_step`` is the step after the last fingerprint on which they agreed, ``detected_step``
  the first on which they differ.
- ``drift:loss_scale``: the AMP loss scale collapsed (``scale_min_halvings`` halvings below its
  peak, or under ``scale_tiny`` after three drops): gradients overflow step after step.

Causes common to all: ``checkpoint`` when the drift begins within ``after_load_steps`` steps
after a checkpoint load (a load before the first step counts as step 0: a resumed run); ``data``
when the culprit ranks' batches at that step held NaN/Inf or an outlier (a maximum magnitude
``outlier_factor`` x the run's median batch maximum, from the sampled batch statistics).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.diagnose.detectors import drift_nonfinite, drift_rules
from diag.diagnose.detectors.drift_context import Context, ranks_text
from diag.diagnose.features import Features
from diag.findings import Evidence, Finding


@dataclass(frozen=True, slots=True, kw_only=True)
class DriftConfig:
    """Thresholds of the drift detector (see the module docstring)."""

    loss_window: int = 50
    loss_min_history: int = 10
    loss_k: float = 8.0
    loss_min_ratio: float = 2.0
    grad_window: int = 20
    grad_min_history: int = 5
    grad_k: float = 8.0
    grad_min_ratio: float = 3.0
    rel_floor: float = 0.01  # the MAD is at least this share of the median
    job_share: float = 0.5  # spiking on this share of the ranks at one step: the job's spike
    after_load_steps: int = 10
    outlier_factor: float = 10.0
    scale_min_halvings: int = 10
    scale_tiny: float = 1.0


def detect(features: Features, cfg: DriftConfig | None = None) -> list[Finding]:
    """Every drift finding of the run (see the module docstring)."""
    cfg = cfg or DriftConfig()
    ctx = Context.build(features, cfg.after_load_steps, cfg.outlier_factor)
    replica = _replica(ctx)
    out = [f for f in (replica, _loss_spike(ctx, cfg), _grad_spike(ctx, cfg)) if f is not None]
    out.extend(_loss_scale(ctx, cfg))
    first = drift_nonfinite.finding(ctx, replica)
    return ([first] if first is not None else []) + out


def _loss_spike(ctx: Context, cfg: DriftConfig) -> Finding | None:
    t = ctx.loss_table
    found = drift_rules.spikes_table(  # the loss table's columns, not a copy (150 MB at 131k x 50)
        pd.DataFrame({"group": t["rank"], "step": t["step"], "value": t["loss"]}, copy=False),
        window=cfg.loss_window, min_history=cfg.loss_min_history, k=cfg.loss_k,
        min_ratio=cfg.loss_min_ratio, rel_floor=cfg.rel_floor,
    )  # fmt: skip
    by_step: dict[int, list[tuple[int, drift_rules.Spike]]] = {}
    for rank, spikes in found.items():
        for sp in spikes:
            by_step.setdefault(sp.step, []).append((rank, sp))
    if not by_step:
        return None
    step = min(by_step)
    hit = sorted(by_step[step], key=lambda rs: rs[0])
    job = len(hit) >= max(2, cfg.job_share * max(len(ctx.loss_ranks), 1))
    ranks = () if job else tuple(r for r, _ in hit)
    evidence = [
        Evidence(metric="loss", subject=f"rank {r}", value=sp.value, reference=sp.median,
                 note=f"{sp.ratio:.1f}x the median of the previous losses (MAD {sp.mad:.3g})")
        for r, sp in hit
    ]  # fmt: skip
    total = sum(len(v) for v in found.values())
    cause, why = ctx.cause(step, ranks, default="unknown" if job else "data")
    if not job and cause == "data" and why is None:
        why = "the same parameters gave a much larger loss on this rank's batch than on its peers'"
    who = "every rank" if job else ranks_text(ranks)
    worst = max(sp.ratio for _, sp in hit)
    summary = f"loss spike at step {step} on {who}: {worst:.1f}x the rolling median"
    if total > len(hit):
        summary += f" ({total} spikes in the run)"
    return ctx.finding(
        "drift:loss_spike", cause, ranks, step, summary, why, evidence,
        severity="warning", confidence=0.6 if why is None else 0.8,
    )  # fmt: skip


def _grad_spike(ctx: Context, cfg: DriftConfig) -> Finding | None:
    series = ctx.grad_norms()
    spikes = drift_rules.spikes(
        series, window=cfg.grad_window, min_history=cfg.grad_min_history, k=cfg.grad_k,
        min_ratio=cfg.grad_min_ratio, rel_floor=cfg.rel_floor,
    )  # fmt: skip
    if not spikes:
        return None
    sp = spikes[0]
    cause, why = ctx.cause(sp.step, (), default="unknown")
    evidence = [
        Evidence(metric="grad_norm", subject="job", value=sp.value, reference=sp.median,
                 note=f"{sp.ratio:.1f}x the median of the previous samples (MAD {sp.mad:.3g})")
    ]  # fmt: skip
    summary = f"gradient-norm spike at step {sp.step}: {sp.ratio:.1f}x the rolling median"
    if len(spikes) > 1:
        summary += f" ({len(spikes)} sampled spikes in the run)"
    return ctx.finding(
        "drift:grad_norm_spike", cause, ctx.blamed_ranks(sp.step), sp.step, summary, why,
        evidence, severity="warning", confidence=0.6 if why is None else 0.8,
    )  # fmt: skip


def _replica(ctx: Context) -> Finding | None:
    votes = drift_rules.replica_votes(ctx.features.fingerprints)
    bad = [v for v in votes if not v.agree]
    if not bad:
        return None
    first = bad[0]
    agreed = [v.step for v in votes if v.agree and v.group == first.group and v.step < first.step]
    onset = agreed[-1] + 1 if agreed else first.step
    later = [v for v in bad if v.group == first.group and v.step > first.step]
    ranks = first.odd
    steady = bool(later) and all(v.odd == ranks for v in later)
    cause, why = ctx.cause(onset, ranks, default="node")
    where = f"between steps {onset} and {first.step}" if onset < first.step else f"at {first.step}"
    if ranks:
        healthy = len(first.ranks) - len(ranks)
        who = f"{ranks_text(ranks)}'s parameters differ from the other {healthy} replicas"
        confidence = 0.95 if steady else 0.9
        if cause == "node" and why is None:
            why = "silent data corruption suspected: DDP replicas must match bitwise"
    else:
        who = (
            f"the {len(first.ranks)} replicas' parameters differ ({first.num_checksums} checksums)"
        )
        who += "; with two replicas the odd one cannot be told"
        confidence = 0.5
    evidence = [
        Evidence(metric="distinct_checksums", subject=f"group {v.group} step {v.step}",
                 value=float(v.num_checksums), reference=1.0,
                 note=f"odd: {ranks_text(v.odd) if v.odd else 'no majority'}")
        for v in bad[:5]
    ]  # fmt: skip
    summary = f"replica divergence {where}: {who}"
    if later:
        summary += f"; still differing at {len(later)} later fingerprints"
    return ctx.finding(
        "drift:replica", cause, ranks, onset, summary, why, evidence,
        severity="critical", confidence=confidence, detected=first.step,
    )  # fmt: skip


def _loss_scale(ctx: Context, cfg: DriftConfig) -> list[Finding]:
    num = ctx.features.numerics
    if num.empty:
        return []
    rows = num[num["loss_scale"].notna() & (num["rank"] >= 0)]
    scales = pd.DataFrame(
        {
            "rank": rows["rank"].astype("int64"),
            "step": rows["step"].astype("int64"),
            "ts_ns": rows["ts_ns"].astype("int64"),
            "loss_scale": rows["loss_scale"].to_numpy(dtype=float, na_value=np.nan),
        }
    )
    collapses = drift_rules.scale_collapse(
        scales, halvings=cfg.scale_min_halvings, tiny=cfg.scale_tiny
    )
    if not collapses:
        return []
    onset = min(c.onset_step for c in collapses)
    detected = min(c.detected_step for c in collapses)
    ranks = tuple(sorted(c.rank for c in collapses))
    everyone = set(ranks) >= set(ctx.loss_ranks) and len(ranks) > 1
    shown = () if everyone else ranks
    cause, why = ctx.cause(onset, shown, default="unknown")
    worst = min(collapses, key=lambda c: c.value)
    evidence = [
        Evidence(metric="loss_scale", subject=f"rank {c.rank}", value=c.value, reference=c.peak,
                 note=f"{c.num_drops} drops from step {c.onset_step} to {c.detected_step}")
        for c in collapses
    ]  # fmt: skip
    summary = (
        f"AMP loss scale collapsed from {worst.peak:g} to {worst.value:g} between steps "
        f"{onset} and {detected}: gradients overflow step after step"
    )
    return [
        ctx.finding(
            "drift:loss_scale",
            cause,
            shown,
            onset,
            summary,
            why,
            evidence,
            severity="critical" if worst.value < cfg.scale_tiny else "warning",
            confidence=0.8,
            detected=detected,
        )
    ]
