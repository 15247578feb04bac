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
    for mechanism in ("node.cpu_hog", "node.rt_hog"):  # there the hog is the fault
        hogged = Case(cause="node", severity=0.3, ranks=(0, 2), onset_step=40, mechanism=mechanism)
        outcome = judge(hogged, [hog, fault])
        assert outcome.top.startswith("node critical ranks=[0, 2]"), mechanism


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


def test_a_fault_that_did_not_take_is_right_when_diag_is_quiet_or_names_it() -> None:
    """A fault that cost the job 2 % of its 30 % share has nothing to find: judged apart (not
    a miss when diag says nothing), but a warning naming another rank is still wrong, and the
    accuracies over the faults that took leave it out."""
    from diag.findings import Finding
    from diag.selftest.cases import Case
    from diag.selftest.score import Summary, judge

    case = Case(cause="node", severity=0.3, ranks=(1,), onset_step=30, mechanism="node.cpu_hog")
    quiet = judge(case, [], cost=0.02)
    assert not quiet.took and quiet.quiet_or_right and not quiet.ok
    wrong = Finding(
        id="node-rank2", symptom="slowdown", cause="node", severity="warning", ranks=(2,),
        onset_step=31, detected_step=35, confidence=0.8, summary="rank 2 computes longer",
    )  # fmt: skip
    loud = judge(case, [wrong], cost=0.02)
    assert not loud.took and not loud.quiet_or_right
    right = Finding(
        id="node-rank1", symptom="slowdown", cause="node", severity="warning", ranks=(1,),
        onset_step=31, detected_step=35, confidence=0.8, summary="rank 1 computes longer",
    )  # fmt: skip
    taken = judge(case, [right], cost=0.25)
    assert taken.took and taken.ok
    unread = judge(case, [wrong])  # no cost read: counted as taken, judged as ever
    assert unread.took and not unread.ok
    summary = Summary((quiet, loud, taken, unread))
    assert summary.culprit_accuracy() == 0.25
    assert summary.taken().culprit_accuracy() == 0.5  # taken and unread
    assert [o.quiet_or_right for o in summary.untaken()] == [True, False]
    got = summary.to_json()
    assert [u["quiet_or_right"] for u in got["untaken"]] == [True, False]
    assert got["taken"]["heldout"]["n"] == 2
