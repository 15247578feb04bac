"""The slow-link fault on four nodes, live: one rank per node (network namespaces, gloo over a
bridge), node C's link rate-limited with ``tc tbf`` from step 30 to cost half of the job's step
(:mod:`diag.selftest.link`); the top finding must be ``link`` naming that host alone, from about
the onset. Passive evidence cannot do it here: gloo's ring gives each host one heavy connection
in and one out, so the ranks' TCP statistics name at best the pair of hosts of the slowest
connection, or no host (:mod:`diag.diagnose.detectors.link_hosts`); the analyzer's closed loop
then runs a
point-to-point probe round through the four node daemons (:mod:`diag.analyzer.linkprobe`) and
the matrix names the host whose incoming traffic is slow
(:mod:`diag.diagnose.detectors.link_probe`). No finding of severity warning or above may blame
a node or the data loader. Node C rather than the default (node B for seed 0, as on two nodes)
so that a detector naming the two-node case's host by habit does not pass. Needs root, ``ip
netns`` and ``tc`` (skipped otherwise). One four-node launch that runs until the round has come
back and a while after (about a minute).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from diag.diagnose.capture_evidence import AUTO_CAPTURE
from diag.diagnose.detectors.link_probe import PROBE_LOCALIZATION
from diag.findings import Finding
from diag.selftest.cases import Case
from diag.selftest.link import run_link_case
from diag.selftest.netns import unavailable_reason
from diag.selftest.score import the_machines
from diag.store import captures
from tests.fakes.foreign import foreign_process_contention

pytestmark = [pytest.mark.integration, pytest.mark.netns]

ONSET = 30
NODES = 4
SLOW_HOST = "node-c"
#: how far the top finding's onset may be from the step the limit held from.
ONSET_TOLERANCE_STEPS = 10
#: The job runs until the closed loop's probe round has decided, then AFTER_ROUND steps more
#: (the steps the round ran beside are left out of the analysis: 100 at a fast draw of this VM),
#: STEPS at most. Counted in steps the round's ~10 s were too few now and then: at 240 steps a
#: clean CI run's final triage had no link finding despite the round's answer, at 300 one
#: clean-clone run in about eight ended before the round narrowed the group to its host, at 360
#: a quiet run's job (27 ms a step under the limit, not the 0.15 s assumed) ended first again.
STEPS = 3000
AFTER_ROUND = 120


def _round_decided(after: int) -> Callable[[Path, int], bool]:
    """``stop_when`` for the link case: true ``after`` steps past the step at which the
    analyzer's closed loop recorded its probe round decided (``auto_capture.jsonl``)."""
    decided_at: list[int] = []

    def when(run_dir: Path, last: int) -> bool:
        if not decided_at:
            done, _ = captures.read(run_dir)  # a line still being written counts as a problem
            if not any(c.kind == "probe" and c.status == "decided" for c in done):
                return False
            decided_at.append(last)
        return last >= decided_at[0] + after

    return when


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
    case = Case(cause="link", severity=0.5, world_size=4, onset_step=ONSET, steps=STEPS)
    case, findings = run_link_case(
        case, tmp_path, nodes=NODES, slow_host=SLOW_HOST, stop_when=_round_decided(AFTER_ROUND)
    )
    shaping = json.loads((tmp_path / "link.json").read_text())
    shown = f"{_show(findings)}\nlink: {shaping}"
    assert case.hosts == (SLOW_HOST,), shown
    assert shaping["node"] == SLOW_HOST and shaping["num_nodes"] == NODES, shown
    assert case.onset_step is not None and case.onset_step >= ONSET, shown
    findings = [f for f in findings if not the_machines(case, f)]  # a busy neighbour's: true
    assert findings, f"no findings\n{shown}"
    top = findings[0]
    assert top.cause == "link" and top.severity in ("warning", "critical"), shown
    assert top.link is not None, shown
    assert top.link.hosts == (SLOW_HOST,) and top.hosts == (SLOW_HOST,), shown
    # The passive half ran and said what the ranks' own connections showed. By design the probe
    # round follows when they do not single out one host: they may name a pair (then each heavy
    # pair's tcp_slowness, the slow host among them) or nothing (every host's contrast 0: seen
    # in CI runs on 2026-12-05 evening, the probes then naming node-c alone).
    assert any(e.metric == "tcp_localization" for e in top.evidence), shown
    slow_pairs = [e.subject for e in top.evidence if e.metric == "tcp_slowness"]
    assert not slow_pairs or any(SLOW_HOST in pair for pair in slow_pairs), shown
    (probed,) = [e for e in top.evidence if e.metric == PROBE_LOCALIZATION]
    assert probed.value == 1 and probed.subject == SLOW_HOST, shown
    (loop,) = [e for e in top.evidence if e.metric == AUTO_CAPTURE]
    assert "link probe round" in loop.note and "decided it" in loop.note, shown
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
