"""The fault suite's judging: what counts as the diagnosis of the injected fault."""

from __future__ import annotations


def test_the_machines_own_load_is_left_out_of_the_judging() -> None:
    """A busy neighbour's contention (a process outside the job named) is true but is not the
    injected fault: judged on the next finding, unless the mechanism is a foreign hog."""
    from diag.findings import Evidence, Finding
    from diag.selftest.cases import Case
    from diag.selftest.score import judge

    hog = Finding(
        id="contention-vm-ranks0-2", symptom="slowdown", cause="node", severity="critical",
        ranks=(0, 2), confidence=0.9, summary="ranks 0, 2 wait for a CPU",
        evidence=(Evidence(metric="host_process_cpu_pct", subject="pid 7 (busy)", value=33.0),),
    )  # fmt: skip
    fault = Finding(
        id="kernel-aten::mm", symptom="slowdown", cause="kernel", severity="warning", ranks=(2,),
        kernel="aten::mm", onset_step=40, detected_step=44, confidence=0.8, summary="mm slow",
    )  # fmt: skip
    case = Case(cause="kernel", severity=0.3, ranks=(2,), onset_step=40, kernel="aten::mm")
    assert judge(case, [hog, fault]).ok
    hogged = Case(cause="node", severity=0.3, ranks=(0, 2), onset_step=40, mechanism="node.cpu_hog")
    outcome = judge(hogged, [hog, fault])
    assert outcome.top.startswith("node critical ranks=[0, 2]")  # there the hog is the fault


def test_contention_with_no_process_outside_the_job_is_judged() -> None:
    """A cgroup quota on one rank found as contention with no process outside the job and
    diag (``foreign_processes`` 0), diag's own process listed beside it: that is the
    diagnosis of the injected fault, not the machine's load."""
    from diag.findings import Evidence, Finding
    from diag.selftest.cases import Case
    from diag.selftest.score import judge

    quota = Finding(
        id="contention-rank3", symptom="slowdown", cause="node", severity="warning",
        ranks=(3,), onset_step=36, detected_step=65, confidence=0.95, summary="rank 3 waits",
        evidence=(
            Evidence(metric="host_process_cpu_pct", subject="pid 9 (diag run)", value=33.0),
            Evidence(metric="foreign_processes", subject="host vm", value=0.0),
        ),
    )  # fmt: skip
    moving = Finding(
        id="data-moving", symptom="slowdown", cause="data", severity="info", ranks=(3, 0, 2),
        confidence=0.37, summary="uneven compute",
    )  # fmt: skip
    case = Case(cause="node", severity=0.3, ranks=(3,), onset_step=30, mechanism="node.cpu_quota")
    outcome = judge(case, [quota, moving])
    assert outcome.ok and outcome.top.startswith("node warning ranks=[3]")
    # the same finding naming a process outside the job is the machine's, left out
    busy = Evidence(metric="foreign_processes", subject="host vm", value=1.0)
    named = Finding(**{**{f: getattr(quota, f) for f in quota.__dataclass_fields__},
                       "evidence": (quota.evidence[0], busy)})  # fmt: skip
    assert not judge(case, [named, moving]).ok
