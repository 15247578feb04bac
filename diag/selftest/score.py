"""Judge a triage result against the case that was injected, and sum a suite up.

The judged finding is the top-ranked one (``diag triage`` order). For a fault case:

- *exact culprit set* right (``culprit_ok``): node, data, structural and kernel — the finding's
  ranks are exactly the case's (and for kernel cases with a known kernel, the finding names it);
  checkpoint — the finding's ranks include the saving ranks (or name none); link — the finding
  names a link, joining exactly the case's hosts when the case knows them; a moving data imbalance
  (no culprit ranks) — the finding says ``data``;
- *top-1 culprit* right (``culprit_named``): the finding names culprits and no other rank (some
  of a culprit set; for a link or a checkpoint, as above; for a moving imbalance, its cause);
- *cause* right: the finding's cause is the injected one;
- *latency*: ``detected_step - onset_step`` of the top finding when it is right and both are known.

Each outcome carries its mechanism's split (:mod:`diag.selftest.mechanisms`: ``tune`` or
``heldout``), so a summary reports the held-out numbers apart.

Each fault outcome also carries what the fault cost the job (:mod:`diag.selftest.realized`, when
the caller read it back) and whether it *took*. A fault that did not take (a CPU hog the job's
idle cores absorbed, a lossy link whose messages fit its queue) has nothing for a fail-slow
detector to find: :meth:`Summary.taken` sums up the rest, and such a case is right when diag
stays quiet or names the injected fault anyway (a warning-or-above finding that names anything
else is wrong, as on a clean run).

A clean case is right when no finding has severity warning or above; its "predicted cause" in the
confusion matrix is the top warning-or-above finding's cause, else ``none``. A fault case with no
finding at all predicts ``none``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from diag.diagnose.coverage import FOREIGN_PROCESSES, HOST_PROCESS_CPU
from diag.findings import Finding
from diag.selftest import realized
from diag.selftest.cases import CLEAN, FAULT_CAUSES, Case
from diag.selftest.mechanisms import split_of

NONE = "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How one case fared."""

    case: Case
    predicted: str  # the top finding's cause (clean cases: of warning+ findings), or "none"
    culprit_ok: bool  # the exact culprit set (see the module docstring)
    cause_ok: bool
    split: str = "tune"  # the mechanism's split (diag.selftest.mechanisms): tune or heldout
    culprit_named: bool = False  # the top finding names a culprit (one of the ranks, the link)
    latency: int | None  # steps from onset to detection, when known
    warnings: int  # findings of severity warning or above
    top: str  # one line: the top finding, for the report
    cost: float | None = None  # what the fault cost the job's step (None: not read)
    took: bool = True  # the fault cost enough to be found (diag.selftest.realized.took)
    quiet_or_right: bool = True  # no warning-or-above finding other than a right one

    @property
    def ok(self) -> bool:
        return self.culprit_ok and self.cause_ok


def _culprit_named(case: Case, f: Finding) -> bool:
    """Top-1 culprit: the top finding names culprits and nobody else (some of a culprit set, the
    slow link; a moving imbalance has no culprit rank: its cause is the answer)."""
    if case.cause in ("link", "checkpoint"):
        return _culprit_ok(case, f)
    if not case.ranks:
        return f.cause == case.cause
    named = set(f.ranks)
    return bool(named) and named <= set(case.ranks)


def _culprit_ok(case: Case, f: Finding) -> bool:
    ranks = set(f.ranks)
    if case.cause == "checkpoint":
        return not ranks or set(case.ranks) <= ranks
    if case.cause == "data" and not case.ranks:  # an imbalance that moves: no fixed culprit
        return f.cause == "data"
    if case.cause == "link":
        return f.link is not None and (not case.hosts or set(f.link.hosts) == set(case.hosts))
    if ranks != set(case.ranks):
        return False
    return not (case.cause == "kernel" and case.kernel and f.kernel != case.kernel)


def _line(f: Finding | None) -> str:
    if f is None:
        return "no finding"
    return (
        f"{f.cause} {f.severity} ranks={list(f.ranks)} conf={f.confidence:.2f} "
        f"onset={f.onset_step} detected={f.detected_step}"
    )


#: Mechanisms whose fault is itself a process outside the job competing for a rank's CPU.
FOREIGN_MECHANISMS = frozenset({"node.cpu_hog", "node.rt_hog"})


def the_machines(case: Case, f: Finding) -> bool:
    """Whether ``f`` is contention naming a process outside the job (its host-process
    evidence) in a case that injects none: the machine's own load, a true finding that is not
    the injected fault (CI beside a busy loop: "ranks 0, 2 wait 37.9 ms/step for a CPU ...
    pid N (python3 -c while True: pass) uses 33% of a core" above a kernel fault). Such
    findings are left out of the judging, never counted right or wrong."""
    if case.mechanism in FOREIGN_MECHANISMS or not f.id.startswith("contention-"):
        return False
    # The detector lists the host's busy processes, diag's own among them; whether one is
    # outside the job and diag is its ``foreign_processes`` count (a held-out cgroup quota,
    # rightly found with "no process outside the job", was left out for diag's own process).
    foreign = [e.value for e in f.evidence if e.metric == FOREIGN_PROCESSES]
    if foreign:
        return foreign[0] > 0
    return any(e.metric == HOST_PROCESS_CPU for e in f.evidence)


def judge(case: Case, findings: Sequence[Finding], cost: float | None = None) -> Outcome:
    """Score ``findings`` (ranked, as ``diag triage`` lists them) against ``case``; findings
    about the machine's own load are left out (:func:`the_machines`). ``cost``: what the fault
    cost the job's step, read back from the run (:func:`diag.selftest.realized.achieved_cost`)."""
    findings = [f for f in findings if not the_machines(case, f)]
    loud = [f for f in findings if f.severity != "info"]
    if case.cause == CLEAN:
        top = loud[0] if loud else None
        return Outcome(
            case=case,
            predicted=top.cause if top else NONE,
            culprit_ok=not loud,
            culprit_named=not loud,
            cause_ok=not loud,
            latency=None,
            warnings=len(loud),
            top=_line(top),
        )
    split = split_of(case)
    top = findings[0] if findings else None
    taken = realized.took(cost, case.severity)
    if top is None:
        return Outcome(
            case=case, predicted=NONE, culprit_ok=False, cause_ok=False, latency=None,
            warnings=0, top=_line(None), split=split, cost=cost, took=taken,
        )  # fmt: skip
    culprit_ok = _culprit_ok(case, top)
    cause_ok = top.cause == case.cause
    latency = None
    if culprit_ok and cause_ok and case.onset_step is not None and top.detected_step is not None:
        latency = top.detected_step - case.onset_step
    return Outcome(
        case=case,
        predicted=top.cause,
        culprit_ok=culprit_ok,
        cause_ok=cause_ok,
        latency=latency,
        warnings=len(loud),
        top=_line(top),
        split=split,
        culprit_named=_culprit_named(case, top),
        cost=cost,
        took=taken,
        quiet_or_right=all(f.cause == case.cause and _culprit_ok(case, f) for f in loud),
    )


@dataclass(frozen=True, slots=True)
class Summary:
    """A suite's results: accuracies, the confusion matrix, latencies, clean-run findings."""

    outcomes: tuple[Outcome, ...]

    @property
    def faults(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.case.cause != CLEAN]

    @property
    def cleans(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.case.cause == CLEAN]

    def culprit_accuracy(self) -> float | None:
        """Top-1 culprit: the top finding names a culprit."""
        f = self.faults
        return sum(o.culprit_named for o in f) / len(f) if f else None

    def exact_set_accuracy(self) -> float | None:
        """The top finding names exactly the culprit set."""
        f = self.faults
        return sum(o.culprit_ok for o in f) / len(f) if f else None

    def taken(self) -> Summary:
        """The clean runs and the faults that took (each cost the job enough to be found)."""
        return Summary(tuple(o for o in self.outcomes if o.case.cause == CLEAN or o.took))

    def untaken(self) -> list[Outcome]:
        """The faults that did not take: each is right when ``quiet_or_right``."""
        return [o for o in self.faults if not o.took]

    @staticmethod
    def _untaken_json(o: Outcome) -> dict[str, Any]:
        return {"case": o.case.name, "cost": o.cost, "quiet_or_right": o.quiet_or_right,
                "top": o.top}  # fmt: skip

    def split(self, name: str) -> Summary:
        """The outcomes of one split (``tune`` or ``heldout``), clean runs included in ``tune``."""
        return Summary(tuple(o for o in self.outcomes if o.split == name))

    def cause_accuracy(self) -> float | None:
        f = self.faults
        return sum(o.cause_ok for o in f) / len(f) if f else None

    def confusion(self) -> dict[str, Counter[str]]:
        """expected cause (``clean`` for clean runs) -> Counter of predicted causes."""
        out: dict[str, Counter[str]] = {}
        for o in self.outcomes:
            out.setdefault(o.case.cause, Counter())[o.predicted] += 1
        return out

    def latencies(self, severity: float | None = None) -> list[int]:
        return [
            o.latency
            for o in self.faults
            if o.latency is not None and (severity is None or o.case.severity == severity)
        ]

    def clean_warnings(self) -> int:
        return sum(o.warnings for o in self.cleans)

    def to_json(self) -> dict[str, Any]:
        sev = sorted({o.case.severity for o in self.faults})
        lat: dict[str, Any] = {}
        for s in sev:
            values = self.latencies(s)
            lat[f"{round(s * 100)}%"] = {
                "n": len(values),
                "median": statistics.median(values) if values else None,
                "p95": _p95(values),
            }
        return {
            "cases": len(self.outcomes),
            "top1_culprit": self.culprit_accuracy(),
            "top1_cause": self.cause_accuracy(),
            "exact_culprit_set": self.exact_set_accuracy(),
            "by_split": {
                name: _acc([o for o in self.faults if o.split == name])
                for name in ("tune", "heldout")
                if any(o.split == name for o in self.faults)
            },
            "by_mechanism": {
                m: _acc([o for o in self.faults if (o.case.mechanism or o.case.cause) == m])
                for m in sorted({o.case.mechanism or o.case.cause for o in self.faults})
            },
            "by_cause": {
                c: _acc([o for o in self.faults if o.case.cause == c])
                for c in FAULT_CAUSES
                if any(o.case.cause == c for o in self.faults)
            },
            "by_severity": {
                f"{round(s * 100)}%": _acc([o for o in self.faults if o.case.severity == s])
                for s in sev
            },
            "latency_steps": lat,
            "clean_runs": len(self.cleans),
            "clean_runs_with_warnings": sum(1 for o in self.cleans if o.warnings),
            "confusion": {k: dict(v) for k, v in self.confusion().items()},
            "failures": [{"case": o.case.name, "top": o.top} for o in self.outcomes if not o.ok],
            "taken": {
                name: _acc([o for o in self.faults if o.split == name and o.took])
                for name in ("tune", "heldout")
                if any(o.split == name and o.took for o in self.faults)
            },
            "untaken": [self._untaken_json(o) for o in self.untaken()],
        }


def _acc(outcomes: list[Outcome]) -> dict[str, float | int]:
    n = len(outcomes)
    return {
        "n": n,
        "culprit": sum(o.culprit_named for o in outcomes) / n if n else 0.0,
        "exact_set": sum(o.culprit_ok for o in outcomes) / n if n else 0.0,
        "cause": sum(o.cause_ok for o in outcomes) / n if n else 0.0,
    }


def _p95(values: list[int]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))])
