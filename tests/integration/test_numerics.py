"""Numerics faults in real torchrun jobs under ``diag run`` (the demo job, gloo, CPU).

- A NaN in one module's output on one rank at step S: ``drift:nonfinite`` at step S naming that
  rank and the module (the hook replays the step at once, before the gradient all-reduce spreads
  the NaN to every replica).
- One flipped bit in one replica's parameter after step S, parameter checksums every K steps:
  ``drift:replica`` naming that rank at the first fingerprint after the flip (within K steps).
- A clean job: no drift finding at all, every fingerprint equal across the replicas.

One torchrun launch per test (about 10 s each on two cores); numerics every 5 steps.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from diag.store.run_store import RunStore
from tests.fakes.diagproc import diag, env, torchrun

pytestmark = pytest.mark.integration

EVERY = 5


def run_job(tmp_path: Path, nproc: int, *job_args: str) -> tuple[Path, list[dict[str, Any]], str]:
    out = tmp_path / "run"
    e = env() | {"DIAG_HOOK_NUMERICS_EVERY": str(EVERY), "DIAG_HOOK_FINGERPRINT_EVERY": str(EVERY)}
    job = torchrun(nproc, "--print-every", "1000", *job_args)
    res = subprocess.run(
        diag("run", "--out", str(out), "--live", "off", "--", *job),
        env=e, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    triage = subprocess.run(
        diag("triage", str(out), "--json"), env=env(), capture_output=True, text=True, check=True
    )
    return out, json.loads(triage.stdout)["findings"], res.stdout


def drift(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f["symptom"] == "drift"]


def show(findings: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{f['id']} {f['cause']} ranks={f['ranks']} onset={f['onset_step']}: {f['summary']}"
        for f in findings
    )


def test_nan_in_a_module_is_named_with_its_rank_and_step(tmp_path: Path) -> None:
    out, findings, _ = run_job(
        tmp_path, 4, "--steps", "30", "--save-every", "0",
        "--nan-rank", "2", "--nan-step", "12", "--nan-module", "body.2",
    )  # fmt: skip
    got = drift(findings)
    assert [f["id"] for f in got] == ["drift:nonfinite"], show(findings)  # no replica finding
    f = got[0]
    assert (f["ranks"], f["onset_step"], f["detected_step"]) == ([2], 12, 12), show(got)
    assert f["severity"] == "critical" and f["cause"] == "kernel", show(got)
    assert "body.2's output" in f["summary"] and "ranks 0, 1, 3 followed" in f["summary"]
    assert f["evidence"][0]["subject"] == "rank 2 step 12: body.2 output"
    assert findings[0]["id"] == "drift:nonfinite"  # the top finding of the run
    # After the NaN reached every replica through the all-reduce, they still agree bitwise.
    fp = RunStore.open(out).frame("fingerprint")
    assert (fp.groupby("step")["checksum"].nunique() == 1).all() and len(fp) == 6 * 4


def test_one_flipped_bit_names_the_replica_within_one_interval(tmp_path: Path) -> None:
    flip = 12
    _, findings, stdout = run_job(
        tmp_path, 4, "--steps", "30", "--bitflip-rank", "1", "--bitflip-step", str(flip),
    )  # fmt: skip
    assert f"rank 1 fault: flipped bit 20 of body.2.weight[32768] after step {flip}" in stdout
    got = drift(findings)
    assert [f["id"] for f in got] == ["drift:replica"], show(findings)  # silent in the loss
    f = got[0]
    assert (f["ranks"], f["cause"], f["severity"]) == ([1], "node", "critical"), show(got)
    assert flip < f["detected_step"] <= flip + EVERY, show(got)
    assert f["onset_step"] <= flip + 1 and "silent data corruption suspected" in f["summary"]


def test_clean_job_has_no_drift_and_equal_replicas(tmp_path: Path) -> None:
    out, findings, _ = run_job(tmp_path, 3, "--steps", "30")
    assert drift(findings) == [], show(findings)
    store = RunStore.open(out)
    fp = store.frame("fingerprint")
    assert len(fp) == 6 * 3 and (fp.groupby("step")["checksum"].nunique() == 1).all()
    assert (fp["num_params_sampled"] == fp["num_params_total"]).all()
    samples = store.frame("numerics")
    assert len(samples) == 6 * 3 and (samples["num_nonfinite_grads"] == 0).all()
    assert store.frame("nonfinite").empty
