"""The slow-link fault on four nodes, live: one rank per node (network namespaces, gloo over a
bridge), node C's link rate-limited with ``tc tbf`` from step 30 to cost half of the job's step
(:mod:`diag.selftest.link`); ``diag triage`` must localize the slowdown from every host of the
job to that host's link: gloo's ring gives each host one heavy connection in and one out, so the
ranks' TCP statistics name the pair of hosts of the slowest connection, which must hold that host
(:mod:`diag.diagnose.detectors.link_hosts`: the sender's way out or the receiver's way in; a probe
from a third host would tell which end), from about the onset; no finding of severity warning
or above may blame a node or the data loader. Node C rather than the default (node B for seed 0,
as on two nodes) so that a detector naming the two-node case's host by habit does not pass.
Needs root, ``ip netns`` and ``tc`` (skipped otherwise). One four-node launch (about 30 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.findings import Finding
from diag.selftest.cases import Case
from diag.selftest.link import run_link_case
from diag.selftest.netns import unavailable_reason
from tests.fakes.foreign import foreign_process_contention

pytestmark = [pytest.mark.integration, pytest.mark.netns]

ONSET = 30
NODES = 4
SLOW_HOST = "node-c"
#: how far the top finding's onset may be from the step the limit held from.
ONSET_TOLERANCE_STEPS = 10


def _show(findings: list[Finding]) -> str:
    return "\n".join(
        f"{f.cause} {f.severity} ranks={f.ranks} hosts={f.hosts} "
        f"link_hosts={f.link.hosts if f.link is not None else None} "
        f"onset={f.onset_step} detected={f.detected_step} conf={f.confidence}: "
        f"{f.summary}"
        for f in findings
    )


def test_slow_link_is_localized_to_its_host(tmp_path: Path) -> None:
    reason = unavailable_reason(("tc",))
    if reason is not None:
        pytest.skip(f"network namespaces unavailable: {reason}")
    case = Case(cause="link", severity=0.5, world_size=4, onset_step=ONSET, steps=80)
    case, findings = run_link_case(case, tmp_path, nodes=NODES, slow_host=SLOW_HOST)
    shaping = json.loads((tmp_path / "link.json").read_text())
    shown = f"{_show(findings)}\nlink: {shaping}"
    assert case.hosts == (SLOW_HOST,), shown
    assert shaping["node"] == SLOW_HOST and shaping["num_nodes"] == NODES, shown
    assert case.onset_step is not None and case.onset_step >= ONSET, shown
    assert findings, f"no findings\n{shown}"
    top = findings[0]
    assert top.cause == "link" and top.severity in ("warning", "critical"), shown
    assert top.link is not None, shown
    assert SLOW_HOST in top.link.hosts and len(top.link.hosts) <= 2, shown
    assert set(top.hosts) == set(top.link.hosts), shown
    assert any(e.metric == "tcp_slowness" for e in top.evidence), shown
    assert top.onset_step is not None, shown
    assert abs(top.onset_step - case.onset_step) <= ONSET_TOLERANCE_STEPS, shown
    assert top.detected_step is not None and top.detected_step >= case.onset_step, shown
    blamed = [
        f
        for f in findings
        if f.severity != "info"
        and f.cause in ("node", "data")
        and not foreign_process_contention(f)  # a busy neighbour on this machine: true
    ]
    assert not blamed, f"node or data findings at warning or above:\n{shown}"
