"""``diag diff``: the --json object, the table, the HTML page and one-line errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from diag.cli.main import main
from diag.cli.render.diff import diff_renderables
from tests.fakes.diff_runs import RunBuilder, base_loss


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    ckpt = str(tmp_path / "step20.pt")
    a = RunBuilder().steps(range(40)).checkpoint("save", ckpt, 20)
    a.kernels("w1", 5, {"aten::mm": 10.0})
    b = RunBuilder(pid=200).checkpoint("load", ckpt, -1, ranks=(0, 1))
    b.steps(range(20), lambda s, r: base_loss(s + 20, r) * (1.01 if s >= 1 else 1.0))
    b.kernels("w1", 5, {"aten::mm": 12.0})
    return a.write(tmp_path / "a"), b.write(tmp_path / "b")


def _render(out: dict) -> str:  # type: ignore[type-arg]
    buf = io.StringIO()
    console = Console(width=100, file=buf, color_system=None)
    for item in diff_renderables(out):
        console.print(item)
    return buf.getvalue()


def test_json_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path)
    assert main(["diff", str(a), str(b), "--json"]) == 1  # diverged: a CI step fails on it
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"a", "b", "verdict", "loss", "grad_norm", "phases", "kernels"}
    assert set(out["verdict"]) >= {"kind", "step", "metric", "phase", "by"}
    assert out["verdict"]["kind"] == "diverged" and out["verdict"]["step"] == 21
    assert out["verdict"]["metric"] == "loss"
    assert out["loss"]["divergent_step"] == 21 and out["loss"]["rtol"] == 1e-3
    assert out["alignment"]["b_offset"] == 20 and out["alignment"]["common_steps"] == 20
    assert (out["a"]["world_size"], out["a"]["steps"], out["b"]["steps"]) == (2, 40, 20)
    assert out["phases"][0]["phase"] == "step" and len(out["phases"]) == 9
    assert out["kernels"][0]["name"] == "aten::mm" and out["kernels"][0]["delta_ms"] == 2.0
    assert out["grad_norm"] is None or "divergent_step" in out["grad_norm"]


def test_options_change_the_band_and_the_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _runs(tmp_path)
    code = main(["diff", str(a), str(b), "--json", "--rtol", "0.02"])
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["kind"] in ("equivalent", "slower") and out["loss"]["num_outside"] == 0
    assert code == {"equivalent": 0, "slower": 3}[out["verdict"]["kind"]]
    assert main(["diff", str(a), str(b), "--json", "--offset", "19"]) == 1
    assert json.loads(capsys.readouterr().out)["alignment"]["b_offset"] == 19


def test_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path)
    assert main(["diff", str(a), str(b), "--json"]) == 1
    text = _render(json.loads(capsys.readouterr().out))
    assert "DIVERGED  diverged at step 21 (rank 0): loss outside" in text
    assert "steps aligned: run B loaded step20.pt that run A saved at step 20" in text
    assert "step time by phase" in text and "collective wait" in text and "aten::mm" in text
    assert main(["diff", str(a), str(a)]) == 0
    assert "EQUIVALENT" in capsys.readouterr().out


def test_html_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path)
    page = tmp_path / "diff.html"
    assert main(["diff", str(a), str(b), "--html", str(page)]) == 1
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    assert text.count("<polyline") == 2  # the loss curve of each run
    assert "diverged at step 21" in text and "stroke-dasharray" in text
    assert "http" not in text.replace("http-equiv", "")


@pytest.mark.parametrize("case", ["missing", "not_a_run", "no_common_step", "bad_rtol"])
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    a, _ = _runs(tmp_path)
    other = {
        "missing": tmp_path / "nope",
        "not_a_run": tmp_path,
        "no_common_step": RunBuilder().steps(range(200, 210)).write(tmp_path / "late"),
        "bad_rtol": a,
    }[case]
    extra = ["--rtol", "-1"] if case == "bad_rtol" else []
    assert main(["diff", str(a), str(other), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("diag diff: error: ")
