"""What the closed loop fetched for a finding, as one evidence item (``auto_capture``).

:mod:`diag.analyzer.autocapture` records each automatic request and its outcome
(:mod:`diag.store.captures`); triage shows the latest of them on the finding it was for: the
finding with that id, or a finding on the same ranks that took it in (a node slowdown that the
window showed to be one kernel comes back as the kernel finding). ``value`` is the step the
window was asked for, ``note`` says why it was asked, and whether it decided the cause (and
which), is still on its way, was only logged (``observe``) or held back by the budget. A link
probe round (kind ``probe``) reads the same way, naming what the probes decided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from diag.findings import Evidence, Finding
from diag.store.captures import Capture

#: Evidence metric of what the closed loop fetched for a finding.
AUTO_CAPTURE = "auto_capture"


def annotate(findings: Sequence[Finding], captures: Sequence[Capture]) -> list[Finding]:
    """``findings``, each with an ``auto_capture`` evidence item when the loop acted for it."""
    if not captures:
        return list(findings)
    out = []
    for f in findings:
        mine = [c for c in captures if _for(c, f)]
        if not mine or any(e.metric == AUTO_CAPTURE for e in f.evidence):
            out.append(f)
            continue
        out.append(replace(f, evidence=(*f.evidence, _evidence(mine))))
    return out


def _for(c: Capture, f: Finding) -> bool:
    if c.finding_id == f.id:
        return True
    same_ranks = bool(c.ranks) and set(c.ranks) <= set(f.ranks)
    return same_ranks and (
        f.onset_step is None or c.after_step < 0 or c.after_step <= f.onset_step + 50
    )


def _evidence(mine: Sequence[Capture]) -> Evidence:
    asked = [c for c in mine if c.status != "decided"]
    last = asked[-1] if asked else mine[-1]
    decided = [c for c in mine if c.status == "decided" and c.request_id == last.request_id]
    ranks = ", ".join(map(str, last.ranks))
    peers = ", ".join(map(str, last.peers))
    subject = f"rank{'s' if len(last.ranks) > 1 else ''} {ranks}" + (
        f" (peers {peers})" if peers else ""
    )
    at = f"step {last.at_step}" if last.at_step >= 0 else "the next steps"
    what = "link probe round" if last.kind == "probe" else "profiler window"
    when = "" if last.kind == "probe" else f" at {at}"
    why = f" ({last.reason})" if last.reason else ""
    if decided:
        outcome = decided[-1].outcome
        note = f"{what}{when}, requested automatically{why}, decided it: {outcome}"
    elif last.status == "requested":
        note = f"{what} requested automatically{when.replace(' at', ' for')}{why}; not back yet"
    elif last.status == "observed":
        note = f"observe mode: would have requested a {what}{why}"
    else:
        held = last.outcome or "its budget"
        note = f"a {what} was due{why} but was held back: {held}"
    value = float(last.at_step) if last.at_step >= 0 else math.nan
    return Evidence(metric=AUTO_CAPTURE, subject=subject, value=value, unit="step", note=note)
