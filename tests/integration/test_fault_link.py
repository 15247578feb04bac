"""The slow-link fault, live: two emulated nodes (network namespaces, 2 ranks each, gloo over a
bridge), node B's link rate-limited with ``tc tbf`` from step 30 to cost half of the job's step
(:mod:`diag.selftest.link`); ``diag triage`` must name the link between node-a and node-b, and no
finding of severity warning or above may blame a node or the data loader (contention by a process
outside the job on a rank's CPU excepted: on a busy test machine that is true). Needs root,
``ip netns`` and ``tc`` (skipped otherwise). One two-node launch (about 20 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.findings import Finding
from diag.selftest.cases import Case
from diag.selftest.link import HOSTS, run_link_case
from diag.selftest.netns import unavailable_reason
from diag.selftest.score import judge, the_machines
from tests.fakes.foreign import foreign_process_contention

pytestmark = [pytest.mark.integration, pytest.mark.netns]

ONSET = 30


def _show(findings: list[Finding]) -> str:
    return "\n".join(
        f"{f.cause} {f.severity} ranks={f.ranks} hosts={f.hosts} "
        f"onset={f.onset_step} detected={f.detected_step} conf={f.confidence}: "
        f"{f.summary}"
        for f in findings
    )


def test_slow_link_is_named_with_its_hosts(tmp_path: Path) -> None:
    reason = unavailable_reason(("tc",))
    if reason is not None:
        pytest.skip(f"two-node network unavailable: {reason}")
    case = Case(cause="link", severity=0.5, onset_step=ONSET, steps=80)
    case, findings = run_link_case(case, tmp_path)
    shaping = json.loads((tmp_path / "link.json").read_text())
    shown = f"{_show(findings)}\nlink: {shaping}"
    assert case.hosts == HOSTS
    outcome = judge(case, findings)
    assert outcome.ok, f"top finding: {outcome.top}\n{shown}"
    findings = [f for f in findings if not the_machines(case, f)]  # a busy neighbour's: true
    top = findings[0]
    assert top.cause == "link" and top.severity in ("warning", "critical"), shown
    assert set(top.link.hosts) == set(HOSTS) == set(top.hosts), shown
    assert top.detected_step is not None and top.detected_step >= ONSET, shown
    blamed = [
        f
        for f in findings
        if f.severity != "info"
        and f.cause in ("node", "data")
        and not foreign_process_contention(f)  # a busy neighbour on this machine: true
    ]
    assert not blamed, f"node or data findings at warning or above:\n{shown}"
