"""``diag attach`` to a healthy 4-rank job, detach, ``diag triage RUN_DIR``: the collectives the
hooks saw in flight at the detach are a running job's, not a hang (no evidence progress stopped).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.diagproc import diag, env, torchrun

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        sys.version_info < (3, 14) and not importlib.util.find_spec("hypno"),
        reason="no injector: pip install hypno",
    ),
]


def _wait_for(log: Path, text: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {log}:\n{log.read_text()[-2000:]}")


def test_a_detached_healthy_job_is_not_a_hang(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    with open(log, "wb") as sink:
        job = subprocess.Popen(
            torchrun(4, "--steps", "100000", "--print-every", "50"),
            env=env(), stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    out = tmp_path / "attach"
    try:
        _wait_for(log, "step 0 loss")
        res = subprocess.run(
            diag("attach", str(job.pid), "--duration", "6", "--out", str(out), "--live", "off"),
            env=env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert job.poll() is None  # still training after the detach
        res = subprocess.run(diag("triage", str(out), "--json"), env=env(), capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert res.returncode == 0, res.stderr
        findings = json.loads(res.stdout)["findings"]
        stored = subprocess.run(
            [sys.executable, "-c", "import sys; from diag.store.run_store import RunStore; "
             "c = RunStore.open(sys.argv[1]).frame('collective'); "
             "print(int((c['state'] != 'completed').sum()))", str(out)],
            env=env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        in_flight = int(stored.stdout.strip() or 0)
        hangs = [f for f in findings if f["symptom"] == "hang"]
        assert not hangs, f"{in_flight} entries in flight; {json.dumps(hangs)[:2000]}"
    finally:
        job.terminate()
        job.wait(timeout=60)
