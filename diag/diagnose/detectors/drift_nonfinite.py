"""The first non-finite value of a run: which rank, which step, which module, and why.

Observations per (rank, step): the hooks' :class:`~diag.schema.NonFinite` events (their
``where``), a NaN/Inf step loss, a batch with NaN/Inf values (``input``) and a sampled gradient
norm that is not finite (``grad``). The first step is the earliest one with an observation other
than ``grad``; its culprits are the ranks observed there. Gradients alone name no rank: DDP's
all-reduce hands one rank's NaN gradient to every replica in the same step, so they count only
when nothing else was seen (then every rank whose gradient was non-finite first is listed, or
none when that is all of them). Ranks first non-finite at a later step are echoes (the NaN came
to them through the all-reduce and the optimizer step) and are listed as such.

Cause, in order: the shared rules of :mod:`~diag.diagnose.detectors.drift_context`
(``checkpoint`` after a load, ``data`` for a NaN/Inf or outlier batch); ``data`` when the hook
found the NaN in the model's inputs; ``node`` when the culprit's replica had diverged from its
peers by then (``drift:replica``) or when the hook's replay of the step, on the same inputs and
parameters, was finite (a transient fault: silent data corruption suspected); ``kernel`` when a
module's output was non-finite on finite inputs and parameters, again on the replay (a
numerical overflow, or a faulty kernel, in that module); else ``unknown``. Confidence 0.9 with a
module or a cause's evidence, 0.75 with the rank only, 0.5 when no rank can be named.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diag.diagnose.detectors.drift_context import Context, float_column, ranks_text
from diag.findings import Evidence, Finding

_PLACES = {
    "input": "in the model's input",
    "module_output": "in {module}'s output",
    "module_input": "entering {module} (made outside any module)",
    "loss": "in the loss",
    "grad": "in the gradients",
}


@dataclass(frozen=True, slots=True)
class Obs:
    """One non-finite observation: ``where`` (as NonFinite's), and the hook's report if any."""

    rank: int
    step: int
    where: str
    module: str = ""
    tensor: str = ""
    num_nonfinite: int = 0
    num_elements: int = 0
    method: str = ""
    reproduced: bool = False


def observations(ctx: Context) -> list[Obs]:
    f = ctx.features
    out: list[Obs] = []
    if not f.nonfinite.empty:
        for r in f.nonfinite[f.nonfinite["rank"] >= 0].itertuples():
            out.append(Obs(int(r.rank), int(r.step), str(r.where), str(r.module), str(r.tensor),
                           int(r.num_nonfinite), int(r.num_elements), str(r.method),
                           bool(r.reproduced)))  # fmt: skip
    t = ctx.loss_table
    bad = t["present"].to_numpy(dtype=bool) & ~np.isfinite(t["loss"].to_numpy(dtype=float))
    out.extend(
        Obs(int(r), int(s), "loss")
        for r, s in zip(t["rank"].to_numpy()[bad], t["step"].to_numpy()[bad], strict=True)
    )
    b = ctx.batches
    if not b.empty:
        out.extend(
            Obs(int(r.rank), int(r.step), "input") for r in b[b["num_nonfinite"] > 0].itertuples()
        )
    num = f.numerics
    if not num.empty:
        rows = num[num["grad_norm"].notna() & (num["rank"] >= 0)]
        bad = ~np.isfinite(float_column(rows, "grad_norm")) | (rows["num_nonfinite_grads"] > 0)
        out.extend(
            Obs(int(r), int(s), "grad")
            for r, s in zip(rows["rank"][bad], rows["step"][bad], strict=True)
        )
    return out


def finding(ctx: Context, replica: Finding | None) -> Finding | None:
    """The ``drift:nonfinite`` finding, or ``None`` when the run stayed finite."""
    obs = observations(ctx)
    primary = [o for o in obs if o.where != "grad"]
    pool = primary or obs
    if not pool:
        return None
    step = min(o.step for o in pool)
    at = [o for o in pool if o.step == step]
    ranks = tuple(sorted({o.rank for o in at}))
    all_ranks = set(ctx.loss_ranks) | {o.rank for o in obs}
    if not primary and set(ranks) >= all_ranks and len(ranks) > 1:
        ranks = ()
    report = _best(at)
    first_seen: dict[int, int] = {}
    for o in obs:
        first_seen[o.rank] = min(first_seen.get(o.rank, o.step), o.step)
    echoes = sorted((r, s) for r, s in first_seen.items() if s > step and r not in ranks)

    cause, why = ctx.cause(step, ranks, default="unknown")
    if cause == "unknown":
        cause, why = _own_cause(report, replica, step)
    place = _PLACES.get(report.where, "").format(module=report.module or "a module")
    who = ranks_text(ranks) if ranks else "every rank's gradients (the rank cannot be told)"
    summary = f"first non-finite value at step {step} on {who}" + (f", {place}" if place else "")
    if echoes:
        later = sorted({s for _, s in echoes})
        summary += (
            f"; {ranks_text([r for r, _ in echoes])} followed from step {later[0]} (the "
            "gradient all-reduce spreads it)"
        )
    evidence = [_evidence(o) for o in at[:8]]
    evidence += [
        Evidence(metric="first_nonfinite_step", subject=f"rank {r}", value=float(s),
                 reference=float(step), note="an echo of the first one")
        for r, s in echoes[:8]
    ]  # fmt: skip
    named = bool(report.module) or report.where == "input" or why is not None
    confidence = 0.9 if named and ranks else (0.75 if ranks else 0.5)
    return ctx.finding(
        "drift:nonfinite", cause, ranks, step, summary, why, evidence,
        severity="critical", confidence=confidence,
    )  # fmt: skip


def _best(at: list[Obs]) -> Obs:
    """The most telling observation at the first step: a hook report naming a module first."""
    order = {"module_output": 0, "module_input": 1, "input": 2, "loss": 3, "grad": 4}
    return min(at, key=lambda o: (order.get(o.where, 5), not o.method, o.rank))


def _own_cause(report: Obs, replica: Finding | None, step: int) -> tuple[str, str | None]:
    if report.where == "input":
        return "data", f"the model's input held NaN/Inf ({report.tensor})"
    if (
        replica is not None
        and report.rank in replica.ranks
        and replica.onset_step is not None
        and replica.onset_step <= step
    ):
        return "node", f"this replica's parameters had diverged from its peers' ({replica.id})"
    if report.method == "replay" and not report.reproduced:
        return "node", (
            "the same step re-run on the same inputs and parameters was finite: a transient "
            "fault, silent data corruption suspected"
        )
    if report.where == "module_output" and "non-finite" not in report.tensor:
        again = " again on a re-run of the step" if report.reproduced else ""
        return "kernel", (
            f"{report.module}'s output went non-finite on finite inputs and parameters{again}: "
            "a numerical overflow or a faulty kernel in that module"
        )
    return "unknown", None


def _evidence(o: Obs) -> Evidence:
    what = o.module + " " + o.tensor if o.module else (o.tensor or o.where)
    how = {"replay": "found by re-running the step", "window": "found on a later step"}
    note = how.get(o.method, o.method)
    if o.method == "replay":
        note += " (reproduced)" if o.reproduced else " (not reproduced: transient)"
    return Evidence(
        metric=f"nonfinite_{o.where}",
        subject=f"rank {o.rank} step {o.step}: {what.strip()}",
        value=float(o.num_nonfinite),
        reference=float(o.num_elements) if o.num_elements else None,
        unit="values",
        note=note,
    )
