"""The Python API (diag.open, diag.triage) and the report page built on it, on real run stores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import diag
from diag import schema
from diag.cli.render.report_html import MAX_STEPS, figures, render, step_matrices
from diag.errors import InputError
from diag.store.dataframes import dtypes
from diag.store.run_store import RunStore
from tests.fakes.events import T0, Source
from tests.fakes.scenarios import Scenario


@pytest.fixture
def slow_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    Scenario(slow_ranks=(2,), onset_step=40, severity=0.3, steps=90).write(run_dir)
    return run_dir


def test_open_gives_schema_frames_and_typed_findings(slow_run: Path) -> None:
    run = diag.open(slow_run)
    steps = run.steps
    assert list(steps.columns) == list(dtypes("step"))
    assert len(steps) == 4 * 90 and sorted(steps["rank"].unique()) == [0, 1, 2, 3]
    assert steps["ts_ns"].is_monotonic_increasing
    assert run.gpu.empty and list(run.gpu.columns) == list(dtypes("gpu"))  # no rows, all columns
    steps.loc[:, "duration_ns"] = 0  # a copy: the run's own frame is untouched
    assert run.steps["duration_ns"].gt(0).all()
    (top,) = [f for f in run.findings if f.severity != "info"]
    assert top.cause == "node" and top.ranks == (2,) and isinstance(top, diag.findings.Finding)
    assert not (slow_run / "findings.jsonl").exists()  # read-only: triaged, nothing written
    by_rank = {r.rank: r.compute_vs_peers for r in run.summary.ranks}
    assert max(by_rank, key=lambda r: by_rank[r] or 0) == 2
    assert diag.triage(slow_run)[0].ranks == (2,)


def test_findings_come_from_the_run_when_triage_wrote_them(slow_run: Path) -> None:
    from diag.diagnose.triage import write_findings

    write_findings(slow_run, diag.triage(slow_run)[:0])  # an empty, written triage
    assert diag.open(slow_run).findings == ()


def test_not_a_run_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    with pytest.raises(InputError, match=r"photo\.jpg"):
        diag.open(tmp_path / "photo.jpg")
    with pytest.raises(InputError, match="not a diag run directory"):
        diag.triage(tmp_path / "photo.jpg")
    run = diag.open(RunStore.create(tmp_path / "r").run_dir)
    with pytest.raises(InputError, match="no event kind 'stepz'"):
        run.frame("stepz")


def test_the_report_page_draws_the_run(slow_run: Path) -> None:
    run = diag.open(slow_run)
    page = render(run, run.findings)
    assert page.count("Plotly.newPlot(") == 4  # no GPU samples: no telemetry figure
    assert page.count("<script type='text/javascript'>") == 1  # plotly.js inlined once
    assert "No GPU telemetry in this run" in page
    figs = {f["id"]: f for f in figures(page)}
    assert set(figs) == {"step-heatmap", "compute-heatmap", "step-line", "phases"}
    heat = figs["compute-heatmap"]["data"][0]
    z = np.array(heat["z"], dtype=float)
    assert z.shape == (4, 90) and heat["y"] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    after = np.nanmedian(z[:, 50:], axis=1)
    assert after.argmax() == 2 and after[2] > 1.3 and abs(after[0] - 1) < 0.1
    shapes = figs["step-line"]["layout"]["shapes"]
    assert [s["x0"] for s in shapes] == [f.onset_step for f in run.findings if f.onset_step]


def test_text_from_the_run_is_escaped(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    store = Scenario(steps=20).write(run_dir)
    src = Source("node0")
    store.append([schema.RunEvent(**src.env(T0), phase="start",
                                  command="</script><script>alert(1)</script>")])  # fmt: skip
    store.flush()
    page = render(diag.open(run_dir), ())
    assert "<script>alert(1)" not in page and "&lt;/script&gt;&lt;script&gt;alert(1)" in page


def test_long_runs_are_binned_and_big_jobs_sampled() -> None:
    import pandas as pd

    rows = [(r, s, 1e7 * (2 if r == 700 else 1), 1e7 * (2 if r == 700 else 1))
            for r in range(1000) for s in range(3 * MAX_STEPS)]  # fmt: skip
    steps = pd.DataFrame(rows, columns=["rank", "step", "duration_ns", "compute_ns"])
    mats = step_matrices(steps, keep={700})
    assert mats["sampled"] and 700 in mats["ranks"] and len(mats["ranks"]) <= 256
    assert mats["width"] == 3 and mats["vs"].shape[1] == MAX_STEPS
    assert mats["vs"].loc[700].median() == pytest.approx(2.0)
    assert json.dumps(mats["ranks"])
