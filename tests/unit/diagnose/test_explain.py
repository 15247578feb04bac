"""Order by what matters, one fault one finding: a critical slow link whose ranks also read as
computing longer is the one finding, first, with its echoes as evidence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from diag.diagnose.detectors.registry import DEFAULT_CONFIGS, DETECTORS, run_all
from diag.diagnose.explain import EXPLAINS, explains, fold
from diag.diagnose.features import Features
from diag.findings import Evidence, Finding, impact, ranked
from tests.fakes.echo_scenarios import echo_run


def _f(id: str, cause: str, severity: str, **kw) -> Finding:
    base = dict(symptom="slowdown", ranks=(0,), hosts=("node-a",), onset_step=40)
    base |= dict(slowdown=0.2, confidence=0.9, summary=id)
    return Finding(id=id, cause=cause, severity=severity, **(base | kw))


def test_a_slow_link_with_echoes_is_one_finding_first(tmp_path: Path) -> None:
    features = Features.from_store(echo_run(tmp_path / "run"))
    raw = [f for n, d in DETECTORS.items() for f in d(features, DEFAULT_CONFIGS[n])]
    # what the detectors say: two node warnings, each surer than the critical link
    node = sorted(f.id for f in raw if f.cause == "node")
    assert node == ["node-rank0", "node-rank2"]
    (link,) = [f for f in raw if f.cause == "link"]
    assert link.severity == "critical"
    assert all(f.confidence > link.confidence for f in raw if f.cause == "node")
    (top,) = run_all(features)
    assert (top.id, top.cause, top.severity) == ("link:dp0", "link", "critical")
    folded = sorted(e.subject for e in top.evidence if e.metric == EXPLAINS)
    assert folded == node
    assert all("node warning" in e.note for e in top.evidence if e.metric == EXPLAINS)


def test_what_explains_and_what_does_not() -> None:
    link = _f("link", "link", "critical", ranks=(0, 2), hosts=("node-a", "node-b"), slowdown=0.21)
    echo = _f("node-rank0", "node", "warning", slowdown=0.13)
    assert explains(link, echo)
    assert not explains(echo, link)  # a node does not make a link slow
    assert not explains(link, replace(echo, onset_step=60))  # another time
    assert not explains(link, replace(echo, ranks=(1,), hosts=("node-c",)))  # other culprits
    assert not explains(link, replace(echo, slowdown=0.4))  # loses more than the link
    assert not explains(link, replace(echo, cause="data"))  # a cause a link does not echo
    assert not explains(link, replace(echo, onset_step=None))  # slow from the start
    assert not explains(replace(link, severity="info"), echo)  # less severe than its echo
    # by hosts: a rank of a host the link joins
    assert explains(link, replace(echo, ranks=(1,), hosts=("node-a",)))


def test_two_detectors_on_one_node_fold_into_the_weightier() -> None:
    contention = _f("contention-rank1", "node", "critical", ranks=(1,), slowdown=0.35)
    compute = _f("node-rank1", "node", "warning", ranks=(1,), slowdown=0.12, onset_step=43)
    other = _f("node-rank3", "node", "warning", ranks=(3,), hosts=("node-b",), slowdown=0.1)
    out = fold([compute, other, contention])
    assert [f.id for f in out] == ["node-rank3", "contention-rank1"]
    (e,) = [e for e in out[1].evidence if e.metric == EXPLAINS]
    assert e.subject == "node-rank1"


def test_ranked_by_severity_then_share_lost_times_confidence() -> None:
    sure_small = _f("a", "node", "warning", slowdown=0.05, confidence=0.99)
    likely_big = _f("b", "data", "warning", slowdown=0.4, confidence=0.7)
    critical = _f("c", "link", "critical", slowdown=0.21, confidence=0.5)
    info = _f("d", "kernel", "info", slowdown=0.9, confidence=0.99)
    hang = _f("e", "unknown", "critical", symptom="hang", slowdown=None, confidence=0.3)
    drift = _f("f", "data", "warning", symptom="drift", slowdown=None, confidence=0.8)
    order = ranked([sure_small, likely_big, critical, info, hang, drift])
    assert [f.id for f in order] == ["e", "c", "b", "a", "f", "d"]
    assert impact(hang) == 0.3  # a hang loses the whole job: 1 x 0.3 > 0.21 x 0.5
    assert impact(drift) == 0.0


def test_a_cpu_bound_loader_explains_its_ranks_wait_for_a_cpu() -> None:
    # a loader computing on rank 3's CPU on a busy host: the rank also waits for a CPU
    data = _f("data-rank3", "data", "critical", ranks=(3,), hosts=("vm",), slowdown=0.32)
    contention = _f("contention-rank3", "node", "warning", ranks=(3,), hosts=("vm",),
                    slowdown=0.24, onset_step=39)  # fmt: skip
    (out,) = fold([contention, data])
    assert out.id == "data-rank3" and out.cause == "data"
    assert [e.subject for e in out.evidence if e.metric == EXPLAINS] == ["contention-rank3"]
    # contention on another rank, or losing more than the loader, is a fault of its own
    assert not explains(data, replace(contention, ranks=(1,), hosts=("other",)))
    assert not explains(data, replace(contention, slowdown=0.6))
    assert not explains(contention, data)


def test_the_loaders_own_load_is_explained_from_two_blocks_before_the_loader_on() -> None:
    # CI: a CPU-bound loader from step 30; its rank's contention, with no competitor outside the
    # job, dated at step 45 (run-queue delay is bursty, the loader's demand builds up)
    data = _f("data-rank3", "data", "critical", ranks=(3,), hosts=("vm",), slowdown=0.42,
              onset_step=30)  # fmt: skip
    own = Evidence(metric="foreign_processes", subject="host vm", value=0.0)
    contention = _f("contention-rank3", "node", "warning", ranks=(3,), hosts=("vm",),
                    slowdown=0.17, onset_step=45, evidence=(own,))  # fmt: skip
    assert explains(data, contention)
    (out,) = fold([contention, data])
    assert out.id == "data-rank3"
    # dated a block or two before the loader's onset (CI: 19 for a loader from step 30): its own
    # load still; a competitor outside the job dated later is a fault of its own; and an echo
    # cannot come well before its cause
    assert explains(data, replace(contention, onset_step=19))
    hog = replace(contention, evidence=(replace(own, value=1.0),))
    assert not explains(data, hog)
    assert not explains(data, replace(contention, onset_step=5))


def _hog_and_loader(
    cpu_wait: tuple[float, float],
    data_wait: tuple[float, float],
    hog: tuple[str, float, int],
    loader: tuple[str, float, int],
    named: tuple[Evidence, ...] = (),
) -> tuple[Finding, Finding]:
    """Contention on rank 2 of host vm by one process outside the job (``hog``: severity,
    slowdown, onset; its run-queue delay ``cpu_wait`` as (value, reference), the processes it
    names ``named``) and the data finding of that rank's loader (``loader`` the same; its wait
    ``data_wait``)."""
    starved = Evidence(metric="cpu_wait_ms", subject="rank 2", value=cpu_wait[0],
                       reference=cpu_wait[1])  # fmt: skip
    foreign = Evidence(metric="foreign_processes", subject="host vm", value=1.0)
    waited = Evidence(metric="data_ms", subject="rank 2", value=data_wait[0],
                      reference=data_wait[1])  # fmt: skip
    contention = _f("contention-rank2", "node", hog[0], ranks=(2,), hosts=("vm",),
                    slowdown=hog[1], onset_step=hog[2],
                    evidence=(starved, *named, foreign))  # fmt: skip
    data = _f("data-rank2", "data", loader[0], ranks=(2,), hosts=("vm",), slowdown=loader[1],
              onset_step=loader[2], evidence=(waited,))  # fmt: skip
    return contention, data


def test_a_competitor_on_a_ranks_cpu_explains_its_starved_loader() -> None:
    # CI beside a busy loop: a hog on rank 2's CPU from step 43 (1.82x); the loader computing on
    # that CPU falls behind, its wait dated from step 70 at 5.55x (another window, another ratio)
    hog, data = _hog_and_loader((178.4, 18.2), (52.0, 6.1), ("critical", 0.82, 43),
                                ("critical", 4.55, 70))  # fmt: skip
    (starved, foreign), (waited,) = hog.evidence, data.evidence
    assert explains(hog, data)
    (out,) = fold([data, hog])
    assert out.id == "contention-rank2"
    assert [e.subject for e in out.evidence if e.metric == EXPLAINS] == ["data-rank2"]
    # a loader that waits longer than its CPU was taken (a sleeping loader beside the hog), one
    # that began waiting well before the competitor, the job's own load, another rank: its own
    assert not explains(hog, replace(data, evidence=(replace(waited, value=250.0),)))
    assert not explains(hog, replace(data, onset_step=20))
    own = replace(hog, evidence=(starved, replace(foreign, value=0.0)))
    assert not explains(own, data)
    other = replace(data, ranks=(1,), evidence=(replace(waited, subject="rank 1"),))
    assert not explains(hog, other)
    assert not explains(hog, replace(data, evidence=()))  # no measure of its wait: undecided


def test_a_competitor_that_arrived_is_the_cause_even_beside_a_larger_loader_finding() -> None:
    # a real-time hog on rank 2's core from step 45: its loader's wait rose with it (+20 ms/step
    # beside +29 ms/step of run-queue delay) and, dated two steps later at 4.17x, the "data"
    # finding was the larger one and had taken the contention in
    arrived = Evidence(metric="host_process_cpu_pct", subject="pid 9 on vm: hog", value=91.0,
                       reference=0.0)  # fmt: skip
    diag_own = Evidence(metric="host_process_cpu_pct", subject="pid 7 on vm: diag daemon",
                        value=30.0, reference=0.0)  # fmt: skip
    hog, data = _hog_and_loader((34.8, 5.9), (21.0, 1.0), ("critical", 0.7, 45),
                                ("critical", 3.17, 47), named=(arrived, diag_own))  # fmt: skip
    assert not explains(data, hog) and explains(hog, data)
    (out,) = fold([data, hog])
    assert out.id == "contention-rank2"
    assert [e.subject for e in out.evidence if e.metric == EXPLAINS] == ["data-rank2"]
    # a CPU-bound neighbour there all along (its share before about the same): the loader's own
    # demand is what changed, and the loader explains its rank's wait for a CPU; only the
    # processes outside the job count (the first foreign_processes of them): diag's own daemon,
    # new since the onset, does not make a competitor arrive
    steady = replace(arrived, reference=80.0)
    busy = replace(hog, evidence=tuple(steady if e is arrived else e for e in hog.evidence))
    assert explains(data, busy)


def test_a_starved_loader_is_folded_into_its_competitor_whatever_their_severities() -> None:
    # beside a real-time hog: contention from step 49 a warning at 27% of each step, the loader's
    # wait from step 73 "critical" at 3.64x (another window); its 20 ms/step of extra data wait
    # is within the 35.7 ms/step its CPU was taken
    hog, data = _hog_and_loader((40.3, 4.6), (21.0, 1.0), ("warning", 0.27, 49),
                                ("critical", 2.64, 73))  # fmt: skip
    assert explains(hog, data)
    (out,) = fold([data, hog])
    assert (out.id, out.severity) == ("contention-rank2", "critical")
    assert [e.subject for e in out.evidence if e.metric == EXPLAINS] == ["data-rank2"]
    # a node finding that names no competitor outside the job (a slow device) explains no wait
    slow = _f("node-rank2", "node", "warning", ranks=(2,), hosts=("vm",), slowdown=0.27)
    assert not explains(slow, replace(data, onset_step=42))


def test_a_competitor_explains_its_ranks_compute_while_it_holds_the_rank() -> None:
    # CI beside a real-time hog on rank 2's core from step 49 (2.02x): rank 2 "computes 5.78x as
    # long from step 107" (a warning) stood beside it; its training thread was blocked on gloo's
    # threads, which waited for the CPU the hog held (neither running nor queued: compute)
    foreign = Evidence(metric="foreign_processes", subject="host vm", value=1.0)
    until = Evidence(metric="contended_until_step", subject="rank 2", value=170.0, reference=49.0)
    hog = _f("contention-rank2", "node", "critical", ranks=(2,), hosts=("vm",), slowdown=0.5,
             onset_step=49, evidence=(foreign, until))  # fmt: skip
    compute = _f("node-rank2", "node", "warning", ranks=(2,), hosts=("vm",), slowdown=0.2,
                 onset_step=107)  # fmt: skip
    assert explains(hog, compute)
    (out,) = fold([compute, hog])
    assert [e.subject for e in out.evidence if e.metric == EXPLAINS] == ["node-rank2"]
    assert explains(hog, replace(compute, onset_step=170))  # its last contended step
    # after the contention ended, well before it, beyond what it lost, or with no competitor
    # outside the job (the job's own load), or no last step for the rank: a fault of its own
    assert not explains(hog, replace(compute, onset_step=171))
    assert not explains(hog, replace(compute, onset_step=38))
    assert not explains(hog, replace(compute, slowdown=0.7))
    assert not explains(replace(hog, evidence=(replace(foreign, value=0.0), until)), compute)
    assert not explains(replace(hog, evidence=(foreign,)), compute)
    assert not explains(hog, replace(compute, ranks=(1, 2)))  # rank 1 was not contended
    assert not explains(hog, replace(compute, cause="data", onset_step=130))
