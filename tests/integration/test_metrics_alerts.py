"""Prometheus metrics and alerts of a live ``diag run``: a real 4-rank job, scraped while it runs.

Both endpoints are scraped over HTTP during the job (the node daemon's: step phases per rank with
``job``/``host``/``rank`` labels; the analyzer's: the finding and the straggler scores), the alert
command receives the finding once, and both endpoints are gone when ``diag run`` has exited.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fakes.diagproc import diag, env, torchrun
from tests.fakes.scrape import scrape

pytestmark = pytest.mark.integration

URL = re.compile(r"diag: (node|job) metrics on (http://\S+)")


def test_a_live_run_is_scraped_and_its_finding_alerted(tmp_path: Path) -> None:
    out, alerts, texts = tmp_path / "run", tmp_path / "alerts.jsonl", tmp_path / "texts.txt"
    command = f"cat >> {alerts}; echo >> {alerts}; printf '%s\\n' \"$DIAG_ALERT_TEXT\" >> {texts}"
    job = torchrun(4, "--steps", "100000", "--slow-rank", "2", "--slow-ms", "40",
                   "--slow-from-step", "0", "--print-every", "50")  # fmt: skip
    proc = subprocess.Popen(
        diag("run", "--out", str(out), "--live", "off", "--metrics-port", "0",
             "--triage-interval", "1", "--alert-command", command, "--", *job),
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    urls: dict[str, str] = {}
    err: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if m := URL.search(line):
                urls[m.group(1)] = m.group(2)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    node: dict = {}
    job_metrics: dict = {}
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1.0)
            if len(urls) < 2:
                continue
            node, job_metrics = scrape(urls["node"]), scrape(urls["job"])
            counts = node.get("diag_step_seconds_count", [])
            found = [lab for lab, v in job_metrics.get("diag_findings", []) if v > 0]
            if len(counts) == 4 and min(v for _, v in counts) >= 20 and found and alerts.exists():
                break
        assert len(urls) == 2, "".join(err)[-3000:]
    finally:
        proc.terminate()  # Ctrl-C-like: diag run stops the job and writes its report
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(10)

    counts = node["diag_step_seconds_count"]
    assert sorted(lab["rank"] for lab, _ in counts) == ["0", "1", "2", "3"]
    assert {lab["job_id"] for lab, _ in counts} == {out.name}
    assert all(set(lab) == {"job_id", "host", "rank"} for lab, _ in counts)
    compute = {lab["rank"]: v for lab, v in node["diag_compute_seconds_sum"]}
    steps = {lab["rank"]: v for lab, v in counts}
    per_step = {r: compute[r] / steps[r] for r in compute}
    assert max(per_step, key=per_step.__getitem__) == "2"  # the slow rank computes longest
    assert "diag_hook_events_emitted_total" in node

    # One finding at warning or above, the slow rank's; a busy machine's own load may add an
    # info one (contention "from the start" is info at most: busy CI, ("node", "info") beside it)
    live = [(lab["cause"], lab["severity"]) for lab, v in job_metrics["diag_findings"] if v]
    shown = job_metrics.get("diag_finding_confidence", [])
    assert {lab["job_id"] for lab, v in job_metrics["diag_findings"] if v} == {out.name}, shown
    assert [c for c, s in live if s != "info"] == ["node"], shown
    assert any(lab["id"] == "node-rank2" and lab["ranks"] == "2" for lab, _ in shown), shown
    scores = {lab["rank"]: v for lab, v in job_metrics["diag_rank_straggler_score"]}
    assert max(scores, key=scores.__getitem__) == "2" and scores["2"] > 1.2
    assert job_metrics["diag_ingest_events_total"][0][1] > 0

    sent = [json.loads(line) for line in alerts.read_text().splitlines() if line.strip()]
    node_alerts = [a for a in sent if a["alert"]["finding_id"] == "node-rank2"]
    assert len(node_alerts) == 1, sent  # new once, never repeated while it stays
    assert node_alerts[0]["findings"][0]["ranks"] == [2]
    assert any("node finding" in t and "rank 2" in t for t in texts.read_text().splitlines())
    for url in urls.values():  # diag run is gone: so are its endpoints
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url, timeout=5)
