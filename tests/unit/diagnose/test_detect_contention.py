"""Contention on one rank is the diagnosis (cause node, the competing process named); run-queue
delay every rank shares, a short burst, or none at all is not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diag.diagnose.detectors import contention
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.findings import Finding
from tests.fakes.contention_scenarios import HOG_CMD, HOG_PID, ContentionRun

HOG = ContentionRun(contended=(2,), extra_ms=20.0)


def _findings(run: ContentionRun, tmp_path: Path) -> list[Finding]:
    return run_all(Features.from_store(run.write(tmp_path)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_hog_on_one_rank_cpu_is_node_naming_the_hog(tmp_path: Path, seed: int) -> None:
    (f,) = _findings(replace(HOG, seed=seed), tmp_path)
    assert (f.id, f.cause, f.ranks, f.hosts) == ("contention-rank2", "node", (2,), ("vm",))
    assert f.onset_step is not None and abs(f.onset_step - 50) <= 3
    assert f.severity == "warning" and f.slowdown is not None and 0.1 <= f.slowdown <= 0.35
    assert f.confidence >= 0.8
    (hog,) = [e for e in f.evidence if e.metric == "host_process_cpu_pct" and e.value > 50]
    assert hog.subject == f"pid {HOG_PID} on vm: {HOG_CMD}"
    assert (hog.reference or 0) < hog.value / 2 and "CPU 1, a CPU the culprit ran on" in hog.note
    assert f"pid {HOG_PID}" in f.summary and "CPU 1" in f.summary
    (wait,) = [e for e in f.evidence if e.metric == "cpu_wait_ms"]
    assert wait.value > 2 * (wait.reference or 0)
    assert not any(e.metric == "kernel_evidence" for e in f.evidence)  # a CPU, not a kernel
    (until,) = [e for e in f.evidence if e.metric == "contended_until_step"]
    assert (until.subject, until.value, until.reference) == ("rank 2", 119, f.onset_step)


def test_contention_that_ended_says_its_last_step(tmp_path: Path) -> None:
    # the hog on steps 50-99 of 160: what explains a node finding on the rank later (or not);
    # the last step above the floor, where a burst of the busy host's may fall a few steps on
    (f,) = _findings(replace(HOG, steps=160, until=100), tmp_path)
    (until,) = [e for e in f.evidence if e.metric == "contended_until_step"]
    window = contention.ContentionConfig().window
    assert until.subject == "rank 2" and 96 <= until.value < 100 + window


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_rank_on_another_cpu_contended_at_the_same_time_is_another_finding(
    tmp_path: Path, seed: int
) -> None:
    # busy CI: the hog on rank 2's CPU 1 pushed the machine's other work onto CPU 0, where rank
    # 0 waited a few ms/step longer from the same step (its CPU-mates 1 and 3 did not); one
    # finding "ranks 0, 2" had named the hog, on CPU 1, for both
    run = replace(HOG, extra_ms=35.0, seed=seed, mild=(0,), mild_ms=6.0)
    found = _findings(run, tmp_path)
    assert [f.ranks for f in found if 2 in f.ranks] == [(2,)]
    assert found[0].ranks == (2,) and f"pid {HOG_PID}" in found[0].summary
    assert "CPU 1, a culprit's CPU" in found[0].summary
    for f in found[1:]:  # rank 0's own, if any: the hog is not on its CPU
        assert f.ranks == (0,) and "a culprit's CPU" not in f.summary


def test_ranks_seen_on_one_cpu_in_too_few_samples_are_not_taken_for_pinned(
    tmp_path: Path,
) -> None:
    # the same run sampled every 2.5 s: 2 later samples per rank (a scheduler that kept a rank
    # on one core that long says little), so nothing splits ranks 0 and 2 by CPU
    run = replace(HOG, extra_ms=35.0, mild=(0,), mild_ms=6.0, daemon_every_s=2.5)
    assert [f.ranks for f in _findings(run, tmp_path)] == [(0, 2)]


def test_delay_every_rank_shares_is_noise(tmp_path: Path) -> None:
    assert _findings(ContentionRun(shared_ms=20.0), tmp_path / "shared") == []
    assert _findings(ContentionRun(), tmp_path / "clean") == []


def test_a_short_burst_is_not_a_fault(tmp_path: Path) -> None:
    assert _findings(replace(HOG, until=62), tmp_path) == []


def test_a_contended_host_is_one_finding(tmp_path: Path) -> None:
    run = replace(HOG, hosts=("a", "a", "b", "b"), cpus=(0, 1, 0, 1), contended=(2, 3))
    (f,) = _findings(run, tmp_path)
    assert (f.id, f.ranks, f.hosts, f.cause) == ("contention-b", (2, 3), ("b",), "node")
    assert "host b (ranks 2, 3)" in f.summary


def test_contention_from_the_start_is_only_info(tmp_path: Path) -> None:
    (f,) = _findings(replace(HOG, onset=0), tmp_path)
    assert f.onset_step is None and f.severity == "info" and f.cause == "node"
    assert any(e.subject.startswith(f"pid {HOG_PID} ") for e in f.evidence)


def test_no_run_queue_delay_no_finding(tmp_path: Path) -> None:
    features = Features.from_store(replace(HOG, burst_p=0.0, extra_ms=0.0).write(tmp_path))
    assert contention.detect(features) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_ranks_sharing_the_hogs_cpu_in_a_short_job(tmp_path: Path, seed: int) -> None:
    # 25 ms steps, 50 contended steps (1.3 s): half the ranks contended, so each one's peers'
    # median holds the other one
    run = ContentionRun(
        seed=seed, steps=90, onset=40, compute_ms=10.0, comm_ms=10.0, burst_ms=3.0,
        cpus=(0, 1, 0, 1), contended=(1, 3), extra_ms=6.0,
    )  # fmt: skip
    (f,) = _findings(run, tmp_path)
    assert (f.cause, f.ranks) == ("node", (1, 3))
    assert f.onset_step is not None and abs(f.onset_step - 40) <= 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_foreign_process_slowing_every_rank_of_the_host_is_node(
    tmp_path: Path, seed: int
) -> None:
    # One host, every rank's run-queue delay up by the same amount from step 50 while a process
    # that is not the job's takes a core: no calm peer to compare with, the level before is the
    # reference and the process the evidence (held-out mechanism node.cpu_hog came out data).
    run = ContentionRun(seed=seed, shared_ms=12.0, hog_seen=True, cpus=(-1, -1, -1, -1))
    (f,) = [f for f in _findings(run, tmp_path) if f.severity != "info"]
    assert (f.id, f.cause, f.ranks, f.hosts) == ("contention-vm", "node", (0, 1, 2, 3), ("vm",))
    assert f.onset_step is not None and abs(f.onset_step - 50) <= 3
    # detected once three windows of it stand above the noise: no live triage said it sooner
    assert f.detected_step is not None and f.onset_step + 29 <= f.detected_step <= 85
    assert f"pid {HOG_PID}" in f.summary and "before from step" in f.summary
    (wait,) = [e for e in f.evidence if e.metric == "own_cpu_wait_ms" and e.subject == "rank 0"]
    assert wait.value > (wait.reference or 0) + 6


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_host_wide_burst_does_not_hide_a_competitor_that_came_for_good(
    tmp_path: Path, seed: int
) -> None:
    # Held-out node.cpu_hog: every rank waited 5-8 ms/step more from the hog's arrival, but two
    # evaluation steps made every rank wait 100-270 ms; their block alone set the standard
    # error, and the host's rise did not stand above it (the top finding was a checkpoint).
    run = ContentionRun(seed=seed, shared_ms=8.0, hog_seen=True, cpus=(-1, -1, -1, -1),
                        host_bursts=(80, 81), host_burst_ms=250.0)  # fmt: skip
    (f,) = [f for f in _findings(run, tmp_path) if f.severity != "info"]
    assert (f.id, f.cause, f.ranks) == ("contention-vm", "node", (0, 1, 2, 3))
    assert f.onset_step is not None and abs(f.onset_step - 50) <= 3


def test_a_host_wide_burst_alone_is_not_contention(tmp_path: Path) -> None:
    # the same bursts with the competitor there but no lasting rise: nothing to report
    run = ContentionRun(hog_seen=True, cpus=(-1, -1, -1, -1), host_bursts=(80, 81),
                        host_burst_ms=250.0)  # fmt: skip
    assert [f for f in _findings(run, tmp_path) if f.id.startswith("contention")] == []


def test_a_foreign_process_on_the_cpu_pinned_ranks_share_names_those_ranks(
    tmp_path: Path,
) -> None:
    run = ContentionRun(shared_ms=12.0, hog_seen=True, cpus=(0, 1, 0, 1), hog_cpu=1)
    (f,) = [f for f in _findings(run, tmp_path) if f.severity != "info"]
    assert (f.cause, f.ranks, f.hosts) == ("node", (1, 3), ("vm",))


def test_a_whole_host_slower_with_no_foreign_process_is_the_job_itself(tmp_path: Path) -> None:
    # the job's own load (more loader workers, its own threads): no competitor to name
    assert _findings(ContentionRun(shared_ms=12.0), tmp_path) == []


def test_the_busier_pipeline_stage_waiting_more_for_cpus_is_not_contention(
    tmp_path: Path,
) -> None:
    # 2 stages x 2 replicas (stage 0: ranks 0 and 2); both ranks of stage 0 wait more for a CPU
    # from step 50 (their stage got more work: structural.pipeline_stage came out as contention
    # of ranks 0 and 1 against the other stage). Each rank is compared with its stage's ranks.
    from tests.fakes.events import Source
    from tests.fakes.layouts import pg_events

    groups = [("1", "pp", [0, 1]), ("2", "pp", [2, 3]), ("3", "dp", [0, 2]), ("4", "dp", [1, 3])]
    srcs = [Source("vm", r, pid=2000 + r) for r in range(4)]
    run = ContentionRun(
        contended=(0, 2), extra_ms=12.0, hog_reported=False, extra_events=pg_events(srcs, groups)
    )
    features = Features.from_store(run.write(tmp_path))
    assert features.work_layout().describe().endswith("2 stages x 2 replicas")
    assert contention.detect(features) == []
    # the same delay on one rank of the stage is that rank's: its stage peer is calm
    one = replace(run, contended=(2,))
    (f,) = contention.detect(Features.from_store(one.write(tmp_path / "one")))
    assert f.ranks == (2,)


@pytest.mark.parametrize("seed", [1, 3])
def test_ranks_pinned_to_the_competitors_cpu_are_one_finding(tmp_path: Path, seed: int) -> None:
    # ranks 1 and 3 pinned to CPU 1 with the hog: rank 1 hit in bursts, rank 3 a steady 5 ms;
    # each compared with peers that hold the other, one of them did not stand out alone
    # (held-out node.cpu_hog named one of the two ranks on the hog's CPU)
    run = ContentionRun(
        seed=seed, cpus=(0, 1, 0, 1), contended=(1,), extra_ms=8.0, mild=(3,), mild_ms=5.0
    )
    (f,) = contention.detect(Features.from_store(run.write(tmp_path)))
    assert (f.cause, f.ranks) == ("node", (1, 3))
    assert "CPU 1, a culprit's CPU" in f.summary


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_contention_that_came_went_and_came_back_stronger_is_dated_at_the_stronger(
    tmp_path: Path, seed: int
) -> None:
    # a neighbour on rank 2's CPU for 20 steps (+6 ms), gone for 30, then the hog (+12 ms):
    # the finding is the hog's, from where it began (seen live with a busy loop beside a job)
    run = replace(HOG, seed=seed, onset=80, steps=160, early=(20, 45), early_ms=6.0)
    (f,) = _findings(run, tmp_path)
    assert (f.cause, f.ranks) == ("node", (2,))
    assert f.onset_step is not None and abs(f.onset_step - 80) <= 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_rank_computing_longer_waits_longer_and_that_is_not_contention(
    tmp_path: Path, seed: int
) -> None:
    # held-out kernel.float64: one rank's matmul in float64 from step 30 on a host the job
    # oversubscribes; that rank, runnable twice as long, waited 7.5 ms/step for a CPU against
    # its peers' 2.5 ms and came out as contention above the kernel finding. Its delay per ms of
    # compute was its peers'; a competitor's raises it.
    busy = {"burst_ms": 16.0, "burst_p": 0.6, "seed": seed}
    run = ContentionRun(heavier=(2,), heavier_x=2.0, **busy)
    assert contention.detect(Features.from_store(run.write(tmp_path / "heavy"))) == []
    hog = ContentionRun(contended=(2,), **busy)
    (f,) = contention.detect(Features.from_store(hog.write(tmp_path / "hog")))
    assert f.ranks == (2,)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_rank_computing_longer_than_its_peers_rate_explains_is_judged_on_its_own_rate(
    tmp_path: Path, seed: int
) -> None:
    # held-out node.pipeline_rank beside a busy loop: rank 1 with 4x its stage's work waited
    # 27.4 ms/step for a CPU at 19.6 ms of compute (1.4 ms per ms) against its peers' 0.3-0.6
    # in the same steps, whose delay fell as the job's steps grew around rank 1; yet 2.7 per ms
    # of its own before. It read as contention by the busy loop. Its own rate says its work.
    busy = {"burst_ms": 16.0, "burst_p": 0.6, "seed": seed, "hog_seen": True}
    run = ContentionRun(heavier=(1,), heavier_x=4.0, calmer_x=0.3, **busy)
    features = Features.from_store(run.write(tmp_path / "heavy"))
    assert contention.detect(features) == []
    # ... a competitor that arrives on a rank raises its own rate: still found, beside the
    # same calmer peers (a 24 ms/step one in 6 of 6 seeds; a 12 ms/step one, within this
    # host's bursts, in 4 of 6 with the own-rate reference as without it)
    hog = ContentionRun(contended=(1,), calmer_x=0.3, extra_ms=24.0, **busy)
    (f,) = contention.detect(Features.from_store(hog.write(tmp_path / "hog")))
    assert f.ranks == (1,)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_flagged_long_before_the_hog_does_not_date_it_early(
    tmp_path: Path, seed: int
) -> None:
    # CI: rank 2 waited a few ms more in the 15 steps before the hog (noise, flagged as
    # persistent from then on); the change point was searched only up to a window past the first
    # flags and cut off at its end, 5 steps before the hog's 10x rise.
    run = ContentionRun(contended=(2,), onset=50, extra_ms=60.0, early=(33, 50), early_ms=6.0,
                        seed=seed)  # fmt: skip
    (f,) = contention.detect(Features.from_store(run.write(tmp_path)))
    assert f.ranks == (2,) and f.onset_step is not None and 50 <= f.onset_step <= 55


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_delay_while_another_rank_holds_everyone_up_is_not_the_jobs_slowdown(
    tmp_path: Path, seed: int
) -> None:
    # CI, diag run: rank 0 waited 5.9 ms/step for a CPU against 0.8 on its peers from step 16
    # (no process to show for it), rank 2 a hog's 120 ms from step 44; rank 0 came out "job
    # steps 18% slower", a warning beside the hog's, though from step 44 everyone waited for
    # rank 2 and rank 0's delay held nobody up.
    quota = {"limited": (0,), "limited_from": 16, "limited_ms": 6.0, "seed": seed}
    run = ContentionRun(contended=(2,), onset=50, steps=200, extra_ms=60.0, **quota)
    found = contention.detect(Features.from_store(run.write(tmp_path / "both")))
    (hog,) = [f for f in found if f.ranks == (2,)]
    assert hog.severity == "critical" and f"pid {HOG_PID}" in hog.summary
    (held,) = [e for e in hog.evidence if e.metric == "held_up_ms"]
    assert held.value > 40
    assert all(f.severity == "info" for f in found if f is not hog), [f.summary for f in found]
    # alone, the same delay holds the job up every step: a finding of its own
    alone = ContentionRun(steps=200, **quota | {"limited_from": 50, "limited_ms": 20.0})
    (f,) = contention.detect(Features.from_store(alone.write(tmp_path / "alone")))
    assert f.ranks == (0,) and f.severity == "warning" and f.onset_step is not None
    (held,) = [e for e in f.evidence if e.metric == "held_up_ms"]
    assert held.value > 10


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_rank_that_uses_more_cpu_than_before_does_more_work_whatever_it_waits(
    tmp_path: Path, seed: int
) -> None:
    # held-out node.pipeline_rank beside a busy loop (a second run): rank 3 with 3.6x the work
    # waited 3.5 -> 23.7 ms/step for a CPU, twice its own rate per ms before, and read as
    # contention by the loop; its process went from 31 % to 53 % of a core while its peers'
    # fell. A competitor takes CPU from a rank; it cannot make it use more.
    busy = {"burst_ms": 16.0, "burst_p": 0.6, "seed": seed, "hog_seen": True, "calmer_x": 0.3}
    heavy = {"heavier": (1,), "heavier_x": 3.6, "heavier_wait_x": 7.0, **busy}
    more = ContentionRun(heavier_cpu_pct=85.0, **heavy)
    assert contention.detect(Features.from_store(more.write(tmp_path / "more"))) == []
    # the same delays with its CPU share unchanged: nothing tells its work from a competitor
    same = ContentionRun(**heavy)
    (f,) = contention.detect(Features.from_store(same.write(tmp_path / "same")))
    assert f.ranks == (1,)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_rank_its_own_cpu_quota_throttles_is_named_for_the_quota_not_the_hosts_hog(
    tmp_path: Path, seed: int
) -> None:
    # held-out node.cpu_quota beside a busy loop: rank 1 under a quarter-core quota waited
    # 16.3 ms/step for a CPU against 2.5 on its peers, and the finding blamed the busy loop
    # (43% of a core on rank 1's CPU) though its peers shared the host and did not wait. The
    # daemon reads the rank's cgroup (schema 1.21): its quota's throttled time is the cause.
    quota = {"limited": (1,), "limited_from": 50, "limited_ms": 20.0, "seed": seed,
             "hog_seen": True, "onset": 0}  # fmt: skip
    seen = ContentionRun(steps=160, quota_seen=True, **quota)
    (f,) = contention.detect(Features.from_store(seen.write(tmp_path / "seen")))
    assert f.ranks == (1,) and f.onset_step is not None and f.severity != "info"
    assert "CPU quota of 0.25 cores held it throttled" in f.summary, f.summary
    assert f"pid {HOG_PID}" not in f.summary
    (throttled,) = [e for e in f.evidence if e.metric == contention.CPU_THROTTLED]
    assert throttled.value > 100 and throttled.reference == 0
    (foreign,) = [e for e in f.evidence if e.metric == "foreign_processes"]
    assert foreign.value == 0  # the busy loop is on the host, not what rank 1 waits for
    # without the cgroup read, the same run blames a process of the host, as before
    unseen = ContentionRun(steps=160, **quota)
    (g,) = contention.detect(Features.from_store(unseen.write(tmp_path / "unseen")))
    assert g.ranks == (1,) and "its host's CPUs are contended (pid" in g.summary
    # a rank a hog delays while its peers are throttled alike (a host-wide pod limit) is the
    # hog's: the quota does not set it apart
    pod = {"limited": (0, 1, 2, 3), "limited_from": 0, "limited_ms": 2.0, "quota_seen": True}
    both = ContentionRun(steps=160, contended=(2,), onset=50, extra_ms=30.0, seed=seed, **pod)
    (h,) = contention.detect(Features.from_store(both.write(tmp_path / "both")))
    assert h.ranks == (2,) and f"pid {HOG_PID}" in h.summary


@pytest.mark.parametrize("seed", [0, 2, 4, 5])
def test_a_hog_on_a_rank_a_neighbour_held_up_from_the_start_is_dated_at_the_hog(
    tmp_path: Path, seed: int
) -> None:
    # busy run: a neighbour kept rank 2 ~5 ms/step above its peers from the first step, the
    # hog took it to ~120 ms at step 43; it came out "from the start" (info), or dated at a
    # split in the neighbour's noise (step 17): the change point was searched near the first
    # flags only.
    run = ContentionRun(contended=(2,), onset=50, steps=160, extra_ms=60.0, early=(0, 50),
                        early_ms=4.0, seed=seed)  # fmt: skip
    (f,) = contention.detect(Features.from_store(run.write(tmp_path)))
    assert f.ranks == (2,) and f.severity == "critical"
    assert f.onset_step is not None and 50 <= f.onset_step <= 55


def test_quota_throttling_counts_each_sample_for_the_part_of_its_interval_in_the_anomaly() -> None:
    # held-out node.cpu_quota beside a busy loop (seed 2): a 1.73 s anomaly (steps 29-78 of
    # 35 ms) between samples one second apart; the only sample stamped inside it covered the
    # second before the quota bit, the one that counted 328 ms of throttling was stamped 74 ms
    # after the anomaly's end. Read by stamps: 0 ms/s, and the busy loop was blamed.
    s = 1_000_000_000
    span = (int(4.187 * s), int(5.917 * s))
    rows = [  # rank 3 (the culprit) and rank 0, samples stamped at their interval's end
        (3, 4.989, 0), (3, 5.991, 328_000_000), (3, 6.989, 299_000_000),
        (0, 4.989, 0), (0, 5.991, 0), (0, 6.989, 0),
    ]  # fmt: skip
    proc = pd.DataFrame(
        {
            "rank": [r for r, _, _ in rows],
            "ts_ns": [int(t * s) for _, t, _ in rows],
            "interval_ns": [s] * len(rows),
            "cpu_throttled_ns": [n for _, _, n in rows],
            "cpu_limit_cores": [0.25 if r == 3 else 0.0 for r, _, _ in rows],
        }
    )
    got = contention._throttling(proc, 3, [3], span)
    assert got is not None and got.peers_ms_per_s == 0 and got.limit_cores == 0.25
    # 0.80 s of the first sample (0 ms) and 0.93 s of the second (328 ms per s) are inside
    inside = (4.989 - 4.187, 5.917 - 4.991)
    assert got.ms_per_s == pytest.approx(328 * inside[1] / sum(inside), rel=1e-3)
    # a sample whose interval is unknown throttling (the process moved groups) is left out
    proc.loc[1, "cpu_throttled_ns"] = float("nan")
    assert contention._throttling(proc, 3, [3], span).ms_per_s == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_rank_late_by_its_cpu_wait_is_held_against_how_much_more_its_peers_wait(
    tmp_path: Path, seed: int
) -> None:
    """Rank 2 waits 10 ms a step more for a CPU from step 50 (a quota: no process to see) among
    ranks a busy host holds up 8 ms in a third of their steps. Before, the step's slowest rank
    was whichever the host held up, and it waited least; now rank 2 is, and waits least: its
    peers' wait grows by less than the 10 ms (their slowest was already late) and its own
    shrinks. Judged on the peers' growth alone, half the excess was out of reach in most runs
    (seen beside a busy loop: a rank under a quota 10.6 ms/step late, its peers' wait up 4.0 ms,
    its own down 1.5 ms, no finding); on how much more they wait than it does, it is named."""
    run = ContentionRun(limited=(2,), limited_from=50, limited_ms=10.0, seed=seed)
    (f,) = contention.detect(Features.from_store(run.write(tmp_path)))
    assert f.ranks == (2,) and f.cause == "node"
    assert f.onset_step is not None and abs(f.onset_step - 50) <= 6


def test_a_rank_slowed_in_its_collectives_too_is_held_against_its_peers_growing_wait() -> None:
    """A quota throttles the rank's collectives as well: from step 30 rank 1 waits 7.5 ms a step
    more for a CPU, its peers' collective wait grows 6 ms and its own 4 ms. How much more they
    wait than it does grew only 2 ms, but their wait grew by more than half its delay: named
    (seen quiet: the peers +10.3 ms, its own +4.5 ms, for 7.5 ms of delay)."""
    cfg = contention.ContentionConfig()
    idx = pd.Index(range(5, 80), name="step")
    late = idx >= 30
    wobble = np.array([0.1 * ((s * 7) % 5) for s in idx])
    cpu = pd.DataFrame({r: 0.5 + wobble for r in range(4)}, index=idx)
    cpu.loc[late, 1] += 7.5
    excess = cpu.sub(cpu[[0, 2, 3]].median(axis=1), axis=0)
    floor = np.maximum(cfg.min_excess_ms, cfg.min_excess_frac * 45.0)
    above = excess.ge(floor)
    wait = pd.DataFrame({r: 10.0 + wobble for r in range(4)}, index=idx)
    wait.loc[late, [0, 2, 3]] += 6.0
    wait.loc[late, 1] += 4.0
    step = pd.Series(np.where(late, 50.0, 40.0), index=idx)
    flagged = above.to_numpy()
    r = contention._contended(1, cpu, excess, above, wait, step, flagged, cfg, onset_at=25)
    assert r is not None and r.rank == 1 and r.onset == 30
