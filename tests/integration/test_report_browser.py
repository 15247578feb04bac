"""``diag report --html`` in a real headless browser (Chromium, where installed: Debian's
``chromium`` package; skipped otherwise): the page renders every figure with no network."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fakes.diagproc import diag, env
from tests.fakes.scenarios import Scenario

BROWSER = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(BROWSER is None, reason="no headless browser (apt install chromium)"),
]


def test_the_report_page_renders_offline(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    Scenario(slow_ranks=(2,), onset_step=40, severity=0.3, steps=80).write(run_dir)
    page = tmp_path / "report.html"
    res = subprocess.run(diag("report", str(run_dir), "--html", str(page)), env=env(),
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert BROWSER is not None
    dom = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
         "--proxy-server=127.0.0.1:9", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    # plotly draws each figure as an SVG of class main-svg inside its div
    for div in ("step-heatmap", "compute-heatmap", "step-line", "phases"):
        start = dom.find(f'id="{div}"')
        assert start >= 0, div
        assert "main-svg" in dom[start : start + 200_000], f"{div} was not drawn"
