"""Typed rules that turn probe results into verdicts: ``pass``, ``fail`` or ``skip``.

- :class:`BaselineRule`: for ``numerics`` the digest must equal the baseline's; otherwise a rate
  more than ``tolerance`` below the device's baseline (a latency more than ``tolerance`` above
  it) fails. Probes report the best of several timed runs (see :mod:`probes.base`), so the
  tolerance only has to cover the run-to-run spread of that best, measured by
  ``bench/probe_stability.py`` (README: "Pre-flight probes and replay").
- :class:`Threshold`: ``value OP limit`` must hold for every result of ``probe`` (any metric when
  ``metric`` is empty), e.g. NVML problems ``<= 0``.
- :class:`ConsistencyRule`: among results with the same probe and metric from different devices
  (the GPUs of a node, the ranks of a job), one worse than the median of the others by more than
  ``tolerance`` fails; for ``numerics`` the digest (``detail``) must equal the majority's among
  devices of the same type (silent data corruption); for ``p2p`` a pair below ``p2p_fraction``
  (0.2) of the fastest pair fails (a slow link: the fastest pair is usually inside a host,
  loopback or NVLink, whose own run-to-run spread under load reached 2x on the test machine,
  hence 0.2; a link degraded by less is caught by the baseline rule on its pair).
- A ``timeout`` or ``failed`` status fails; ``unsupported`` is ``skip``; an ``ok`` result no rule
  judged passes.
"""

from __future__ import annotations

import operator
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from diag.preflight import baseline as bl
from probes.base import ProbeResult

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}


@dataclass(frozen=True, slots=True)
class Threshold:
    probe: str
    op: str
    limit: float
    metric: str = ""

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"threshold op {self.op!r} is not one of {sorted(_OPS)}")

    def holds(self, value: float) -> bool:
        return _OPS[self.op](value, self.limit)


@dataclass(frozen=True, slots=True)
class BaselineRule:
    tolerance: float = 0.08


@dataclass(frozen=True, slots=True)
class ConsistencyRule:
    tolerance: float = 0.25
    p2p_fraction: float = 0.2


@dataclass(frozen=True, slots=True)
class Rules:
    baseline: BaselineRule = BaselineRule()
    consistency: ConsistencyRule = ConsistencyRule()
    thresholds: tuple[Threshold, ...] = (Threshold("nvml", "<=", 0.0),)


@dataclass(frozen=True, slots=True, kw_only=True)
class Judged:
    """A result from ``host`` with its baseline value (``None``: none saved) and verdict."""

    host: str
    result: ProbeResult
    baseline: float | None
    verdict: str
    reasons: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        r = self.result
        detail = "; ".join(filter(None, (r.detail, *self.reasons)))
        return {
            "probe": r.probe,
            "device": r.device,
            "metric": r.metric,
            "status": r.status,
            "value": None if r.value is None else round(r.value, 6),
            "unit": r.unit,
            "baseline": None if self.baseline is None else round(self.baseline, 6),
            "verdict": self.verdict,
            "detail": detail,
        }


def _worse(value: float, ref: float, tol: float, lower_is_better: bool) -> bool:
    if lower_is_better:
        return value > ref * (1.0 + tol)
    return value < ref * (1.0 - tol)


def _device_type(device: str) -> str:
    return device if device.startswith("cpu") else "gpu"


def _consistency(rows: Sequence[tuple[str, ProbeResult]], rule: ConsistencyRule) -> dict[int, str]:
    """Reasons by row index for the rows the consistency rule fails."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (_, r) in enumerate(rows):
        if r.status == "ok" and r.value is not None:
            groups.setdefault((r.probe, r.metric), []).append(i)
    out: dict[int, str] = {}
    for (probe, _), idx in groups.items():
        results = [rows[i][1] for i in idx]
        if probe == "numerics":
            for dtype in {_device_type(r.device) for r in results}:
                same = [i for i in idx if _device_type(rows[i][1].device) == dtype]
                votes = Counter((rows[i][0], rows[i][1].device, rows[i][1].detail) for i in same)
                digests = Counter(d for (_, _, d) in votes)
                if len(digests) > 1:
                    major = digests.most_common(1)[0][0]
                    for i in same:
                        if rows[i][1].detail != major:
                            out[i] = f"checksum differs from the majority's {major}"
        elif probe == "p2p":
            best = max(r.value or 0.0 for r in results)
            for i in idx:
                if (rows[i][1].value or 0.0) < rule.p2p_fraction * best:
                    out[i] = f"slow link: < {rule.p2p_fraction:g} x the fastest pair ({best:.3g})"
        elif len({(rows[i][0], rows[i][1].device) for i in idx}) > 2:
            for i in idx:
                r = rows[i][1]
                peers = [rows[k][1].value or 0.0 for k in idx if k != i]
                med = statistics.median(peers)
                if r.value is not None and _worse(r.value, med, rule.tolerance, r.lower_is_better):
                    out[i] = f"{r.value:.3g} vs peers' median {med:.3g} {r.unit}"
    return out


def judge(
    rows: Sequence[tuple[str, ProbeResult]], base: bl.Baseline, rules: Rules = Rules()
) -> list[Judged]:
    """Verdicts for ``rows`` (``(host, result)``, every rank's) against ``base``."""
    inconsistent = _consistency(rows, rules.consistency)
    out = []
    for i, (host, r) in enumerate(rows):
        entry = bl.lookup(base, host, r)
        ref = None if entry is None else float(entry["value"])
        reasons: list[str] = []
        if r.status in ("timeout", "failed"):
            reasons.append(f"probe {r.status}")
        elif r.status == "ok" and r.value is not None:
            tol = rules.baseline.tolerance
            if r.probe == "numerics":
                if entry is not None and entry.get("detail") != r.detail:
                    reasons.append(f"checksum {r.detail} != baseline's {entry.get('detail')}")
            elif ref is not None and _worse(r.value, ref, tol, r.lower_is_better):
                change = r.value / ref - 1.0
                reasons.append(f"{change:+.1%} vs baseline (tolerance {tol:.0%})")
            for t in rules.thresholds:
                if t.probe == r.probe and t.metric in ("", r.metric) and not t.holds(r.value):
                    reasons.append(f"threshold: {r.value:g} {t.op} {t.limit:g} fails")
            if i in inconsistent:
                reasons.append(inconsistent[i])
        verdict = "skip" if r.status == "unsupported" else ("fail" if reasons else "pass")
        out.append(
            Judged(host=host, result=r, baseline=ref, verdict=verdict, reasons=tuple(reasons))
        )
    return out
