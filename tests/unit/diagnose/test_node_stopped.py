"""A rank the daemon found stopped again and again (SIGSTOP, a suspend, a tracer) is a node
finding even when its steps show nothing else; a finding that already names it takes the state
as evidence; a whole job found stopped, or a single stopped read, is not one rank's fault."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.diagnose.detectors import node
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.store.run_store import RunStore
from tests.fakes.events import MS, Source
from tests.fakes.scenarios import Scenario

SECOND = 1_000 * MS


def _with_states(
    sc: Scenario, run_dir: Path, stopped: dict[int, int], from_step: int, limit: int = 1000
) -> Features:
    """``sc``'s run plus one ProcSample per rank and second (4 state reads each); ``stopped``:
    rank -> stopped reads in each of its samples from the one holding ``from_step`` on, in at
    most ``limit`` samples."""
    events = sc.events()
    steps = [e for e in events if isinstance(e, schema.StepEvent)]
    start_at = min(e.start_ns for e in steps if e.step == from_step)
    first, last = min(e.start_ns for e in steps), max(e.end_ns for e in steps)
    daemons = {h: Source(h, -1, pid=7) for h in {sc.host(r) for r in range(sc.ranks)}}
    hits = dict.fromkeys(range(sc.ranks), 0)
    for ts in range(first + SECOND, last + SECOND, SECOND):
        for r in range(sc.ranks):
            n = stopped.get(r, 0) if ts >= start_at and hits[r] < limit else 0
            hits[r] += n > 0
            env = {**daemons[sc.host(r)].env(ts), "rank": r}
            sample = schema.ProcSample(
                **env, pid=1000 + r, interval_ns=SECOND, num_state_samples=4, num_stopped=n
            )
            events.append(sample)
    store = RunStore.create(run_dir)
    store.append(events)
    store.flush()
    return Features.from_store(RunStore.open(run_dir))


def test_a_rank_found_stopped_is_a_node_finding_without_a_timing_signal(tmp_path: Path) -> None:
    f = _with_states(Scenario(seed=4, noise=0.05), tmp_path, {2: 1}, from_step=50)
    (found,) = node.detect(f)
    assert (found.id, found.cause, found.ranks) == ("node-rank2-stopped", "node", (2,))
    assert found.onset_step is not None and 42 <= found.onset_step <= 52
    assert found.detected_step is not None and found.detected_step > found.onset_step
    (ev,) = [e for e in found.evidence if e.metric == "stopped_samples"]
    assert ev.value >= 3 and ev.reference == 0
    assert "found stopped" in found.summary
    assert run_all(f)[0].id == "node-rank2-stopped"


def test_a_stalling_rank_found_stopped_is_one_finding(tmp_path: Path) -> None:
    sc = Scenario(stall_ranks=(2,), stall_share=0.35, onset_step=50, severity=0.2, seed=0,
                  noise=0.08)  # fmt: skip
    f = _with_states(sc, tmp_path, {2: 2}, from_step=50)
    (found,) = node.detect(f)
    assert found.id == "node-rank2-stalls"
    assert [e.metric for e in found.evidence].count("stopped_samples") == 1


def test_the_whole_job_stopped_or_one_stopped_read_is_no_rank_finding(tmp_path: Path) -> None:
    sc = Scenario(seed=4, noise=0.05)
    suspended = _with_states(sc, tmp_path / "a", dict.fromkeys(range(4), 2), from_step=50)
    assert node.detect(suspended) == []
    once = _with_states(sc, tmp_path / "b", {2: 2}, from_step=50, limit=1)
    assert node.detect(once) == []  # one read in one sample: stopped 2 times in all, not 3
