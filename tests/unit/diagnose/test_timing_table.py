"""Timing tables from other tools: Features from a table, ``diag triage FILE``, one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diag.diagnose.timing_table import features_from_table, read_timing_table
from diag.diagnose.triage import triage_table
from diag.errors import InputError
from tests.fakes.cli import run_cli

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _table(ranks: int = 4, steps: int = 80, slow_rank: int = 1, onset: int = 40) -> pd.DataFrame:
    """Synchronous data-parallel steps: data, forward, backward, optimizer, then a collective in
    which every rank waits for the slowest; ``slow_rank``'s forward is 30% slower from ``onset``.
    Step 30 also saves a checkpoint on every rank."""
    rng = np.random.default_rng(7)
    rows: list[tuple[int, int, str, str, int, int]] = []
    t = T0
    for step in range(steps):
        fwd = 40.0 * (1 + 0.01 * rng.standard_normal(ranks))
        bwd = 50.0 * (1 + 0.01 * rng.standard_normal(ranks))
        if step >= onset:
            fwd[slow_rank] *= 1.3
        busy = 5.0 + fwd + bwd + 10.0
        ckpt = 200.0 if step == 30 else 0.0
        for r in range(ranks):
            spans = [
                ("data", "next(loader)", 5.0),
                ("forward", "model.forward", fwd[r]),
                ("backward", "loss.backward", bwd[r]),
                ("optimizer", "optimizer.step", 10.0),
                ("collective", "all_reduce", busy.max() - busy[r] + 20.0),
            ]
            if ckpt:
                spans.append(("checkpoint", "/ckpt/step30", ckpt))
            s = t
            for phase, op, ms in spans:
                rows.append((r, step, phase, op, s, int(ms * MS)))
                s += int(ms * MS)
        t += int((busy.max() + 20.0 + ckpt) * MS) + MS
    cols = ["rank", "step", "phase", "op", "start_ns", "duration_ns"]
    df = pd.DataFrame(rows, columns=cols)
    df["dp_rank"] = df["rank"]
    return df


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return _table()


def test_features_from_table(tmp_path: Path, table: pd.DataFrame) -> None:
    path = tmp_path / "spans.csv"
    table.assign(host=[f"node{r // 2}" for r in table["rank"]]).to_csv(path, index=False)
    f = features_from_table(read_timing_table(path))
    assert len(f.steps) == 4 * 80 and list(f.steps[["step", "rank"]].iloc[1]) == [0, 1]
    row = f.steps[(f.steps["rank"] == 0) & (f.steps["step"] == 30)].iloc[0]
    assert row["host"] == "node0" and row["data_ms"] == pytest.approx(5.0)
    assert row["ckpt_ms"] == pytest.approx(200.0)
    parts = row["compute_ms"] + row["wait_ms"] + row["data_ms"] + row["ckpt_ms"]
    assert parts == pytest.approx(row["duration_ms"], abs=1e-3)
    assert row["end_ns"] - row["start_ns"] == pytest.approx(row["duration_ms"] * MS, abs=1)
    assert len(f.ckpt) == 4 and set(f.ckpt["path"]) == {"/ckpt/step30"}
    assert set(f.ckpt["op"]) == {"save"} and (f.ckpt["num_bytes"] == 0).all()
    assert f.collectives.empty and f.kernels.empty


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_triage_finds_slow_rank(tmp_path: Path, table: pd.DataFrame, suffix: str) -> None:
    path = tmp_path / f"job42{suffix}"
    if suffix == ".csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)
    result = triage_table(path)
    assert result.run == {"id": "job42", "source": "timing table", "world_size": 4, "steps": 80}
    node = [f for f in result.findings if f.id == "node-rank1"]
    assert node and node[0].ranks == (1,)
    assert 38 <= (node[0].onset_step or 0) <= 42


def test_another_tools_names_and_units_read_the_same(tmp_path: Path, table: pd.DataFrame) -> None:
    """The same spans as another tool writes them (Chrome-trace ``ts``/``dur`` in microseconds,
    ``Iteration``, ``global_rank``, ``name``, phases ``FWD``/``bwd``/``comm``/``dataloader``):
    the same steps table and findings as the table in this format."""
    phases = {"forward": "FWD", "backward": "bwd", "optimizer": "optim", "collective": "comm",
              "data": "dataloader", "checkpoint": "ckpt"}  # fmt: skip
    other = pd.DataFrame({
        "global_rank": table["rank"], "Iteration": table["step"],
        "phase": table["phase"].map(phases),
        "name": table["op"], "ts": table["start_ns"] / 1_000, "dur": table["duration_ns"] / 1_000,
        "dp_rank": table["dp_rank"],
    })  # fmt: skip
    canonical, theirs = tmp_path / "job42.csv", tmp_path / "theirs.csv"
    table.to_csv(canonical, index=False)
    other.to_csv(theirs, index=False)
    ours, got = read_timing_table(canonical), read_timing_table(theirs)
    times = ["start_ns", "duration_ns"]  # epoch microseconds as floats keep ~0.25 us
    assert (got[times] - ours[times]).abs().max().max() <= 1_000
    others = [c for c in ours.columns if c not in times]
    pd.testing.assert_frame_equal(got[others], ours[others])
    a, b = triage_table(canonical), triage_table(theirs)
    assert [(f.id, f.ranks, f.onset_step) for f in a.findings] == [
        (f.id, f.ranks, f.onset_step) for f in b.findings
    ]
    # a column named as here wins (as before aliases were read); two others are refused
    table.assign(iteration=-1, name="x", start_us=0).to_csv(canonical, index=False)
    pd.testing.assert_frame_equal(read_timing_table(canonical), ours)
    other.assign(start_ms=other["ts"] / 1_000).to_csv(theirs, index=False)
    with pytest.raises(InputError, match=r"'ts', 'start_ms' would all be start_ns"):
        read_timing_table(theirs)


def test_cli_json_on_table_writes_nothing(tmp_path: Path, table: pd.DataFrame) -> None:
    path = tmp_path / "job42.parquet"
    table.to_parquet(path, index=False)
    res = run_cli("triage", str(path), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["run"]["source"] == "timing table" and out["run"]["world_size"] == 4
    assert "node-rank1" in [f["id"] for f in out["findings"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job42.parquet"]


def _bad(tmp_path: Path, make: str) -> Path:
    df = _table(ranks=2, steps=3)
    if make == "missing":
        path = tmp_path / "t.csv"
        df.drop(columns=["op", "start_ns"]).to_csv(path, index=False)
    elif make == "phase":
        path = tmp_path / "t.csv"
        df.loc[2, "phase"] = "warp"
        df.to_csv(path, index=False)
    elif make == "numeric":
        path = tmp_path / "t.csv"
        df["start_ns"] = df["start_ns"].astype(object)
        df.loc[4, "start_ns"] = "soon"
        df.to_csv(path, index=False)
    elif make == "fifo":  # a named pipe called .csv: refused, never waited on
        path = tmp_path / "t.csv"
        os.mkfifo(path)
    elif make == "csv":
        path = tmp_path / "t.csv"
        path.write_text('rank,step,phase,op,start_ns,duration_ns\n0,0,"data\n')
    else:
        path = tmp_path / "t.parquet"
        df.to_parquet(path, index=False)
        path.write_bytes(path.read_bytes()[:200])
    return path


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        ("missing", "op, start_ns"),
        ("phase", "'warp'"),
        ("numeric", "start_ns"),
        ("csv", "CSV"),
        ("truncated", "Parquet"),
        ("fifo", "not a regular file"),
    ],
)
def test_bad_table_raises_input_error(tmp_path: Path, make: str, expect: str) -> None:
    path = _bad(tmp_path, make)
    with pytest.raises(InputError) as info:
        read_timing_table(path)
    msg = str(info.value)
    assert str(path) in msg and expect in msg and "\n" not in msg


@pytest.mark.parametrize("make", ["missing", "phase", "truncated"])
def test_bad_table_is_one_line_in_cli(tmp_path: Path, make: str) -> None:
    path = _bad(tmp_path, make)
    res = run_cli("triage", str(path), "--json")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert lines[0].startswith("diag triage: error:") and str(path) in lines[0]
    assert not (tmp_path / "findings.jsonl").exists()
