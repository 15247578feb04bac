"""One real 4-rank pipeline job (2 stages x 2 replicas, ``pipeline_job.py``) under the hook.

The job: 32 microbatches per step through the stages with ``isend``/``irecv`` (1F1B), each
microbatch's token count all-reduced over the last stage's dp group, gradients all-reduced in 4
buckets per stage: ~100 operations per step on the last stage, ~36 of them in the Flight
Recorder. Stage 1 does 20 ms more work per step than stage 0 on both replicas; at step 15 every
rank replaces its two optimizers by new ones (the old ones' state loaded, the old ones dropped).

What it checks, one class of issue 13 each:

- the layout: every rank reports the default group, its pp group and its dp group with their
  members in group-rank order (``ProcessGroupInfo``);
- nothing lost (class 8): no hook reports a dropped event, and every rank has every dp-group
  all-reduce from the Flight Recorder (sequence ids 1..N, none missing);
- the compute/wait split of a pipeline (class 8): the slow stage computes more than the other
  stage on each replica, and the other stage waits more (a stage blocked in ``irecv().wait()``
  is waiting);
- steps across re-created optimizers (class 9): every rank records every step, and the last
  stage's losses are the ones the job printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from diag import schema
from diag.selftest.workloads import PIPELINE_JOB
from tests.fakes.hook_sink import FrameSink, of_kind
from tests.fakes.paths import REPO

pytestmark = pytest.mark.integration

STEPS, MICROBATCHES, BUCKETS, RECREATE_AT = 40, 32, 4, 15
PP, DP = 2, 2
LINE = re.compile(r"rank (\d+) step (\d+) loss (\S+) stage (\d+)")


@dataclass
class Run:
    events: list[schema.Event]
    printed: dict[tuple[int, int], float]
    stderr: str


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    short = Path(tempfile.mkdtemp(prefix="dh"))  # AF_UNIX paths must stay short
    sink = FrameSink(short / "daemon.sock")
    sink.start()
    env = dict(os.environ)
    env.update(
        DIAG_HOOK="1",
        DIAG_HOOK_DAEMON_SOCK=sink.path,
        DIAG_HOOK_JOB_ID="pipe",
        PYTHONPATH=os.pathsep.join([str(REPO / "diag/hook/inject"), str(REPO)]),
    )
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(PP * DP), str(PIPELINE_JOB),
        "--steps", str(STEPS), "--pp", str(PP), "--microbatches", str(MICROBATCHES),
        "--count-tokens", "--grad-buckets", str(BUCKETS),
        "--slow-stage", "1", "--slow-stage-ms", "20",
        "--recreate-optimizer-at", str(RECREATE_AT), "--optimizers", "2",
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    finally:
        events = sink.close()
        shutil.rmtree(short, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "diag: hook not installed" not in proc.stderr
    printed = {(int(r), int(s)): float(v) for r, s, v, _stage in LINE.findall(proc.stdout)}
    assert len(printed) == PP * DP * STEPS
    yield Run(events=events, printed=printed, stderr=proc.stderr)


def test_every_rank_reports_its_dp_and_pp_groups(run: Run) -> None:
    infos = of_kind(run.events, schema.ProcessGroupInfo)
    for rank in range(PP * DP):
        stage, replica = divmod(rank, DP)
        mine = {(g.pg_desc, tuple(json.loads(g.ranks_json)), g.size, g.backend)
                for g in infos if g.rank == rank}  # fmt: skip
        assert mine == {
            ("default_pg", tuple(range(PP * DP)), PP * DP, "gloo"),
            ("pp", tuple(s * DP + replica for s in range(PP)), PP, "gloo"),
            ("dp", tuple(stage * DP + r for r in range(DP)), DP, "gloo"),
        }, rank
        names = [g.pg_name for g in infos if g.rank == rank]
        assert len(names) == len(set(names)) == 3  # once each


def test_nothing_is_lost_at_32_microbatches(run: Run) -> None:
    finals = {h.rank: h for h in of_kind(run.events, schema.HookHealth) if h.final}
    assert sorted(finals) == list(range(PP * DP))
    assert {r: h.num_dropped for r, h in finals.items()} == dict.fromkeys(finals, 0)
    assert all(h.num_errors == 0 for h in finals.values()), [h.last_error for h in finals.values()]
    dp_names = {g.rank: g.pg_name for g in of_kind(run.events, schema.ProcessGroupInfo)
                if g.pg_desc == "dp"}  # fmt: skip
    for rank in range(PP * DP):
        last = rank // DP == PP - 1
        expected = STEPS * (BUCKETS + (MICROBATCHES if last else 0))
        seq_ids = sorted(
            c.seq_id
            for c in of_kind(run.events, schema.CollectiveEvent)
            if c.rank == rank and c.origin == "fr" and c.pg_name == dp_names[rank]
        )
        assert seq_ids == list(range(1, expected + 1)), rank


def test_the_slow_stage_computes_and_the_other_waits(run: Run) -> None:
    steps = [s for s in of_kind(run.events, schema.StepEvent) if s.step >= 2]

    def median_ms(rank: int, field: str) -> float:
        return statistics.median(getattr(s, field) for s in steps if s.rank == rank) / 1e6

    split = {r: (median_ms(r, "compute_ns"), median_ms(r, "collective_wait_ns"))
             for r in range(PP * DP)}  # fmt: skip
    print("median (compute_ms, wait_ms) by rank:", split)
    for replica in range(DP):
        fast, slow = replica, DP + replica  # stage 0 and stage 1 of this replica
        assert split[slow][0] > split[fast][0]
        assert split[fast][1] > split[slow][1]


def test_every_step_is_recorded_across_recreated_optimizers(run: Run) -> None:
    steps = of_kind(run.events, schema.StepEvent)
    for rank in range(PP * DP):
        mine = sorted(s.step for s in steps if s.rank == rank)
        assert mine == list(range(STEPS)), rank
    for s in steps:
        if s.rank // DP == PP - 1:  # the last stage knows the loss
            assert s.loss == run.printed[(s.rank, s.step)]
