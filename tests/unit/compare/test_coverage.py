"""``diag diff`` never says equivalent on part of the runs: ``incomplete`` when one run's recorded
steps stop short of the other's or of its own job (synthetic runs in real run stores)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from diag.cli.main import main
from diag.cli.render.diff import diff_renderables
from diag.compare.diff import diff_runs
from tests.fakes.diff_progress import collectives
from tests.fakes.diff_runs import RunBuilder, base_loss


def _resumed(tmp_path: Path, steps: range, pid: int = 200) -> RunBuilder:
    """A run resumed from A's ``step20.pt``: its steps 0.. are A's 20.., the same losses."""
    ckpt = str(tmp_path / "ckpt" / "step20.pt")
    run = RunBuilder(pid=pid).checkpoint("load", ckpt, -1, ranks=(0, 1))
    return run.steps(steps, lambda s, r: base_loss(s + 20, r))


def _full(tmp_path: Path, last: int = 99) -> RunBuilder:
    ckpt = str(tmp_path / "ckpt" / "step20.pt")
    run = RunBuilder().steps(range(last + 1)).checkpoint("save", ckpt, 20)
    return collectives(run, range(last + 1))


def test_a_run_that_stops_short_of_the_other_is_incomplete(tmp_path: Path) -> None:
    a = _full(tmp_path).write(tmp_path / "a")
    b = collectives(_resumed(tmp_path, range(41)), range(41)).write(tmp_path / "b")
    d = diff_runs(a, b)
    assert d.alignment.offset == 20 and d.num_common_steps == 41
    assert d.loss is not None and d.loss.num_outside == 0  # what was compared agrees
    assert d.verdict.kind == "incomplete"
    assert "run B's recorded steps end at step 60" in d.verdict.summary
    assert "A's steps 61..99 were not compared" in d.verdict.summary
    cov = d.to_json()["coverage"]
    assert cov["complete"] is False and (cov["a_last_step"], cov["b_last_step"]) == (99, 60)
    # and the other way round
    back = diff_runs(b, a)
    assert back.verdict.kind == "incomplete"
    assert "run A's recorded steps end" in back.verdict.summary


def test_a_job_that_ran_on_after_its_recorded_steps_is_incomplete(tmp_path: Path) -> None:
    # B's hook stopped counting at its step 40 (A's 60), its job trained on to A's step 99:
    # its collectives went on, attributed to the step it thought was still in progress
    a = _full(tmp_path).write(tmp_path / "a")
    b = _resumed(tmp_path, range(41))
    collectives(b, range(80), recorded_until=40)
    d = diff_runs(a, b.write(tmp_path / "b"))
    assert d.verdict.kind == "incomplete"
    j = d.to_json()
    assert j["b"]["last_step"] == 40 and j["b"]["job_last_step"] == 79
    assert any("ran on after its last recorded step 40" in r for r in j["coverage"]["reasons"])
    assert j["coverage"]["b_job_last_step"] == 99
    # the same when both stop at the same step: only the job shows the missing ones
    short_a = _full(tmp_path, last=60).write(tmp_path / "a60")
    d = diff_runs(short_a, tmp_path / "b")
    assert d.verdict.kind == "incomplete" and "run B: rank 0 ran on" in d.verdict.summary


def test_a_rank_that_stops_short_of_its_job_is_incomplete(tmp_path: Path) -> None:
    a = RunBuilder().steps(range(60)).write(tmp_path / "a")
    b = RunBuilder(pid=200).steps(range(60))
    b.events = [e for e in b.events if not (e.rank == 1 and e.step > 44)]  # rank 1 lost them
    d = diff_runs(a, b.write(tmp_path / "b"))
    assert d.verdict.kind == "incomplete"
    assert "ranks stop short of the job's last recorded step 59: rank 1 at 44" in d.verdict.summary


def test_a_teardown_after_the_last_step_is_not_lost_steps(tmp_path: Path) -> None:
    a = collectives(RunBuilder().steps(range(60)), range(60)).write(tmp_path / "a")
    b = collectives(RunBuilder(pid=200).steps(range(60)), range(60))
    collectives(b, [60], per_step=3)  # a final evaluation all-reduce and barrier
    d = diff_runs(a, b.write(tmp_path / "b"))
    assert d.verdict.kind == "equivalent", d.verdict.summary
    assert d.to_json()["coverage"]["complete"] is True


def test_divergence_in_the_compared_steps_wins(tmp_path: Path) -> None:
    a = _full(tmp_path).write(tmp_path / "a")
    ckpt = str(tmp_path / "ckpt" / "step20.pt")
    b = RunBuilder(pid=200).checkpoint("load", ckpt, -1, ranks=(0, 1))
    b.steps(range(41), lambda s, r: base_loss(s + 20, r) * (1.02 if s >= 10 else 1.0))
    d = diff_runs(a, b.write(tmp_path / "b"))
    assert (d.verdict.kind, d.verdict.step) == ("diverged", 30)
    assert any(n.startswith("incomplete: ") for n in d.notes)


def test_cli_json_and_table_say_incomplete_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _full(tmp_path).write(tmp_path / "a")
    b = collectives(_resumed(tmp_path, range(41)), range(41)).write(tmp_path / "b")
    assert main(["diff", str(a), str(b), "--json"]) == 4  # incomplete: diag diff --help
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["kind"] == "incomplete"
    assert set(out["verdict"]) >= {"kind", "step", "metric", "rank", "phase", "by", "summary"}
    buf = io.StringIO()
    console = Console(width=100, file=buf, color_system=None)
    for item in diff_renderables(out):
        console.print(item)
    text = buf.getvalue()
    assert "INCOMPLETE  incomplete: run B's recorded steps end at step 60" in text
    assert "note: incomplete: run B's recorded steps end at step 60" in text
