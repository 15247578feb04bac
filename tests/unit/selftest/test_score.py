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
