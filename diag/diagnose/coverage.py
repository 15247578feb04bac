"""Kernel evidence for a node finding: was the anomaly profiled, so that "node, not kernel" holds?

The node detector sees that a rank computes longer; that alone cannot tell a slow node (every
kernel slower) from one slower operator (a kernel): only per-kernel times can
(:mod:`diag.diagnose.reconcile` weighs them when the kernel detector found something). When it
found nothing, "node" holds only if there was something to find it in: a profiler window after
the anomaly's onset, on the culprit ranks and on at least one peer (the kernel detector compares
ranks, and a window before the onset shows the rank as it was before).

Per node slowdown finding (cause ``node``, with an ``onset_step``; a crash or hang blamed on a node
is not a question of kernels): the *covering* windows are the
:class:`~diag.schema.ProfileWindow` ids whose first step is at or after the onset, profiled (``ok``)
by every culprit rank and by other ranks enough to compare them with: ``min_ranks`` (3) ranks in
all, the median of three or more the kernel detector asks for (all of the culprits' work class,
or of the job, when it has fewer; at least one other). A window that only part of its ranks have
shipped yet (the closed loop's window, seen by a live triage pass while the others' summaries are
on their way) decides nothing: CI decided "node" from the culprit and one peer, with which the
kernel detector could not compare, and a pass later the full window named the operator. With
one or more the finding is *decided*
(evidence ``kernel_evidence``: the count). With none it is *undecided between node and kernel*:
the cause stays ``node`` (the field stays valid), the confidence is multiplied by
``undecided_factor`` (0.7), the summary says so, and an evidence item ``kernel_evidence`` (value
0, reference 1 window, subject the ranks and ``after step N``) names what decides it: a profiler
window after the onset (``diag profile RUN``). That item is what a controller acts on: metric
:data:`KERNEL_EVIDENCE`, value 0, the finding's ranks and onset.

A finding that carries direct evidence of the node itself needs no kernel evidence: its GPU
against its peers' (clocks, throttling, temperature, power, XID and ECC errors), or its host's CPU
taken by other processes (``host_other_cpu_cores``, run-queue delay), or its process found
stopped (``stopped_samples``): a slow device, a contended host or a frozen process is what "node"
means, whatever the kernels say. So does a node finding whose ranks another (dated) finding
shows contended by processes outside the job (contention with ``foreign_processes`` > 0): it is
marked with that finding's id (evidence ``contended_by``), not undecided, and the closed loop
(:mod:`diag.analyzer.autocapture`) requests no window for it (CI: a window on a rank whose CPU a
hog took showed ``aten::mm`` 33x slower, preempted). Structural findings (no onset) are
a question of layout, not of a device: left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import pandas as pd

from diag.findings import Evidence, Finding

#: Evidence metric saying how many profiler windows cover a node finding's anomaly.
KERNEL_EVIDENCE = "kernel_evidence"
#: Evidence metrics that are direct evidence of the node: a finding holding one is decided.
NODE_EVIDENCE_PREFIXES = (
    "gpu_", "host_other_cpu", "cpu_wait", "host_process", "stopped_", "foreign_processes",
)  # fmt: skip
#: evidence that the rank's process was found stopped: its per-operator times hold the freezes
STOPPED_EVIDENCE = "stopped_samples"
#: a kernel finding's share of what its rank lost in its profiler windows (detectors.kernel)
RANK_SHARE = "rank_excess_share"
#: contention's count of competitors outside the job (diag.diagnose.detectors.contention)
FOREIGN_PROCESSES = "foreign_processes"
#: a process contention names, its CPU share (100 per core): the first ``FOREIGN_PROCESSES``
#: of them are outside the job, the rest the job's own or diag's
HOST_PROCESS_CPU = "host_process_cpu_pct"
#: contention's last step of a rank's anomaly (subject the rank): its delay above the floor
CONTENDED_UNTIL = "contended_until_step"
#: a pause suggestion's chance (diag.diagnose.detectors.node): short of the stall test
PAUSE_CHANCE = "pause_chance"


def names_competitor(f: Finding) -> bool:
    """Whether contention finding ``f`` names a competitor outside the job and diag (its
    ``foreign_processes`` count above 0; 0 is the job's own load or a CPU limit)."""
    return any(e.metric == FOREIGN_PROCESSES and e.value > 0 for e in f.evidence)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoverageConfig:
    """How much an undecided node finding's confidence is lowered."""

    undecided_factor: float = 0.7
    min_ranks: int = 3  # ranks a covering window holds (the kernel detector's median of three)


def covering_windows(
    windows: pd.DataFrame,
    ranks: tuple[int, ...],
    onset: int,
    min_ranks: int = 3,
    num_ranks: int | None = None,
    classes: Mapping[int, int] | None = None,
) -> list[str]:
    """Ids of the profiler windows from step ``onset`` on that every rank of ``ranks`` and other
    ranks, ``min_ranks`` in all, profiled (``ok``), in step order. Fewer suffice where there
    are fewer to compare with: the ranks of the culprits' work class (``classes``: rank -> work
    class), else the job's ``num_ranks`` (by default the ranks that profiled anything); one
    besides ``ranks`` always."""
    need = {"window_id", "rank", "step"}
    if windows.empty or not ranks or not need <= set(windows.columns):
        return []
    if classes and set(ranks) <= set(classes):
        mine = {classes[r] for r in ranks}
        job = sum(1 for c in classes.values() if c in mine)
    elif num_ranks is not None:
        job = num_ranks
    else:
        job = int(windows.loc[windows["rank"] >= 0, "rank"].nunique())
    enough = max(len(set(ranks)) + 1, min(min_ranks, job))
    w = windows[(windows["rank"] >= 0) & (windows["step"] >= onset)]
    if "ok" in w.columns:
        w = w[w["ok"].astype(bool)]
    out = []
    for wid, rows in w.sort_values("step", kind="stable").groupby("window_id", sort=False):
        profiled = {int(r) for r in rows["rank"]}
        if set(ranks) <= profiled and profiled - set(ranks) and len(profiled) >= enough:
            out.append(str(wid))
    return out


def awaits_window(f: Finding) -> bool:
    """``f`` was left undecided between node and kernel (:func:`undecided`: its kernel evidence
    says no profiler window covers it)."""
    return any(e.metric == KERNEL_EVIDENCE and e.value == 0 for e in f.evidence)


def found_stopped(f: Finding) -> bool:
    """Whether ``f`` holds the daemon's evidence that its rank was found stopped while its peers
    were not (:data:`STOPPED_EVIDENCE`, added by the node detector): an observation of the
    process, not a reading of the steps."""
    return any(e.metric == STOPPED_EVIDENCE for e in f.evidence)


def has_node_evidence(f: Finding) -> bool:
    """Whether ``f`` carries direct evidence of its node (see the module docstring)."""
    return any(e.metric.startswith(NODE_EVIDENCE_PREFIXES) for e in f.evidence)


#: how far apart (steps) a contention finding's onset may be from a slowdown it explains: two of
#: contention's 10-step blocks (it dates bursty run-queue delay a block or two off)
CONTENDED_WITHIN_STEPS = 20


def contended_by(
    f: Finding, findings: list[Finding], within: int = CONTENDED_WITHIN_STEPS
) -> Finding | None:
    """Another slowdown finding, dated, that shows a process outside the job taking the CPU of
    every rank of ``f`` (contention with ``foreign_processes`` > 0) from about when ``f`` began
    (onsets at most ``within`` steps apart): direct evidence of their node, so ``f``'s slower
    compute needs no profiler window to be the node's (a CPU operator preempted in a window is
    what that process does); ``None`` when there is none. A competitor that arrived hundreds of
    steps after the slowdown (CI: a neighbour's type checker at step 448 beside a kernel slowed
    at step 40) explains nothing of it. Nor does one that takes the CPU of as many other ranks as
    ``f`` has peers (its ``peers`` evidence): those ranks, presumably the very peers ``f`` is slow
    against, wait as it does, so the competitor is common to both sides of the comparison (CI: a
    hog on a 2-core host slowed all four ranks a few ms/step, and a kernel 4x slower on one rank,
    found by the closed loop's window, was called the node's); ``f`` then needs its windows."""
    peers = next((int(e.value) for e in f.evidence if e.metric == "peers"), None)
    for g in findings:
        if (
            g.id != f.id
            and g.symptom == "slowdown"
            and g.cause == "node"
            and g.onset_step is not None
            and (f.onset_step is None or abs(g.onset_step - f.onset_step) <= within)
            and f.ranks
            and set(f.ranks) <= set(g.ranks)
            and (peers is None or peers < 1 or len(set(g.ranks) - set(f.ranks)) < peers)
            and names_competitor(g)
        ):
            return g
    return None


def check(
    findings: list[Finding],
    windows: pd.DataFrame,
    cfg: CoverageConfig | None = None,
    num_ranks: int | None = None,
    classes: Mapping[int, int] | None = None,
) -> list[Finding]:
    """``findings`` with each node finding marked decided or undecided (module docstring);
    ``num_ranks``: the job's ranks (by default those that profiled anything); ``classes``:
    rank -> work class, where the layout is known."""
    cfg = cfg or CoverageConfig()
    out = []
    for f in findings:
        onset = f.onset_step
        if f.symptom != "slowdown" or f.cause != "node" or onset is None or has_node_evidence(f):
            out.append(f)
            continue
        if (g := contended_by(f, findings)) is not None:
            out.append(contended(f, g))
            continue
        wins = covering_windows(windows, f.ranks, onset, cfg.min_ranks, num_ranks, classes)
        out.append(decided(f, len(wins)) if wins else undecided(f, cfg))
    return out


def _who(f: Finding) -> str:
    return ", ".join(f"rank {r}" for r in f.ranks)


def decided(f: Finding, num_windows: int) -> Finding:
    """``f`` with the profiler windows that cover its anomaly as evidence."""
    return replace(
        f,
        evidence=(
            *f.evidence,
            Evidence(
                metric=KERNEL_EVIDENCE,
                subject=f"{_who(f)} and peers, after step {f.onset_step}",
                value=float(num_windows),
                reference=1.0,
                unit="windows",
                note="profiler windows after the onset on the culprit and its peers; no single "
                "kernel explains the slowdown in them",
            ),
        ),
    )


def contended(f: Finding, g: Finding) -> Finding:
    """``f`` decided by ``g``'s evidence of a process outside the job on its ranks' CPUs."""
    foreign = next(e.value for e in g.evidence if e.metric == FOREIGN_PROCESSES)
    return replace(
        f,
        evidence=(
            *f.evidence,
            Evidence(
                metric="contended_by",
                subject=g.id,
                value=foreign,
                unit="processes",
                note=f"{g.id} shows processes outside the job taking the CPU of {_who(f)}: the "
                "node's, no profiler window needed",
            ),
        ),
    )


def undecided(f: Finding, cfg: CoverageConfig) -> Finding:
    """``f`` as undecided between node and kernel: lower confidence, what would decide it."""
    return replace(
        f,
        confidence=f.confidence * cfg.undecided_factor,
        summary=(
            f"{f.summary}; undecided between node and kernel: no profiler window after step "
            f"{f.onset_step} on {_who(f)} and its peers (diag profile RUN decides)"
        ),
        evidence=(
            *f.evidence,
            Evidence(
                metric=KERNEL_EVIDENCE,
                subject=f"{_who(f)} and peers, after step {f.onset_step}",
                value=0.0,
                reference=1.0,
                unit="windows",
                note=f"kernel evidence: none after onset step {f.onset_step}; undecided between "
                "node and kernel; a profiler window after the onset decides (diag profile RUN)",
            ),
        ),
    )
