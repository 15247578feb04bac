"""``diag triage`` on remains: --json with problems and missing evidence, --html as one
self-contained file, a run directory's remains merged with its detectors, one-line errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.fakes.cli import run_cli
from tests.fakes.fr_dumps import REAL_NCCL_DUMPS as REAL
from tests.fakes.scenarios import Scenario
from tests.fakes.torchrun_logs import write_crash


def _self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "http" not in " ".join(re.findall(r"""(?:src|href)=\S+""", page))


@pytest.mark.skipif(not REAL.is_dir(), reason=f"{REAL} not present")
def test_real_dumps_json_and_html(tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    res = run_cli("triage", str(REAL), "--json", "--html", str(html))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out) == {"run", "findings", "problems", "missing"}
    assert out["run"]["source"] == "remains" and out["run"]["num_dumps"] == 16
    assert out["findings"][0]["ranks"] == [12, 14]
    assert out["problems"] == []
    page = html.read_text()
    _self_contained(page)
    assert "rank 12 (culprit)" in page and "rank 14 (culprit)" in page
    assert "no step data" in page
    assert not any(p.name != "report.html" for p in tmp_path.iterdir())  # nothing else written


def test_crash_remains_table_and_escaped_html(tmp_path: Path) -> None:
    remains = tmp_path / "remains"
    remains.mkdir()
    write_crash(remains)
    log = remains / "job.log"
    log.write_text(log.read_text().replace("corrupt sample 1234", "corrupt <script>x</script>"))
    res = run_cli("triage", str(remains), "--html", str(tmp_path / "r.html"))
    assert res.returncode == 0, res.stderr
    assert "r2" in res.stdout and "ValueError" in res.stdout
    assert "missing: no Flight Recorder dumps" in res.stdout
    page = (tmp_path / "r.html").read_text()
    _self_contained(page)
    assert "&lt;script&gt;x&lt;/script&gt;" in page
    assert "/job/data.py:40 in __next__" in page  # the culprit's stack
    assert not (remains / "findings.jsonl").exists()


def test_run_dir_merges_its_remains(tmp_path: Path) -> None:
    Scenario(slow_ranks=(2,), onset_step=50, severity=0.2).write(tmp_path)
    (tmp_path / "logs").mkdir()
    write_crash(tmp_path / "logs")
    shutil.move(tmp_path / "logs" / "torchelastic_abc", tmp_path / "torchelastic_abc")
    res = run_cli("triage", str(tmp_path), "--json", "--html", str(tmp_path / "r.html"))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    ids = [f["id"] for f in out["findings"]]
    assert "node-rank2" in ids and "crash-r2" in ids
    assert out["run"]["world_size"] == 4 and out["run"]["remains"]["num_logs"] == 1
    assert out["problems"] == []
    page = (tmp_path / "r.html").read_text()
    _self_contained(page)
    assert "<svg" in page and page.count("<rect") >= 4 * 100
    lines = (tmp_path / "findings.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ids


def test_empty_dir_is_one_line(tmp_path: Path) -> None:
    res = run_cli("triage", str(tmp_path), "--json")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diag triage: error:")
    assert str(tmp_path) in lines[0] and "nothing to triage" in lines[0]
