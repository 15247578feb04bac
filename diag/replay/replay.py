"""``diag replay``: run a finding's probes on its suspect and on a healthy peer, and judge.

- The finding comes from ``RUN_DIR/findings.jsonl`` (written by ``diag triage``), triaged afresh
  when absent; ``finding_id`` picks one, default the top (highest confidence).
- Suspect: the finding's first rank; peer: the lowest rank of the run not named by the finding.
- Each probe of :func:`~diag.replay.plan.plan_for` runs once per target through a ``runner``. The
  CLI's default runner runs them in this process on this node's device, so on a CPU-only machine
  suspect and peer are both this CPU: the outcome then says so and tests the device, not the
  suspect rank's own. ``--via-analyzer`` uses :func:`diag.replay.remote.daemon_runner` instead:
  each target's own node daemon runs the probe on that rank's device.
- Outcome: ``confirmed`` when any metric of the suspect is worse than the peer's by more than
  ``tolerance`` (10%; for ``numerics`` when the digests differ); ``refuted`` when every compared
  metric is within it; ``inconclusive`` when nothing could be compared (all ``unsupported``)
  or when suspect and peer ran on the same device (a gap is then that device's noise: once,
  24.8 against 34.0 GFLOP/s on one CPU came out ``confirmed``);
  ``no probe`` when no probe applies to the cause. Each comparison becomes an
  :class:`~diag.findings.Evidence` (``value`` the suspect's, ``reference`` the peer's)
  appended to the finding in ``RUN_DIR/replay.json``:
  ``{"finding": {...}, "outcome", "note", "suspect", "peer", "results": [...]}``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diag.errors import InputError
from diag.findings import Evidence, Finding
from diag.fsutil import atomic_write
from diag.replay.plan import ProbePlan, plan_for
from diag.store.run_store import RunStore
from probes.base import ProbeResult

REPLAY_FILE = "replay.json"
TOLERANCE = 0.10


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Where a probe runs: ``role`` (suspect or peer) and the run's rank and host."""

    role: str
    rank: int
    host: str = ""


Runner = Callable[[ProbePlan, Target], list[ProbeResult]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    """The replayed finding (its evidence extended by the probes' comparisons), the outcome,
    the targets and every probe result with the target it ran for."""

    finding: Finding
    outcome: str
    note: str
    suspect: Target
    peer: Target | None
    results: tuple[tuple[str, ProbeResult], ...]

    def to_json(self) -> dict[str, Any]:
        def target(t: Target | None) -> dict[str, Any] | None:
            return None if t is None else {"rank": t.rank, "host": t.host}

        return {
            "finding": self.finding.to_json(),
            "outcome": self.outcome,
            "note": self.note,
            "suspect": target(self.suspect),
            "peer": target(self.peer),
            "results": [r.to_json() | {"target": role} for role, r in self.results],
        }


def load_findings(run_dir: Path) -> tuple[Finding, ...]:
    """The run's findings: ``RUN_DIR/findings.jsonl``, or a fresh triage when it is absent."""
    from diag.diagnose.triage import read_findings, triage_run_dir

    stored = read_findings(run_dir)
    return stored if stored is not None else triage_run_dir(run_dir)[0].findings


def pick(findings: Sequence[Finding], finding_id: str | None) -> Finding:
    if not findings:
        raise InputError("the run has no findings to replay")
    if finding_id is None:
        return findings[0]
    for f in findings:
        if f.id == finding_id:
            return f
    known = ", ".join(f.id for f in findings)
    raise InputError(f"no finding {finding_id!r} (the run's findings: {known})")


def _frame(store: RunStore, kind: str) -> Any:
    import pandas as pd

    return store.frame(kind) if kind in store.kinds() else pd.DataFrame()


def _targets(finding: Finding, steps: Any) -> tuple[Target, Target | None]:
    named = list(finding.ranks or (finding.link.ranks if finding.link is not None else ()))
    hosts: dict[int, str] = {}
    if not steps.empty:
        hosts = {int(r): str(h) for r, h in zip(steps["rank"], steps["host"], strict=True)}
    suspect_rank = named[0] if named else -1
    suspect = Target(role="suspect", rank=suspect_rank, host=hosts.get(suspect_rank, ""))
    healthy = sorted(r for r in hosts if r not in named)
    peer = Target(role="peer", rank=healthy[0], host=hosts[healthy[0]]) if healthy else None
    return suspect, peer


def _compare(s: ProbeResult, p: ProbeResult, tol: float) -> Evidence | None:
    if s.status != "ok" or p.status != "ok" or s.value is None or p.value is None:
        return None
    if s.probe == "numerics":
        worse = s.detail != p.detail
    elif s.lower_is_better:
        worse = s.value > p.value * (1 + tol)
    else:
        worse = s.value < p.value * (1 - tol)
    return Evidence(
        metric=f"replay {s.probe} {s.metric}",
        subject=s.device,
        value=s.value,
        reference=p.value,
        unit=s.unit,
        note="worse than the peer" if worse else "as good as the peer",
    )


def replay(
    run_dir: Path, finding_id: str | None, runner: Runner, tolerance: float = TOLERANCE
) -> ReplayResult:
    """Replay one finding of ``run_dir`` through ``runner``; writes ``RUN_DIR/replay.json``."""
    finding = pick(load_findings(run_dir), finding_id)
    store = RunStore(run_dir)
    plans = plan_for(finding.cause, _frame(store, "kernel"), _frame(store, "collective"))
    suspect, peer = _targets(finding, _frame(store, "step"))
    results: list[tuple[str, ProbeResult]] = []
    evidence: list[Evidence] = []
    if not plans:
        outcome, note = "no probe", f"no probe tests a {finding.cause} cause"
    elif peer is None:
        outcome, note = "inconclusive", "no healthy peer rank in the run"
    else:
        for plan in plans:
            mine, theirs = runner(plan, suspect), runner(plan, peer)
            results += [("suspect", r) for r in mine] + [("peer", r) for r in theirs]
            for s, p in zip(mine, theirs, strict=False):
                if (ev := _compare(s, p, tolerance)) is not None:
                    evidence.append(ev)
        devices = {r.device for _, r in results if r.status == "ok"}
        same = len(devices) <= 1 and bool(results)
        if not evidence or same:
            # one device measured twice: any gap between the two is that device's noise
            outcome = "inconclusive"
        elif any(e.note.startswith("worse") for e in evidence):
            outcome = "confirmed"
        else:
            outcome = "refuted"
        note = (
            "suspect and peer ran on the same device here (this node's): a gap between two runs "
            "on one device is its noise, not the suspect rank's; replay with --via-analyzer on "
            "the ranks' own nodes"
            if same
            else ""
        )
    out = ReplayResult(
        finding=dataclasses.replace(finding, evidence=(*finding.evidence, *evidence)),
        outcome=outcome,
        note=note,
        suspect=suspect,
        peer=peer,
        results=tuple(results),
    )
    path = run_dir / REPLAY_FILE
    atomic_write(path, json.dumps(out.to_json(), indent=1))
    return out
