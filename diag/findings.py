"""Findings: what the detectors conclude, with evidence and a confidence. The ``diag triage``
contract (``{"run": {...}, "findings": [...]}``) is :meth:`Finding.to_json` of each, in
:func:`ranked` order: by severity (critical first), then by :func:`impact` (the share of the job
lost x confidence), then confidence.

``slowdown`` is the fraction of the job's step time lost to this cause: 0.2 means the job's steps
would be 20% shorter without it. It is one of the three figures diag says a slowdown with, each
always written the same way (:func:`factor_text`, :func:`job_cost_text`): the culprit's
**factor against its peers** ("rank 2 computes 3.10x as long as its 3 peers": its time over the
median of the ranks doing the same work, itself left out), the **job's step factor** ("job steps
1.85x as long": after over before) and the **share of each step lost** ("46% of each step
lost": this ``slowdown``, (after - before) / after).

``confidence`` is in [0, 1]: how sure the detector is that the named culprit and cause are right
(not how large the effect is). ``onset_step`` is the first step
of the anomaly (``None`` for a structural imbalance present from the start); ``detected_step`` the
step at which the detector could first say so.

``Finding.from_json`` reads back what ``to_json`` wrote (``findings.jsonl``, ``diag triage
--json``, the live summary), so everything downstream of the detectors (the CLI's tables, replay,
the fault suite's scoring) works on typed findings, not dicts. Keys it does not know are ignored
(a newer diag may add some); a missing required key or a value of the wrong type is a one-line
:class:`~diag.errors.SchemaError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from diag.errors import SchemaError

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

    @classmethod
    def from_json(cls, data: Any) -> Evidence:
        d = _mapping(data, "evidence")
        value = _number(d, "value", "evidence", required=False)
        return cls(
            metric=_text(d, "metric", "evidence"),
            subject=_text(d, "subject", "evidence"),
            value=math.nan if value is None else value,
            reference=_number(d, "reference", "evidence", required=False),
            unit=_text(d, "unit", "evidence", default=""),
            note=_text(d, "note", "evidence", default=""),
        )

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

    @classmethod
    def from_json(cls, data: Any) -> LinkRef:
        d = _mapping(data, "link")
        return cls(
            ranks=_ints(d, "ranks", "link"),
            hosts=_texts(d, "hosts", "link"),
            group=_text(d, "group", "link", default=""),
        )

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

    @classmethod
    def from_json(cls, data: Any) -> Finding:
        """The finding :meth:`to_json` wrote; :class:`SchemaError` if ``data`` is not one."""
        d = _mapping(data, "finding")
        what = f"finding {d.get('id')!r}" if isinstance(d.get("id"), str) else "finding"
        link = d.get("link")
        evidence = d.get("evidence")
        evidence = [] if evidence is None else evidence
        if not isinstance(evidence, list):
            raise SchemaError(f"{what}: evidence is not a list")
        try:
            return cls(
                id=_text(d, "id", what),
                symptom=_text(d, "symptom", what),
                cause=_text(d, "cause", what),
                severity=_text(d, "severity", what),
                ranks=_ints(d, "ranks", what),
                hosts=_texts(d, "hosts", what),
                link=None if link is None else LinkRef.from_json(link),
                kernel=_text(d, "kernel", what, default=None),
                onset_step=_int(d, "onset_step", what),
                detected_step=_int(d, "detected_step", what),
                slowdown=_number(d, "slowdown", what, required=False),
                confidence=_number(d, "confidence", what, required=True) or 0.0,
                summary=_text(d, "summary", what),
                evidence=tuple(Evidence.from_json(e) for e in evidence),
            )
        except ValueError as exc:  # an unknown symptom, cause or severity; a confidence > 1
            if isinstance(exc, SchemaError):
                raise
            raise SchemaError(f"{what}: {exc}") from None

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


def findings_from_json(items: Sequence[Any]) -> tuple[Finding, ...]:
    """:meth:`Finding.from_json` of each item (a ``findings`` list of ``diag triage --json``)."""
    return tuple(Finding.from_json(item) for item in items)


#: Symptoms that stop the job: the share of it they lose is all of it.
_STOPS_THE_JOB = ("hang", "crash")


def factor_text(factor: float) -> str:
    """A ratio as diag writes it: ``1.46x``, ``12.3x``, ``150x``."""
    if not math.isfinite(factor):
        return "inf x"
    if factor >= 100:
        return f"{factor:.0f}x"
    return f"{factor:.1f}x" if factor >= 10 else f"{factor:.2f}x"


def job_cost_text(share: float) -> str:
    """What a finding costs the job, from its ``slowdown`` (the share of each step lost):
    ``job steps 1.85x as long (46% of each step lost)``."""
    share = min(max(share, 0.0), 1.0)
    factor = 1.0 / (1.0 - share) if share < 1.0 else math.inf
    return f"job steps {factor_text(factor)} as long ({share:.0%} of each step lost)"


def lost(f: Finding) -> float:
    """The share of the job a finding loses: its ``slowdown``; all of it (1) for a hang or a
    crash; 0 when it says none (a drift finding, a slowdown it could not size)."""
    if f.slowdown is not None and math.isfinite(f.slowdown):
        return min(1.0, max(0.0, f.slowdown))
    return 1.0 if f.symptom in _STOPS_THE_JOB else 0.0


def impact(f: Finding) -> float:
    """What a finding is worth acting on: the share of the job it loses x how sure it is
    (:func:`lost` x ``confidence``): a sure 5% loses less than a likely 40%."""
    return lost(f) * f.confidence


def ranked(findings: Sequence[Finding]) -> list[Finding]:
    """Findings in the order ``diag triage`` prints them: by severity (critical, warning, info),
    then by :func:`impact` (share of the job lost x confidence), then confidence, highest first
    (then id, so the order is stable). Confidence alone would put a sure, small symptom above
    the likely cause of most of the loss."""
    return sorted(
        findings,
        key=lambda f: (-SEVERITIES.index(f.severity), -impact(f), -f.confidence, f.id),
    )


def _num(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 6)


_MISSING = object()


def _mapping(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise SchemaError(f"{what} is not a JSON object: {type(data).__name__}")
    return data


def _get(d: Mapping[str, Any], key: str, what: str, default: Any) -> Any:
    value = d.get(key, default)
    if value is _MISSING:
        raise SchemaError(f"{what}: missing {key!r}")
    return value


def _text(d: Mapping[str, Any], key: str, what: str, default: Any = _MISSING) -> Any:
    value = _get(d, key, what, default)
    if value is not default and not isinstance(value, str):
        raise SchemaError(f"{what}: {key} is not a string: {value!r}"[:300])
    return value


def _int(d: Mapping[str, Any], key: str, what: str) -> int | None:
    value = d.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise SchemaError(f"{what}: {key} is not an integer: {value!r}"[:300])
    return value


def _number(d: Mapping[str, Any], key: str, what: str, *, required: bool) -> float | None:
    value = _get(d, key, what, _MISSING if required else None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"{what}: {key} is not a number: {value!r}"[:300])
    return float(value)


def _ints(d: Mapping[str, Any], key: str, what: str) -> tuple[int, ...]:
    value = d.get(key)
    value = [] if value is None else value
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) for v in value
    ):
        raise SchemaError(f"{what}: {key} is not a list of integers: {value!r}"[:300])
    return tuple(value)


def _texts(d: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    value = d.get(key)
    value = [] if value is None else value
    if not isinstance(value, list) or any(not isinstance(v, str) for v in value):
        raise SchemaError(f"{what}: {key} is not a list of strings: {value!r}"[:300])
    return tuple(value)
