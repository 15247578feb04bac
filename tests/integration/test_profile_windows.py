"""One real 4-rank ``diag run`` with profiler windows: a periodic one at step 5 and one asked for
with ``diag profile`` while the job runs; then ``diag trace`` merges the run.

Every rank takes the same windows at the same step; the summaries name the burner's operators
(``aten::mm``, ``aten::tanh``) and show that rank 2, which burns extra compute, spends far more
time in them; gloo's collectives are there; the periodic window is counted by diag's operator
observer where it is built (``aggregated``, no raw trace; Kineto's raw trace where not), the
on-demand one is Kineto's, its raw trace in ``OUT/traces/rank<r>/``; the on-demand window arrives
within about two seconds of steps; the merged trace has one track per rank with the steps aligned
and the on-demand window's operators inside its step.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from diag.hook import opstats
from diag.store.run_store import RunStore
from tests.fakes.diagproc import diag, env, torchrun

pytestmark = pytest.mark.integration

STEPS = 300  # a quiet run: the window asked for after step 40 came at step 74
WINDOWS = {"p5": 5}  # the next periodic window (p1005) is past the end of the job
STEP_LINE = re.compile(r"rank \d+ step (\d+) ")


def _newest_step(log: Path) -> int:
    try:
        return max((int(m) for m in STEP_LINE.findall(log.read_text(errors="replace"))), default=-1)
    except OSError:
        return -1


def test_profiler_windows_on_every_rank_and_merged_trace(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # built by `make test` (or not, without a compiler): the job's hooks load it from there
    aggregated = opstats.load()[0] is not None
    job = torchrun(4, "--steps", str(STEPS), "--slow-rank", "2", "--slow-ms", "30",
                   "--save-every", "0", "--print-every", "5")  # fmt: skip
    e = env()
    e.update(DIAG_HOOK_PROFILE_FIRST_STEP="5", DIAG_HOOK_PROFILE_EVERY_STEPS="1000")
    proc = subprocess.Popen(
        # the windows asked for by hand only: no automatic one beside them
        diag("run", "--out", str(out), "--live", "off", "--auto-capture", "off", "--", *job),
        env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _newest_step(out / "logs" / "job.log") < 40:
        time.sleep(0.1)
    while True:  # until the analyzer has seen a step (it cannot choose one before)
        asked = subprocess.run(
            diag("profile", str(out), "--json"), env=env(), capture_output=True, text=True,
            timeout=30,
        )  # fmt: skip
        if asked.returncode == 0 or "no training step yet" not in asked.stderr:
            break
        assert time.monotonic() < deadline, asked.stderr
        time.sleep(0.2)
    at_request = _newest_step(out / "logs" / "job.log")
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    assert asked.returncode == 0, asked.stderr
    job_log = (out / "logs" / "job.log").read_text(errors="replace")
    for text in (stdout, stderr, job_log):  # Kineto's per-window lines are kept quiet
        assert "USDT:" not in text and "profiler_start" not in text, text[-2000:]
    request = json.loads(asked.stdout)
    assert request["at_step"] < STEPS - 10, ("the job ended before the window", request)
    store = RunStore.open(out)

    wins = store.frame("profile_window")
    # every window stopped with gloo's workers done with its collectives' records (no record
    # ended after the stop freed it: diag.hook.c10d_workers)
    assert (wins["unsettled"] == 0).all(), wins[["rank", "window_id", "settle_ns", "unsettled"]]
    demand = wins[wins["trigger"] == "on_demand"]
    # The requested window: every rank, the same step, the one the analyzer chose, in time.
    assert sorted(demand["rank"]) == [0, 1, 2, 3], wins[["rank", "window_id", "step", "late"]]
    assert set(demand["window_id"]) == {f"d-{request['request_id']}"}
    (step,) = set(demand["step"])  # one step on every rank
    if step != request["at_step"]:
        # a machine too busy to deliver in time (once: asked for step 82, got at 92-95): every
        # rank moved on by whole leads, to one step
        assert demand["late"].all() and step > request["at_step"], (request, demand)
        assert (step - request["at_step"]) % request["realign_steps"] == 0, (request, demand)
    else:
        assert not demand["late"].any()
    # in time: after the request, within a few seconds of steps (the step asked for, or one a
    # whole lead later where the analyzer's estimate lagged a busy job: steps reach it ~2.5 s
    # late, and it extrapolates at their median)
    assert 0 < step - at_request <= 250, (request, at_request, step)
    periodic = wins[wins["trigger"] == "periodic"]
    periodic = periodic[periodic["window_id"].isin(WINDOWS)]
    wins = periodic
    assert len(wins) == 4 * len(WINDOWS), wins[["rank", "window_id", "step"]]
    for rank in range(4):
        mine = wins[wins["rank"] == rank]
        assert dict(zip(mine["window_id"], mine["step"], strict=True)) == WINDOWS
    assert wins["ok"].all() and not wins["late"].any()
    assert (wins["aggregated"] == aggregated).all(), wins[["rank", "window_id", "aggregated"]]
    assert not demand["aggregated"].any()  # evidence asked for: Kineto, shapes and raw trace
    assert (wins["num_steps"] == 1).all()
    assert (wins["duration_ns"] == wins["end_ns"] - wins["start_ns"]).all()
    assert (wins["duration_ns"] > 0).all() and (wins["num_ops"] > 0).all()

    kern = store.frame("kernel")
    assert set(WINDOWS) <= set(kern["window_id"])
    kern = kern[kern["window_id"].isin(WINDOWS)]

    def total(rank: int, name: str) -> int:
        rows = kern[(kern["rank"] == rank) & (kern["name"] == name)]
        return int(rows["total_ns"].sum())

    for rank in range(4):
        names = set(kern[kern["rank"] == rank]["name"])
        assert names & {"aten::mm", "aten::addmm"}
        colls = kern[(kern["rank"] == rank) & (kern["category"] == "collective")]
        assert any(n.startswith("gloo:") for n in colls["name"])
        # Top-level work inside a window never adds up past the window.
        for wid, rows in kern[kern["rank"] == rank].groupby("window_id"):
            (dur,) = wins[(wins["rank"] == rank) & (wins["window_id"] == wid)]["duration_ns"]
            mm_tanh = rows[rows["name"].isin(["aten::mm", "aten::tanh"])]["total_ns"].sum()
            assert 0 < mm_tanh <= dur
    # Against the peers' median, as the kernel detector compares: on a busy machine one peer
    # preempted inside aten::mm took 4.8 ms in its one-step window (the slow rank: 11.0 ms).
    slow_tanh, slow_mm = total(2, "aten::tanh"), total(2, "aten::mm")
    assert slow_tanh > 10 * max(statistics.median(total(r, "aten::tanh") for r in (0, 1, 3)), 1)
    assert slow_mm > 3 * statistics.median(total(r, "aten::mm") for r in (0, 1, 3))

    traces = sorted((out / "traces").glob("rank*/*.json.gz"))
    raw = 4 if aggregated else 4 * (len(WINDOWS) + 1)  # default bound (20 per rank) not reached
    assert len(traces) == raw
    kept = {str(p.relative_to(out / "traces")) for p in traces}
    assert kept == (set(wins["trace_path"]) | set(demand["trace_path"])) - {""}
    trace = json.loads(gzip.decompress(traces[0].read_bytes()))
    assert "baseTimeNanoseconds" in trace and trace["traceEvents"]

    # diag trace: one merged Chrome trace, a process per rank, steps aligned across ranks.
    merged_path = out / "merged.json"
    res = subprocess.run(
        diag("trace", str(out), "--output", str(merged_path), "--step-range", f"0:{step + 2}"),
        env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    merged = json.loads(merged_path.read_text())
    events = merged["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(procs) == [0, 1, 2, 3]
    ends: dict[int, dict[int, float]] = {}
    durations = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "step":
            ends.setdefault(e["args"]["step"], {})[e["pid"]] = e["ts"] + e["dur"]
            durations.append(e["dur"])
    assert sorted(ends) == list(range(step + 2))
    spreads = []
    for index, by_rank in ends.items():
        assert len(by_rank) == 4
        if index in WINDOWS.values() or index == step:
            continue  # a window step ends after the profiler's stop, which takes each rank its time
        # Synchronous DDP: every rank's step ends with the same all-reduce (microseconds); four
        # ranks share two cores here, so one may be descheduled for a while before its step ends.
        spreads.append(max(by_rank.values()) - min(by_rank.values()))
        assert spreads[-1] < 150_000, (index, by_rank)
    # Aligned: the ends of a step differ by far less than a step lasts (on an idle machine a few
    # ms; with another process taking a core a rank can wait tens of ms for a CPU to finish).
    assert statistics.median(spreads) < max(10_000, 0.5 * statistics.median(durations)), spreads
    # The windows' kernels sit inside their step on each rank's track.
    mm = [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::mm"]
    assert {e["pid"] for e in mm} == {0, 1, 2, 3}
