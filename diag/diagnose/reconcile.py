"""Cross-detector reconciliation: one diagnosis when two detectors see the same fault.

A kernel that got slower on one rank makes that rank's compute slower, so the node detector
flags the rank too; a slow GPU (or a throttled host) makes every kernel on the rank slower, so the
kernel detector flags its heaviest kernels. Which cause is it? Per node finding (cause ``node`` or
``structural``) and kernel finding (cause ``kernel``) naming exactly the same ranks, per step on
those ranks:

- ``E`` = the node finding's compute excess (its ``compute_ms`` evidence: median compute in the
  anomaly minus the peers' median, averaged over its ranks), ``B`` = the peers' compute;
- ``e`` = the kernel's excess (its ``kernel_time_ns`` evidence: value minus reference, per
  profiler window) divided by the steps a window covers (median ``ProfileWindow.num_steps``, 1
  when unknown), ``b`` = its reference time likewise;
- ``explained = e / E``; the kernel's relative excess ``e / b`` against the rest of the
  compute's ``(E - e) / (B - b)``.

The kernel is the cause when (1) it was found against the other ranks, as the node finding was
(a cross-rank finding; a regression compares the rank with its own first windows, a different
reference), (2) it explains most of the extra compute, ``explained >= min_explained`` (0.5), and
(3) it is *concentrated*: it slowed down well beyond the rest of the rank's compute, ``e / b >=
concentration x (E - e) / (B - b)`` (2), and (4) in its own profiler windows it holds most of
what the rank lost there: its excess over the peers' median is ``>= min_explained`` of the
rank's largest excess of any operator in those windows (evidence ``rank_excess_share``, see
:func:`~diag.diagnose.detectors.kernel.rank_excess`): the steps' excess ``E`` and the windows'
``e`` come from different steps, and a tiny operator preempted in a window or two (41x its
peers' time, CI) can match a small ``E`` while the rank's matrix products lost ten times more
beside it. Then the kernel finding absorbs the node finding: it
keeps its kernel, ranks and excess, takes the higher confidence, the more severe severity and the
node's evidence; its ``onset_step`` becomes the node finding's when that has one (the node
detector sees every step, the kernel detector only profiled ones, so it dates the change more
finely); ``detected_step`` and ``slowdown`` stay its own unless ``None`` (the kernel is named only
once its windows show it). The node finding is dropped.

The kernel detector asks for a kernel to be slow in two windows, by at least 5% of a window: a
floor against noise, which costs a window or more of detection and misses a small kernel excess.
A node finding of one rank with an onset (and no direct evidence of the node: its GPU, its
host's CPU, nor another finding showing a process outside the job on its CPU) already proves
the excess is real, in every step; so before the pairing above, the profiler windows from its
onset on are searched for the kernel that takes it (the registry passes
``kernels_for``: :func:`~diag.diagnose.detectors.kernel.detect_for`, the same ratio to the
peers and the same work, no floor, one window enough) and the same rule decides: explained and
concentrated, the kernel finding absorbs the node finding, detected no earlier than the node
finding was. Where no operator passes alone, the operators slowed the most (up to
``max_together``) may pass together (:func:`operators_together`): a layer in another dtype
slows its forward, its backward and its casts, each a part of the excess.

A node finding whose process the daemon found stopped (``stopped_samples`` evidence) is never
absorbed: a frozen process spends the freeze in whatever operator runs (a SIGSTOP inside one of
32 copies read as ``aten::_to_copy`` 73x slower); its kernel findings are its symptoms, as below.

Otherwise the node finding stays, and each kernel finding on its ranks that is not concentrated
(a slow device slows every kernel by about the same factor) is demoted to ``info``, with a
confidence below the node's, as a symptom of it; so is one that is concentrated but holds less
than ``min_explained`` of what the rank lost in its own windows (evidence ``part_of``: the rank
lost more elsewhere there, e.g. in more matrix products, and the operator is a part of that).
A concentrated kernel finding that explains too little of the steps' excess while holding most
of the windows', or a regression, is left as it is: a second issue, not the diagnosis.

Then every other kernel finding above ``info`` is checked against the steps (profiler windows
sample a step in ``profile_every``; the step events cover them all): a slow kernel makes every
step of its ranks slower, so from its onset on their median compute excess per step (over the
peers' median for a cross-rank finding, over their own median before the onset for a
regression; steps after ``warmup_steps``) must be ``>= min_seen_in_steps`` (0.5) x the kernel's
excess per step. Otherwise a few slow profiled steps (scheduler spikes that happened to fall in
the windows) made it: it is demoted to ``info``, its confidence scaled by the share the steps
show (``min(1, seen / expected)``), with the step evidence.

Findings of other causes pass through unchanged by these rules. Three more steps follow them:

- **moving imbalance** (:mod:`~diag.diagnose.moving`): a node finding on ranks that are slower
  than their peers in only some of the steps since its onset, beside a ``data-moving`` finding,
  is an echo of the moving imbalance and is folded into it;
- **kernel evidence** (:mod:`~diag.diagnose.coverage`): a node finding that no kernel finding
  absorbed is *decided* only when a profiler window after its onset covers its ranks and a peer;
  otherwise it is undecided between node and kernel, with a lower confidence and the window that
  would decide it as evidence;
- **explained findings** (:mod:`~diag.diagnose.explain`): a finding another explains (an echo of
  it on the same ranks, from about the same step, losing no more of the job) is folded into that
  one as evidence, so one fault is one finding (a slow link's ranks that read as computing
  longer are the link's, not a second diagnosis).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import pandas as pd

from diag.diagnose import coverage, explain, moving
from diag.diagnose.features import Features, peer_median
from diag.findings import SEVERITIES, Evidence, Finding

NODE_CAUSES = ("node", "structural")
REGRESSION = ":regression"  # the id suffix of a kernel regression (against the rank's own past)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileConfig:
    """Thresholds of the kernel-versus-node rule (see the module docstring)."""

    min_explained: float = 0.5  # kernel excess / node compute excess, per step
    concentration: float = 2.0  # kernel's relative excess / the rest of compute's
    max_together: int = 4  # operators of one layer that explain a slow rank together
    min_seen_in_steps: float = 0.5  # steps' compute excess / the kernel's excess, per step
    warmup_steps: int = 5  # first steps left out of the step check (as the node detector does)


@dataclass(frozen=True, slots=True)
class Attribution:
    """How much of a node finding's compute excess one kernel finding explains (ms per step)."""

    explained: float  # e / E
    kernel_rel: float  # e / b
    rest_rel: float  # (E - e) / (B - b)
    rank_share: float | None = None  # of the rank's excess in the kernel's own windows

    def concentrated(self, cfg: ReconcileConfig) -> bool:
        return self.kernel_rel >= cfg.concentration * self.rest_rel

    def is_kernel(self, cfg: ReconcileConfig) -> bool:
        in_windows = self.rank_share is None or self.rank_share >= cfg.min_explained
        return self.explained >= cfg.min_explained and in_windows and self.concentrated(cfg)


def steps_per_window(windows: pd.DataFrame) -> float:
    """The median number of steps a profiler window covers (1 without windows)."""
    if windows.empty or "num_steps" not in windows:
        return 1.0
    n = windows.loc[windows["rank"] >= 0, "num_steps"]
    return float(max(1.0, n.median())) if len(n) else 1.0


def attribute(node: Finding, kern: Finding, window_steps: float = 1.0) -> Attribution | None:
    """``kern``'s share of ``node``'s compute excess; ``None`` without the evidence to tell."""
    compute = [x for x in node.evidence if x.metric == "compute_ms" and x.reference is not None]
    times = [x for x in kern.evidence if x.metric == "kernel_time_ns" and x.reference is not None]
    e = kernel_excess_ms(kern, window_steps)
    if not compute or not times or e is None:
        return None
    big_b = sum(x.reference or 0.0 for x in compute) / len(compute)
    big_e = sum(x.value - (x.reference or 0.0) for x in compute) / len(compute)
    b = (times[0].reference or 0.0) / 1e6 / window_steps
    if big_e <= 0 or b <= 0:
        return None
    rest = (big_e - e) / (big_b - b) if big_b > b else 0.0
    share = [x.value for x in kern.evidence if x.metric == coverage.RANK_SHARE]
    return Attribution(
        explained=e / big_e,
        kernel_rel=e / b,
        rest_rel=max(0.0, rest),
        rank_share=share[0] if share and math.isfinite(share[0]) else None,
    )


#: kernel candidates for a slow rank's node finding, from the windows after its onset
KernelsFor = Callable[[Finding], list[Finding]]


def reconcile(
    findings: list[Finding],
    features: Features | None = None,
    cfg: ReconcileConfig | None = None,
    kernels_for: KernelsFor | None = None,
) -> list[Finding]:
    """``findings`` with kernel/node pairs resolved, kernel findings checked against the steps,
    node findings checked for kernel evidence and explained findings folded (see the module
    docstring), order kept. Without ``features``: one step per profiler window, no step check
    and no kernel-evidence check."""
    cfg = cfg or ReconcileConfig()
    window_steps = 1.0 if features is None else steps_per_window(features.windows)
    nodes = [f for f in findings if f.cause in NODE_CAUSES]
    kernels = [f for f in findings if f.cause == "kernel"]
    replaced: dict[str, Finding] = {}
    dropped: set[str] = set()
    for node in nodes:
        if kernels_for is not None and _undecided_slow_rank(node, findings):
            found = focused_kernel(node, kernels_for(node), window_steps, cfg)
            if found is not None and found.id not in replaced:
                replaced[found.id] = found
                dropped.add(node.id)
                continue
        same = [k for k in kernels if set(k.ranks) == set(node.ranks) and node.ranks]
        if coverage.found_stopped(node):
            # A process found stopped spends its freezes in whatever operator was running: an
            # operator many times slower in a window or two is the freeze, not a kernel.
            for k in same:
                if k.id not in replaced:
                    replaced[k.id] = symptom(k, node)
            continue
        scored = [(k, attribute(node, k, window_steps)) for k in same]
        causes = [
            (k, a)
            for k, a in scored
            if a is not None and a.is_kernel(cfg) and not k.id.endswith(REGRESSION)
        ]
        if causes:
            best, _ = max(causes, key=lambda ka: ka[1].explained)
            replaced[best.id] = absorb(replaced.get(best.id, best), node)
            dropped.add(node.id)
        else:
            for k, a in scored:
                if a is None or k.id in replaced:
                    continue
                if not a.concentrated(cfg):
                    replaced[k.id] = symptom(k, node)
                elif a.rank_share is not None and a.rank_share < cfg.min_explained:
                    replaced[k.id] = minor(k, node, a.rank_share)
    if features is not None:
        compute = features.wide("compute_ms", cfg.warmup_steps)
        for k in kernels:
            if k.id in replaced or k.severity == "info":
                continue
            seen = step_excess(compute, k)
            expected = kernel_excess_ms(k, window_steps)
            if seen is not None and expected and seen < cfg.min_seen_in_steps * expected:
                replaced[k.id] = unseen(k, seen, expected)
    out = [replaced.get(f.id, f) for f in findings if f.id not in dropped]
    given = {f.id for f in findings}
    out += [f for fid, f in replaced.items() if fid not in given]  # kernels found for a node
    if features is not None:
        ranks = int(features.steps["rank"].nunique()) if "rank" in features.steps else 0
        layout = features.work_layout()
        out = coverage.check(
            moving.fold(out, features),
            features.windows,
            num_ranks=ranks or None,
            classes=layout.work_class if layout.known else None,
        )
    return explain.fold(out)


def _undecided_slow_rank(node: Finding, findings: list[Finding]) -> bool:
    """A node slowdown of one rank with an onset and no direct evidence of the node itself
    (nor another finding's: a process outside the job on its CPU, which preempts whatever
    operator runs): the profiler windows after its onset are what tells node from kernel."""
    return (
        node.cause == "node"
        and node.symptom == "slowdown"
        and node.onset_step is not None
        and len(node.ranks) == 1
        and not coverage.has_node_evidence(node)
        and coverage.contended_by(node, findings) is None
    )


def focused_kernel(
    node: Finding, candidates: list[Finding], window_steps: float, cfg: ReconcileConfig
) -> Finding | None:
    """The kernel among ``candidates`` (found in the profiler windows after ``node``'s onset by
    :func:`~diag.diagnose.detectors.kernel.detect_for`: the node finding's steps are the noise
    guard, so no floor on the window share) that explains its compute excess, as a kernel
    finding that absorbed the node one; ``None`` when no kernel explains most of it,
    concentrated (the same rule as above). It is detected no earlier than the node finding was
    (the steps were needed to know)."""
    scored = [(k, attribute(node, k, window_steps)) for k in candidates]
    causes = [(k, a) for k, a in scored if a is not None and a.is_kernel(cfg)]
    if causes:
        best, _ = max(causes, key=lambda ka: ka[1].explained)
        merged = absorb(best, node)
    else:
        together = operators_together(scored, cfg)
        if together is None:
            return None
        merged = absorb(together, node)
        best = together
    detected = [s for s in (best.detected_step, node.detected_step) if s is not None]
    return replace(merged, detected_step=max(detected) if detected else None)


def operators_together(
    scored: list[tuple[Finding, Attribution | None]], cfg: ReconcileConfig
) -> Finding | None:
    """Operators of a slow rank that explain its compute excess together where none does
    alone: a layer computed in another dtype or by another algorithm slows its forward, its
    backward and its casts (``aten::addmm``, ``aten::mm``, ``aten::_to_copy``), each a part, and
    each part's own test counts the others in "the rest". The operators slowed the most (by
    their relative excess), the fewest of them (up to ``max_together``) whose summed excess and
    reference pass the same rule: explained, concentrated against the rest of the compute, and
    most of what the rank lost in its windows. A slow device slows every operator alike: no set
    is concentrated. The finding is the operator explaining most, the others named beside it
    (evidence ``with_operator``); ``None`` when no set passes."""
    parts = sorted(
        ((k, a) for k, a in scored if a is not None and a.explained > 0 and a.kernel_rel > 0),
        key=lambda ka: -ka[1].kernel_rel,
    )
    # In units of the rank's compute excess E: part i's excess x_i (explained), its base
    # b_i = x_i / kernel_rel_i, and the rank's base B = b_i + (1 - x_i) / rest_rel_i.
    wholes = [
        a.explained / a.kernel_rel + (1 - a.explained) / a.rest_rel
        for _, a in parts
        if a.rest_rel > 0 and a.explained < 1
    ]
    if len(parts) < 2 or not wholes:
        return None
    whole = float(pd.Series(wholes).median())
    for m in range(2, min(len(parts), cfg.max_together) + 1):
        chosen = parts[:m]
        explained = sum(a.explained for _, a in chosen)
        base = sum(a.explained / a.kernel_rel for _, a in chosen)
        shares = [a.rank_share for _, a in chosen if a.rank_share is not None]
        joint = Attribution(
            explained=min(1.0, explained),
            kernel_rel=explained / base,
            rest_rel=max(0.0, (1 - explained) / (whole - base)) if whole > base else 0.0,
            rank_share=min(1.0, sum(shares)) if shares else None,
        )
        if joint.is_kernel(cfg):
            break
    else:
        return None
    best, _ = max(chosen, key=lambda ka: ka[1].explained)
    others = [(k, a) for k, a in chosen if k is not best]
    names = [k.kernel or k.id for k, _ in others]
    evidence = [
        Evidence(
            metric="with_operator",
            subject=k.kernel or k.id,
            value=a.explained,
            reference=None,
            unit="fraction",
            note="share of the rank's compute excess this operator explains; slowed with "
            f"{best.kernel or best.id} (one layer's operators)",
        )
        for k, a in others
    ]
    summary = (
        f"{best.summary}; with {', '.join(names)} it explains {joint.explained:.0%} of the "
        "rank's compute excess (one layer's operators slowed together: another dtype or "
        "algorithm)"
    )
    return replace(best, summary=summary, evidence=(*best.evidence, *evidence))


def kernel_excess_ms(kern: Finding, window_steps: float = 1.0) -> float | None:
    """A kernel finding's excess per step, in ms (its ``kernel_time_ns`` evidence)."""
    times = [e for e in kern.evidence if e.metric == "kernel_time_ns" and e.reference is not None]
    if not times:
        return None
    return (times[0].value - (times[0].reference or 0.0)) / 1e6 / window_steps


def step_excess(compute: pd.DataFrame, kern: Finding) -> float | None:
    """What the steps show on a kernel finding's ranks from its onset on (ms per step, mean over
    its ranks of the median): their compute over the peers' median (a cross-rank finding) or over
    their own median before the onset (a regression); ``None`` when the steps cannot tell."""
    ranks = list(kern.ranks)
    if compute.empty or not ranks or not set(ranks) <= set(compute.columns):
        return None
    start = kern.onset_step if kern.onset_step is not None else int(compute.index.min())
    after = compute.index >= start
    if kern.id.endswith(REGRESSION):
        if after.all() or not after.any():
            return None
        excess = compute.loc[after, ranks].median() - compute.loc[~after, ranks].median()
    else:
        if compute.shape[1] < 2 or not after.any():
            return None
        excess = (compute[ranks] - peer_median(compute)[ranks]).loc[after].median()
    return float(excess.mean())


def absorb(kern: Finding, node: Finding) -> Finding:
    """The kernel finding as the diagnosis of ``node``'s slowdown (see the module docstring)."""
    level = max(kern.severity, node.severity, key=SEVERITIES.index)
    return replace(
        kern,
        severity=level,
        onset_step=node.onset_step if node.onset_step is not None else kern.onset_step,
        detected_step=kern.detected_step if kern.detected_step is not None else node.detected_step,
        slowdown=kern.slowdown if kern.slowdown is not None else node.slowdown,
        hosts=kern.hosts or node.hosts,
        confidence=max(kern.confidence, node.confidence),
        summary=f"{kern.summary}; it explains the compute excess the node detector saw ({node.id})",
        evidence=(*kern.evidence, *node.evidence),
    )


def unseen(kern: Finding, seen: float, expected: float) -> Finding:
    """The kernel finding as a sampling artefact: the profiled steps show it, the others not."""
    return replace(
        kern,
        severity="info",
        confidence=kern.confidence * min(1.0, max(0.0, seen / expected)),
        summary=(
            f"{kern.summary}; but the ranks' steps do not show it ({seen:.1f} ms/step of "
            f"compute excess against {expected:.1f} in the profiled windows): a few slow "
            "profiled steps, not a slow kernel"
        ),
        evidence=(
            *kern.evidence,
            Evidence(
                metric="step_compute_excess_ms",
                subject=", ".join(f"rank {r}" for r in kern.ranks),
                value=seen,
                reference=expected,
                unit="ms",
                note="median compute excess per step from the onset vs the kernel's excess",
            ),
        ),
    )


def _below(kern: Finding, node: Finding, why: str, item: Evidence) -> Finding:
    """The kernel finding demoted beside ``node``: ``info``, a confidence below the node's, and
    a share of the job lost no larger than the node's: a symptom or a part of a slow rank
    cannot cost more than the rank does (sized in its profiled windows alone, a SIGSTOP inside
    one operator had read 29 % against the stall's 5 %, and the symptom ranked above its
    cause)."""
    slowdown = kern.slowdown
    if slowdown is not None:
        slowdown = min(slowdown, node.slowdown or 0.0)
    return replace(
        kern,
        severity="info",
        confidence=min(kern.confidence, node.confidence * 0.9),
        slowdown=slowdown,
        summary=f"{kern.summary}; {why}",
        evidence=(*kern.evidence, item),
    )


def minor(kern: Finding, node: Finding, share: float) -> Finding:
    """The kernel finding as a minor part of a slow rank's excess: ``info``, below the node."""
    why = f"in the same windows it holds only {share:.0%} of what the rank lost: a part of "
    item = Evidence(
        metric="part_of", subject=node.id, value=share, reference=1.0, unit="fraction",
        note="its share of the rank's excess in its profiler windows",
    )  # fmt: skip
    return _below(kern, node, f"{why}{node.id}, not its cause", item)


def symptom(kern: Finding, node: Finding) -> Finding:
    """The kernel finding as one symptom of a slow rank: ``info``, below the node finding."""
    item = Evidence(
        metric="symptom_of", subject=node.id, value=1.0,
        note="the rank's compute is slower across kernels",
    )  # fmt: skip
    return _below(kern, node, f"every kernel on the rank is slower: a symptom of {node.id}", item)
