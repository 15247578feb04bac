"""The link detector: a slow cross-host group is named with its hosts; balanced runs and a slow
rank (compute) give no link finding."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from diag.diagnose.detectors import link
from diag.store.run_store import RunStore
from tests.fakes.link_kernel_scenarios import link_run

CFG = link.LinkConfig()


def _serious(findings):
    return [f for f in findings if f.severity in ("warning", "critical")]


def test_slow_group_is_one_link_finding_naming_its_hosts(tmp_path):
    store = link_run(tmp_path, slow_group="dp0", slow_from=30)
    found = link.detect_from_store(RunStore.open(tmp_path), CFG)
    assert len(found) == 1
    f = found[0]
    assert f.cause == "link" and f.symptom == "slowdown"
    assert f.link is not None and f.link.group == "dp0"
    assert f.ranks == (0, 2) and f.link.ranks == (0, 2)
    assert f.hosts == ("node-a", "node-b")
    assert f.onset_step == 30
    assert 30 <= (f.detected_step or 0) < 40
    assert f.severity in ("warning", "critical")
    assert f.slowdown is not None and 0.1 < f.slowdown < 0.5  # 2 x 20 ms extra on ~145 ms steps
    assert "probe" in f.summary and "node-a" in f.summary
    assert 0.0 < f.confidence <= 0.95
    assert store.frame("collective").shape[0] > 0


def test_balanced_run_has_nothing_at_warning_or_above(tmp_path):
    assert _serious(link.detect_from_store(link_run(tmp_path), CFG)) == []


def test_slow_rank_compute_is_not_a_link(tmp_path):
    store = link_run(tmp_path, slow_rank=3, slow_from=30)
    assert link.detect_from_store(store, CFG) == []


def test_slow_rank_without_durations_is_not_a_link(tmp_path):
    store = link_run(tmp_path, slow_rank=3, slow_from=30, timed=False)
    assert link.detect_from_store(store, CFG) == []


def test_proxy_without_durations_still_finds_the_group(tmp_path):
    store = link_run(tmp_path, slow_group="dp1", slow_from=20, timed=False)
    found = link.detect_from_store(store, CFG)
    assert [f.link.group for f in found if f.link] == ["dp1"]
    assert found[0].ranks == (1, 3)
    assert any(e.note.startswith("proxy") for e in found[0].evidence)
    # the proxy is coarse: less sure than measured durations
    timed = link.detect_from_store(link_run(tmp_path / "t", slow_group="dp1", slow_from=20), CFG)
    assert found[0].confidence < timed[0].confidence


def test_group_slow_from_the_start_is_caught_against_its_peer(tmp_path):
    store = link_run(tmp_path, slow_group="dp1", slow_from=0, slow_factor=2.0)
    found = link.detect_from_store(store, CFG)
    assert [f.link.group for f in found if f.link] == ["dp1"]
    assert found[0].onset_step is None


def test_empty_and_short_runs_give_nothing(tmp_path):
    assert link.detect_from_store(RunStore.create(tmp_path / "empty"), CFG) == []
    assert (
        link.detect_from_store(
            link_run(tmp_path / "s", num_steps=3, slow_group="dp0", slow_from=0), CFG
        )
        == []
    )


def test_noisy_steps_just_before_the_fault_do_not_date_it_early(tmp_path):
    # CI flake: a busy host made the proxy 1.6x slower 7 steps before the limit (3x) arrived;
    # the period from the noise had the most evidence and dated the onset (and detection) early.
    # CI again: the milder rise began 23 steps early, outside the search window near its start.
    for early in (23, 7):
        for timed in (True, False):
            store = link_run(
                tmp_path / f"{early}-{timed}",
                slow_group="dp0",
                slow_from=30,
                early=(early, 1.6),
                timed=timed,
                num_steps=80,
            )
            found = link.detect_from_store(store, CFG)
            assert [f.link.group for f in found if f.link] == ["dp0"]
            assert found[0].onset_step == 30, (early, found[0])
            assert (found[0].detected_step or 0) >= 30


def test_a_real_busy_runs_doubled_cost_is_found_from_its_onset():
    # CI beside a busy loop: the one group's smoothed cost went 14 -> 30 at the limit (step 30);
    # its reference, the median of the 10 smoothed steps before, held the two steps whose centred
    # window already reached past the limit plus one noisy step (17.6), and the cost stayed
    # slow against it in 79.7% of the steps (80% needed): no finding at the end of the run,
    # though the live passes had one.
    data = Path(__file__).parents[2] / "data" / "link_busy"
    coll = pd.read_parquet(data / "collective.parquet")
    steps = pd.read_parquet(data / "step.parquet")
    (f,) = link.detect(coll, steps, CFG)
    assert f.cause == "link" and f.severity == "critical"
    assert f.onset_step is not None and 30 <= f.onset_step <= 33


def test_own_work_is_compute_and_data_less_the_run_queue_delay_met_in_each() -> None:
    # rank 1 waited 30 ms for a CPU, 20 of them while making its batch (schema 1.18): its own
    # work is (15 - 10) + (25 - 20) = 10 ms, as much as rank 0's 5 + 5 that never waited.
    # Before 1.18 the whole delay came off its compute (clipped at 0) and the 20 ms met making
    # the batch stayed in its data wait: 0 + 25 ms, a rank 15 ms "late" that was only held up
    steps = pd.DataFrame(
        {
            "rank": [0, 1], "step": [5, 5], "compute_ns": [5e6, 15e6], "cpu_wait_ns": [0, 30e6],
            "cpu_wait_data_ns": [0, 20e6], "data_wait_ns": [5e6, 25e6], "checkpoint_ns": [0, 0],
        }
    )  # fmt: skip
    balance = link._own_work_balance(steps)
    assert balance.loc[5, "excess_ns"] == 0.0
    before = link._own_work_balance(steps.drop(columns="cpu_wait_data_ns"))
    assert before.loc[5, "excess_ns"] == 7.5e6  # max 25 against a median of (10 + 25) / 2


def test_a_group_whose_rank_waited_for_a_cpu_from_the_onset_is_not_a_link(tmp_path):
    """dp0's transfers 3x from step 30 (40 ms more a step) while its rank 2 waited 40 ms a step
    for a CPU from then on: a busy neighbour descheduling a rank slows its group's collectives
    (seen beside a busy loop: a pipeline stage's two-rank group inside one host named a slow
    link). A host busy all along, or a wait outside the group, is no such change."""

    def starved(step: int, rank: int) -> float:
        return 40.0 if rank == 2 and step >= 30 else 0.5

    store = link_run(tmp_path / "a", slow_group="dp0", slow_from=30, cpu_wait_ms=starved)
    assert link.detect_from_store(store, CFG) == []

    def busy(step: int, rank: int) -> float:
        return 40.0 + (step % 3)

    store = link_run(tmp_path / "b", slow_group="dp0", slow_from=30, cpu_wait_ms=busy)
    assert [f.link.group for f in link.detect_from_store(store, CFG) if f.link] == ["dp0"]

    def elsewhere(step: int, rank: int) -> float:
        return 40.0 if rank == 1 and step >= 30 else 0.5

    store = link_run(tmp_path / "c", slow_group="dp0", slow_from=30, cpu_wait_ms=elsewhere)
    assert [f.link.group for f in link.detect_from_store(store, CFG) if f.link] == ["dp0"]
