"""One fault, one finding: a finding that another one explains is folded into it as evidence.

A slow link makes the ranks at its ends wait in the collectives; on a busy host part of that wait
reads as "computes longer", and the node detector flags those ranks with about the link's onset.
Listed beside the link finding, such echoes bury it. Finding ``A`` *explains* finding ``B`` when
all of these hold:

1. **a cause that can echo**: ``B``'s cause is one ``A``'s cause produces on its own culprits
   (:data:`ECHOES`: a link makes its ranks look slow (``node``); a node cause seen twice, by two
   detectors, is one node; a data loader that computes on its rank's CPU makes that rank wait
   for a CPU on a busy host, which reads as contention (``node``)), both are slowdowns, and
   ``A`` is at least as severe as ``B``; and a competitor for a rank's CPU (``node``
   contention naming processes outside the job: evidence ``foreign_processes`` > 0) starves a
   loader that computes on that CPU, so its rank waits longer for data (``data``; accounted in
   time, below, at any severity);
2. **the same culprits**: ``B``'s ranks are among ``A``'s, or ``B``'s hosts among ``A``'s;
3. **the same time**: both have an onset and they are at most ``onset_steps`` (10) steps apart
   (a node detector window: an echo starts with its cause, within the steps it takes to see it);
   for a data loader and contention with no competitor outside the job (evidence
   ``foreign_processes`` 0: the job's own load), any time from ``own_load_before`` (20) steps
   before the loader's onset on: the loader's own CPU demand builds up, and contention is dated
   on bursty run-queue delay in 10-step blocks, often well after (CI: a CPU-bound loader from
   step 30, its rank's contention dated 45) and sometimes a block or two before (CI: dated 19);
   a loader never explains contention by a competitor that *arrived* with it (a process outside
   the job whose CPU share over the anomaly is at least twice its share before the onset: a
   new competitor is a cause the loader cannot have made, since the daemon counts the ranks'
   descendants as the job's; a CPU-bound neighbour there all along is named too, and there the
   loader's own demand is what changed). The competitor starves the loader instead (below): a
   real-time hog on rank 2's core made its data wait 20 ms/step longer beside 29 ms/step of
   run-queue delay, and the larger "data" finding had taken the contention in;
   and a node finding on contended ranks (contention by a process outside the job explaining
   a ``node`` finding) may start any step from ``onset_steps`` before the contention's onset to
   its last contended step on each of ``B``'s ranks (evidence ``contended_until_step``): a
   competitor delays every thread of the rank, not only the training thread whose run-queue
   delay is taken out of its compute. The training thread, blocked on a thread that waits for
   the CPU (gloo's loops running the allreduce that DDP waits for in backward), is neither
   running nor queued, and that time reads as compute. Measured beside a real-time hog on rank
   2's core (per-thread schedstat every 2 ms): over steps 101-104 the training thread was
   blocked 10-24 ms/step more while gloo's threads waited 37-74 ms/step in the run queue, and a
   "computes 5.31x as long from step 101" warning stood beside the contention from step 44;
4. **its loss accounted for**: ``B``'s slowdown is at most ``A``'s x ``(1 + slack)`` (0.25):
   what ``B`` says the job loses is what ``A`` already says it loses, up to measurement error
   (an echo cannot lose more than its cause; a second fault on the same ranks can).

A loader starved by a competitor is accounted in time, not in slowdowns or severities (the two
findings measure them over different windows; CI beside a busy loop: contention from step 43 at
1.82x, the starved loader's wait from step 70 at 5.55x; beside a real-time hog, contention a
warning at 27% of each step, the loader's wait from 24 steps later "critical" at 3.64x): ``B``'s
onset is no earlier than ``onset_steps`` before ``A``'s (the competitor comes first), and every
rank's extra data wait per step (evidence ``data_ms`` over its reference) is at most its extra
run-queue delay per step (evidence ``cpu_wait_ms`` over its peers') x ``(1 + slack)``: a loader
that waits no longer than its CPU was taken from it. ``A`` then takes ``B``'s severity when it
is the higher. A sleeping loader beside a hog waits longer than that and stays a finding of its
own.

``A`` keeps its culprit, cause, onset, slowdown and confidence, takes the more severe severity,
and gains one evidence item per folded finding (metric ``explains``: subject the folded id,
value its slowdown, reference ``A``'s, note its cause, severity and summary); ``B`` is dropped.
Among several candidate explainers the one ranked first (:func:`~diag.findings.ranked`) takes it.
Each finding folds at most once, a folded finding explains nothing further, and one that
absorbed others is not folded itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from diag.diagnose.coverage import (
    CONTENDED_UNTIL,
    FOREIGN_PROCESSES,
    HOST_PROCESS_CPU,
    names_competitor,
)
from diag.findings import SEVERITIES, Evidence, Finding, ranked

#: explainer cause -> the causes of the findings it can explain on its own culprits.
ECHOES: dict[str, tuple[str, ...]] = {
    "link": ("node",),
    "node": ("node", "data"),
    "data": ("node",),
}
EXPLAINS = "explains"


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainConfig:
    """The "explains" rule's tolerances (see the module docstring)."""

    onset_steps: int = 10  # onsets at most this far apart
    own_load_before: int = 20  # a loader's own-load contention may be dated this far before it
    slack: float = 0.25  # B's slowdown <= A's x (1 + slack)


def explains(a: Finding, b: Finding, cfg: ExplainConfig | None = None) -> bool:
    """Whether finding ``a`` explains finding ``b`` (rules 1-4 of the module docstring)."""
    cfg = cfg or ExplainConfig()
    if a.id == b.id or a.symptom != "slowdown" or b.symptom != "slowdown":
        return False
    if b.cause not in ECHOES.get(a.cause, ()):
        return False
    same_ranks = bool(b.ranks) and set(b.ranks) <= set(a.ranks)
    same_hosts = bool(b.hosts) and set(b.hosts) <= set(a.hosts)
    if not (same_ranks or same_hosts):
        return False
    if a.onset_step is None or b.onset_step is None:
        return False
    if (a.cause, b.cause) == ("node", "data"):  # accounted in time, whatever the severities
        return _starved_loader(a, b, cfg)
    if SEVERITIES.index(a.severity) < SEVERITIES.index(b.severity):
        return False
    if a.cause == "data" and arrived_competitor(b):
        return False
    own_load = a.cause == "data" and any(
        e.metric == FOREIGN_PROCESSES and e.value == 0 for e in b.evidence
    )
    if own_load and b.onset_step < a.onset_step - cfg.own_load_before:
        return False
    near = abs(a.onset_step - b.onset_step) <= cfg.onset_steps
    if not own_load and not near and not _while_contended(a, b, cfg):
        return False
    if a.slowdown is None or b.slowdown is None:
        return False
    if not (math.isfinite(a.slowdown) and math.isfinite(b.slowdown)):
        return False
    return b.slowdown <= a.slowdown * (1.0 + cfg.slack)


def arrived_competitor(f: Finding) -> bool:
    """Whether contention finding ``f`` names a process outside the job that arrived with it:
    its CPU share over the anomaly at least twice its share before the onset. The contention
    detector lists the processes it names (``host_process_cpu_pct``) outside the job first, as
    many as its ``foreign_processes`` count; a finding with no onset has no share before."""
    count = next((int(e.value) for e in f.evidence if e.metric == FOREIGN_PROCESSES), 0)
    named = [e for e in f.evidence if e.metric == HOST_PROCESS_CPU][:count]
    return any(
        e.reference is not None
        and math.isfinite(e.value)
        and math.isfinite(e.reference)
        and e.value > 0
        and 2.0 * e.reference <= e.value
        for e in named
    )


def _while_contended(a: Finding, b: Finding, cfg: ExplainConfig) -> bool:
    """Whether node finding ``b`` starts while contention ``a`` by processes outside the job
    holds each of ``b``'s ranks: from ``onset_steps`` before its onset to its last contended
    step on that rank (rule 3 of the module docstring)."""
    assert a.onset_step is not None and b.onset_step is not None
    if (a.cause, b.cause) != ("node", "node") or not b.ranks:
        return False
    if not names_competitor(a):
        return False
    if b.onset_step < a.onset_step - cfg.onset_steps:
        return False
    until = {e.subject: e.value for e in a.evidence if e.metric == CONTENDED_UNTIL}
    return all(b.onset_step <= until.get(f"rank {r}", -math.inf) for r in b.ranks)


def _starved_loader(a: Finding, b: Finding, cfg: ExplainConfig) -> bool:
    """Whether contention ``a`` by processes outside the job accounts for data wait ``b`` (the
    time rule of the module docstring)."""
    assert a.onset_step is not None and b.onset_step is not None
    if not names_competitor(a):
        return False
    if b.onset_step < a.onset_step - cfg.onset_steps:
        return False
    for rank in b.ranks:
        waited = _excess(b, "data_ms", rank)
        starved = _excess(a, "cpu_wait_ms", rank)
        if waited is None or starved is None or waited > starved * (1.0 + cfg.slack):
            return False
    return bool(b.ranks)


def _excess(f: Finding, metric: str, rank: int) -> float | None:
    """``f``'s evidence ``metric`` on ``rank``: value over reference, None when it has none."""
    for e in f.evidence:
        ref = e.reference
        mine = e.metric == metric and e.subject == f"rank {rank}"
        if mine and ref is not None and math.isfinite(e.value) and math.isfinite(ref):
            return e.value - ref
    return None


def fold(findings: list[Finding], cfg: ExplainConfig | None = None) -> list[Finding]:
    """``findings`` with every finding another explains folded into it (module docstring);
    the others keep their order."""
    cfg = cfg or ExplainConfig()
    order = ranked(findings)
    into: dict[str, list[Finding]] = {}
    folded: set[str] = set()
    for b in reversed(order):  # the least important first: it is the likeliest echo
        if b.id in into:
            continue
        a = next(
            (a for a in order if a.id not in folded and a.id != b.id and explains(a, b, cfg)),
            None,
        )
        if a is not None:
            into.setdefault(a.id, []).append(b)
            folded.add(b.id)
    return [absorb(f, into[f.id]) if f.id in into else f for f in findings if f.id not in folded]


def absorb(a: Finding, echoes: list[Finding], *, keep_severity: bool = False) -> Finding:
    """``a`` with ``echoes`` as evidence, at the most severe of their severities (at its own
    with ``keep_severity``)."""
    level = max((a, *echoes), key=lambda f: SEVERITIES.index(f.severity)).severity
    if keep_severity:
        level = a.severity
    return replace(
        a,
        severity=level,
        evidence=(
            *a.evidence,
            *(
                Evidence(
                    metric=EXPLAINS,
                    subject=b.id,
                    value=math.nan if b.slowdown is None else b.slowdown,
                    reference=a.slowdown,
                    unit="fraction",
                    note=f"{b.cause} {b.severity}, folded in: {b.summary}",
                )
                for b in sorted(echoes, key=lambda f: f.id)
            ),
        ),
    )
