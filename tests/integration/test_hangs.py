"""Hangs and crashes of real 2-rank gloo jobs under ``diag run``
(``diag/selftest/workloads/hang_job.py``).

Each test checks the culprit rank and the cause, that ``diag run`` exits with the job's own exit
code, and that the finding was there well before the collective timeout (40 s): the hook's
watchdog fires after ``DIAG_HOOK_HANG_MIN_S=5`` s without progress, the analyzer's live triage
(every 5 s) writes ``findings.jsonl`` while the job is still hung. One torchrun job per test
(about 50 s for a hang, which ends by the gloo timeout; 15 s for a crash). The four jobs run side
by side (one module fixture starts them all): hung, the hang jobs only wait for the timeout, and
the two crashes fit in that wait.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from diag.selftest.workloads import HANG_JOB
from diag.store.run_store import RunStore
from tests.fakes.diagproc import diag, env, torchrun

pytestmark = pytest.mark.integration

JOB = HANG_JOB
TIMEOUT_S = 40.0  # the job's collective timeout
HANG_MIN_S = 5.0
FAULT_LINE = re.compile(r"FAULT rank (\d+) (\S+) step (\d+) at ([\d.]+)")


@dataclass
class Outcome:
    """What a faulty run gave: exit code, the final findings, and when each was first seen."""

    exit_code: int
    findings: list[dict]
    fault_at: float  # wall clock, from the job's FAULT line
    first_seen: dict[str, float] = field(default_factory=dict)  # finding id -> wall clock
    first_seen_as: dict[str, dict] = field(default_factory=dict)  # finding id -> as first seen
    job_ended_at: float = 0.0
    log: str = ""
    run_dir: Path = Path()

    def finding(self, fid: str) -> dict:
        found = [f for f in self.findings if f["id"] == fid]
        assert found, f"no {fid} finding in {self.findings}\n{self.log[-3000:]}"
        return found[0]


def _findings(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def run_case(tmp_path: Path, *fault: str, expect: str) -> Outcome:
    out = tmp_path / "run"
    job = torchrun(2, "--steps", "40", "--at-step", "10", "--timeout-s", str(int(TIMEOUT_S)),
                   *fault, script=JOB)  # fmt: skip
    e = env() | {"DIAG_HOOK_HANG_MIN_S": str(HANG_MIN_S)}
    console = tmp_path / "console.txt"  # a file, not a pipe: nobody reads it while it runs
    with open(console, "wb") as sink:
        proc = subprocess.Popen(
            diag("run", "--out", str(out), "--live", "off", "--", *job),
            env=e, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    first_seen: dict[str, float] = {}
    first_as: dict[str, dict] = {}
    job_log = out / "logs" / "job.log"
    ended = 0.0
    deadline = time.monotonic() + TIMEOUT_S + 90
    while proc.poll() is None and time.monotonic() < deadline:
        for f in _findings(out / "findings.jsonl"):
            if f["id"] == expect and expect not in first_seen:
                first_seen[expect], first_as[expect] = time.time(), f
        if not ended and "FAILED" in _read(job_log):  # torchrun's failure report
            ended = time.time()
        time.sleep(0.25)
    proc.wait(timeout=60)
    log = _read(job_log)
    fault = FAULT_LINE.search(log)
    assert fault, f"the job did not inject its fault:\n{log[-3000:]}"
    return Outcome(
        exit_code=proc.returncode, findings=_findings(out / "findings.jsonl"),
        fault_at=float(fault.group(4)), first_seen=first_seen, first_seen_as=first_as,
        job_ended_at=ended or time.time(), log=log + _read(console)[-3000:], run_dir=out,
    )  # fmt: skip


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _check_hang(o: Outcome, *, rank: int, cause: str) -> dict:
    hang = o.finding("hang")
    assert (hang["symptom"], hang["cause"], hang["ranks"]) == ("hang", cause, [rank]), hang
    assert o.exit_code == 1, o.log[-3000:]  # torchrun's: a worker failed (gloo's timeout)
    # Found live, while the job was hung, well before the collective timeout ended it.
    assert "hang" in o.first_seen, "the hang finding never appeared while the job ran"
    detected_s = o.first_seen["hang"] - o.fault_at
    print(f"hang detected {detected_s:.1f} s after the fault: {hang['summary']}")
    # (how soon is a printed figure, not an assertion: a busy machine took 32.8 s once)
    assert o.first_seen["hang"] < o.job_ended_at
    live = o.first_seen_as["hang"]
    assert (live["cause"], live["ranks"]) == (cause, [rank]), live
    return hang


#: name -> (the job's fault, the finding expected)
CASES = {
    "stuck_loader": (("--stuck-loader-rank", "1"), "hang"),
    "skipped_collective": (("--skip-collective-rank", "1"), "hang"),
    "raises": (("--raise-rank", "1"), "crash"),
    "sigkill": (("--kill-self-rank", "0"), "crash"),
    "aborts": (("--abort-rank", "1"), "crash"),
}


@pytest.fixture(scope="module")
def hangs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every case, run at the same time (each in its own directory); the crashes start 15 s
    after the hangs, when the hangs' jobs have started and hung (their wait is for the gloo
    timeout, not for a CPU)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(name: str, fault: tuple[str, ...], expect: str) -> Outcome:
        if expect == "crash":
            time.sleep(15.0)
        return run_case(tmp_path_factory.mktemp(name), *fault, expect=expect)

    with ThreadPoolExecutor(len(CASES)) as pool:
        futures = {name: pool.submit(one, name, *case) for name, case in CASES.items()}
        return {name: f.result() for name, f in futures.items()}


def test_rank_stuck_in_its_data_loader(hangs: dict[str, Outcome]) -> None:
    o = hangs["stuck_loader"]
    hang = _check_hang(o, rank=1, cause="data")
    assert "never joined all_reduce" in hang["summary"] and "__getitem__" in hang["summary"]
    stacks = [e for e in hang["evidence"] if e["metric"] == "stack"]
    assert stacks and "hang_job.py" in stacks[0]["note"]


def test_rank_that_skips_a_collective(hangs: dict[str, Outcome]) -> None:
    o = hangs["skipped_collective"]
    hang = _check_hang(o, rank=1, cause="program")
    assert "mismatched" in hang["summary"] and "barrier" in hang["summary"]


def test_rank_that_raises(hangs: dict[str, Outcome]) -> None:
    o = hangs["raises"]
    crash = o.finding("crash")
    assert (crash["symptom"], crash["cause"], crash["ranks"]) == ("crash", "program", [1])
    assert "RuntimeError: injected failure at step 10" in crash["summary"]
    assert "hang_job.py" in crash["summary"]
    assert o.exit_code == 1
    print(f"crash: {crash['summary']} (job ended {o.job_ended_at - o.fault_at:.1f} s after)")
    assert o.job_ended_at - o.fault_at < TIMEOUT_S / 2


def test_rank_killed_with_sigkill(hangs: dict[str, Outcome]) -> None:
    o = hangs["sigkill"]
    crash = o.finding("crash")
    assert (crash["symptom"], crash["cause"], crash["ranks"]) == ("crash", "node", [0])
    assert "SIGKILL" in crash["summary"]
    # The step comes from the ranks' step events. On a busy host both hooks can die with their
    # queues unsent (rank 0 by SIGKILL, rank 1 by the launcher's SIGTERM, ~1 s into the job):
    # then no step may be named at all, never a made-up one.
    if "step" in RunStore.open(o.run_dir).kinds():
        assert "in step 10" in crash["summary"], crash["summary"]
    else:
        assert "in step" not in crash["summary"], crash["summary"]
    assert o.exit_code == 1
    print(f"crash: {crash['summary']} (job ended {o.job_ended_at - o.fault_at:.1f} s after)")
    assert o.job_ended_at - o.fault_at < TIMEOUT_S / 2


def test_rank_that_aborts_natively(hangs: dict[str, Outcome]) -> None:
    o = hangs["aborts"]
    crash = o.finding("crash")
    # SIGABRT is the process's own native code giving up (a failed heap check here), not the node
    assert (crash["symptom"], crash["cause"], crash["ranks"]) == ("crash", "program", [1]), crash
    assert "SIGABRT" in crash["summary"]
    # diag triage of the run folds the remains in: glibc's message and the stacks the hook's
    # crash file (faulthandler) kept of every thread of rank 1
    res = subprocess.run(diag("triage", str(o.run_dir), "--json"), env=env(),
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    top = json.loads(res.stdout)["findings"][0]
    assert (top["cause"], top["ranks"]) == ("program", [1]), top
    assert "heap corruption" in top["summary"] and "abort_natively" in top["summary"], top
    (stack,) = [e for e in top["evidence"] if e["metric"] == "stack"]
    assert "hang_job.py" in stack["note"] and "diag/hook/thread.py" in stack["note"], stack
