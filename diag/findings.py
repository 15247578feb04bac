"""Findings: what the detectors conclude, with evidence and a confidence. The ``diag triage``
contract (``{"run": {...}, "findings": [...]}``) is :meth:`Finding.to_json` of each, sorted by
confidence, highest first.

``slowdown`` is the fraction of the job's step time lost to this cause: 0.2 means the job's steps
would be 20% shorter without it. ``confidence`` is in [0, 1]: how sure the detector is that the
named culprit and cause are right (not how large the effect is). ``onset_step`` is the first step
of the anomaly (``None`` for a structural imbalance present from the start); ``detected_step`` the
step at which the detector could first say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SYMPTOMS = ("slowdown", "hang", "drift", "crash")
CAUSES = (
    "node",
    "link",
    "kernel",
    "data",
    "checkpoint",
    "structural",
    "program",
    "unknown",
)
SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """One fact behind a finding: ``metric`` on ``subject`` is ``value`` against ``reference``
    (the peers' median, the rank's own earlier median, a threshold...), in ``unit``."""

    metric: str
    subject: str
    value: float
    reference: float | None = None
    unit: str = ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "subject": self.subject,
            "value": _num(self.value),
            "reference": _num(self.reference),
            "unit": self.unit,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkRef:
    """The suspect link: the ranks and hosts it joins, the process group whose traffic is slow."""

    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    group: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "hosts": list(self.hosts), "group": self.group}


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One diagnosis: a symptom, its cause, the culprit (ranks, hosts, link or kernel), evidence."""

    id: str
    symptom: str
    cause: str
    severity: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    link: LinkRef | None = None
    kernel: str | None = None
    onset_step: int | None = None
    detected_step: int | None = None
    slowdown: float | None = None
    confidence: float
    summary: str
    evidence: tuple[Evidence, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.symptom not in SYMPTOMS:
            raise ValueError(f"unknown symptom {self.symptom!r}")
        if self.cause not in CAUSES:
            raise ValueError(f"unknown cause {self.cause!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence {self.confidence} is not in [0, 1]")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "symptom": self.symptom,
            "cause": self.cause,
            "severity": self.severity,
            "ranks": list(self.ranks),
            "hosts": list(self.hosts),
            "link": None if self.link is None else self.link.to_json(),
            "kernel": self.kernel,
            "onset_step": self.onset_step,
            "detected_step": self.detected_step,
            "slowdown": _num(self.slowdown),
            "confidence": round(self.confidence, 4),
            "summary": self.summary,
            "evidence": [e.to_json() for e in self.evidence],
        }


def ranked(findings: list[Finding]) -> list[Finding]:
    """Findings sorted as ``diag triage`` prints them: confidence, then slowdown, highest first."""
    return sorted(findings, key=lambda f: (-f.confidence, -(f.slowdown or 0.0), f.id))


def _num(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 6)
