"""One real 4-rank ``diag run`` with periodic profiler windows at steps 5, 15 and 25.

Every rank takes the same windows at the same step; the summaries name the burner's operators
(``aten::mm``, ``aten::tanh``) and show that rank 2, which burns extra compute, spends far more
time in them; gloo's collectives are there; raw traces land in ``OUT/traces/rank<r>/``.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest
from diagproc import diag, env, torchrun

from diag.analysis.store import RunStore

pytestmark = pytest.mark.integration

STEPS = 30
WINDOWS = {"p5": 5, "p15": 15, "p25": 25}


def test_periodic_windows_on_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "run"
    job = torchrun(4, "--steps", str(STEPS), "--slow-rank", "2", "--slow-ms", "30",
                   "--save-every", "0", "--print-every", "10")  # fmt: skip
    e = env()
    e.update(DIAG_HOOK_PROFILE_FIRST_STEP="5", DIAG_HOOK_PROFILE_EVERY_STEPS="10")
    res = subprocess.run(
        diag("run", "--out", str(out), "--live", "off", "--", *job),
        env=e, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    store = RunStore.open(out)

    wins = store.frame("profile_window")
    assert len(wins) == 4 * len(WINDOWS), wins[["rank", "window_id", "step"]]
    for rank in range(4):
        mine = wins[wins["rank"] == rank]
        assert dict(zip(mine["window_id"], mine["step"], strict=True)) == WINDOWS
    assert wins["ok"].all() and not wins["late"].any()
    assert (wins["trigger"] == "periodic").all() and (wins["num_steps"] == 1).all()
    assert (wins["duration_ns"] == wins["end_ns"] - wins["start_ns"]).all()
    assert (wins["duration_ns"] > 0).all() and (wins["num_ops"] > 0).all()

    kern = store.frame("kernel")
    assert set(kern["window_id"]) == set(WINDOWS)

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
    slow_tanh, slow_mm = total(2, "aten::tanh"), total(2, "aten::mm")
    for rank in (0, 1, 3):
        assert slow_tanh > 10 * max(total(rank, "aten::tanh"), 1)
        assert slow_mm > 3 * total(rank, "aten::mm")

    traces = sorted((out / "traces").glob("rank*/*.json.gz"))
    assert len(traces) == 4 * len(WINDOWS)  # default bound (20 per rank) not reached
    kept = {str(p.relative_to(out / "traces")) for p in traces}
    assert kept == set(wins["trace_path"])
    trace = json.loads(gzip.decompress(traces[0].read_bytes()))
    assert "baseTimeNanoseconds" in trace and trace["traceEvents"]
    print("rank 2 tanh/mm total ns:", slow_tanh, slow_mm,
          "rank 0:", total(0, "aten::tanh"), total(0, "aten::mm"))  # fmt: skip
