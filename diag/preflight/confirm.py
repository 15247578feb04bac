"""Confirmation: a device flagged below its baseline is measured once more before it fails.

A slow-down that lasts (a throttled GPU, a CPU quota, a degraded link) is slow again; a burst of
someone else's load on a shared machine usually is not. :func:`slow_probes` names the probes with a
result failing the baseline rule; after re-running them (:data:`PAUSE_S` later), :func:`merge_best`
keeps, per (host, device, probe, metric), the better of the two measurements, which is then judged.
Only single-process preflight confirms: under torchrun every rank would have to agree to re-run.
"""

from __future__ import annotations

from collections.abc import Sequence

from diag.preflight.rules import Judged
from probes.base import ProbeResult

PAUSE_S = 2.0
Row = tuple[str, ProbeResult]


def slow_probes(judged: Sequence[Judged]) -> list[str]:
    """Probe names (in order, once each) with an ok result failing only by its baseline."""
    names: list[str] = []
    for j in judged:
        baseline_only = j.reasons and all("vs baseline" in r for r in j.reasons)
        if j.verdict == "fail" and baseline_only and j.result.probe not in names:
            names.append(j.result.probe)
    return names


def _key(row: Row) -> tuple[str, str, str, str]:
    host, r = row
    return (host, r.device, r.probe, r.metric)


def _better(a: ProbeResult, b: ProbeResult) -> ProbeResult:
    if a.status != "ok" or a.value is None:
        return b
    if b.status != "ok" or b.value is None:
        return a
    if a.lower_is_better:
        return a if a.value <= b.value else b
    return a if a.value >= b.value else b


def merge_best(first: Sequence[Row], again: Sequence[Row]) -> list[Row]:
    """``first`` with each result also in ``again`` replaced by the better of the two."""
    second = {_key(row): row[1] for row in again}
    return [(h, _better(r, second.get(_key((h, r)), r))) for h, r in first]
