"""``diag preflight``: JSON shape, baseline saved and reused, exit status, table."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from diag.cli.main import main
from diag.cli.render.preflight import results_table
from diag.preflight.rules import judge
from probes.base import ProbeResult

FIELDS = {"probe", "device", "metric", "status", "value", "unit", "baseline", "verdict", "detail"}


def test_json_and_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "b.json"
    args = ["preflight", "--probes", "numerics,hostcopy,nvml", "--baseline", str(base), "--json"]
    assert main([*args, "--save-baseline"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"host", "results"}
    assert all(set(r) == FIELDS for r in out["results"])
    assert [r["status"] for r in out["results"]] == ["ok", "unsupported", "unsupported"]
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["results"][0]["baseline"] is not None
    assert again["results"][0]["verdict"] == "pass"
    # a corrupted baseline checksum fails the run
    data = json.loads(base.read_text())
    for dev in data["hosts"][out["host"]].values():
        dev["numerics/checksum"]["detail"] = "0000"
    base.write_text(json.dumps(data))
    assert main(args) == 1


def test_unknown_probe_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--probes", "gemm,bogus"]) == 2
    assert "unknown probe(s) bogus" in capsys.readouterr().err


def test_table_names_failures() -> None:
    rows = [("h", ProbeResult(probe="gemm", device="cpu", status="timeout", metric="m"))]
    console = Console(width=100, file=io.StringIO(), color_system=None)
    console.print(results_table(judge(rows, {})))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "timeout" in text and "fail" in text
