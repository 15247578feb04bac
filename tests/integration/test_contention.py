"""A foreign process competing for one rank's CPU, in a real 4-rank job: ``diag triage`` says
``node`` on that rank, with the hog named (pid, command line, CPU share, the CPU it ran on).

The ranks are pinned (rank 2 alone on CPU 1, the others on CPU 0: ``tests/fakes/pinned_worker``);
when the job reaches step 40 a loop pinned to CPU 1 starts at real-time priority, taking ~90% of
the core from its first cycle (:mod:`tests.fakes.cpu_hog`: why a plain busy loop hardly slows a
torchrun worker, and why a heavier autogroup was no steady competitor), and runs to the end.
Before the fix the job got slower and nothing was reported (the run-queue delay that singled
rank 2 out was subtracted from its compute). Once under ``diag run``, once under ``diag
attach``. A CPU-bound neighbour on the machine contends the other ranks too: a finding that
names it (a process outside the job) is true and allowed, even above the hog's. Every failure
says what the hog took and each rank's delay, compute and wait before and after it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.store.run_store import RunStore
from tests.fakes import cpu_hog
from tests.fakes.diagproc import diag, env, torchrun
from tests.fakes.paths import REPO

pytestmark = pytest.mark.integration

PINNED = REPO / "tests" / "fakes" / "pinned_worker.py"
ARGS = ("--hidden", "512", "--batch", "64", "--print-every", "10")
#: diag attach: steps under the hook before the hog (the onset's baseline) and after it.
STEPS_BEFORE, STEPS_AFTER = 40, 80


@pytest.fixture(autouse=True)
def _hog_possible() -> None:
    """Skip where the hog cannot run; asked when a test runs, not when the suite is collected
    (the question starts a process: not in a unit-test run that only collects this module)."""
    reason = cpu_hog.unavailable_reason()
    if reason:
        pytest.skip(reason)


def _env() -> dict[str, str]:
    return env() | {"DIAG_TEST_PIN": "0:0,1:0,2:1,3:0"}


def _wait_for(log: Path, text: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in {log}:\n{log.read_text()[-2000:]}")


def _newest_step(log: Path) -> int:
    """The newest step rank 0 printed (every 10 steps), -1 before any."""
    found = re.findall(r"^rank 0 step (\d+) ", log.read_text(errors="replace"), re.MULTILINE)
    return int(found[-1]) if found else -1


def _wait_for_step(log: Path, step: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _newest_step(log) >= step:
            return
        time.sleep(0.1)
    raise AssertionError(f"rank 0 did not reach step {step} in {log}:\n{log.read_text()[-2000:]}")


def _triage(run_dir: Path) -> list[dict]:
    res = subprocess.run(diag("triage", str(run_dir), "--json"), env=env(), capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["findings"]


def _hog_step(run_dir: Path, started_ns: int) -> int:
    """The first step rank 2 finished after the hog started."""
    steps = RunStore.open(run_dir).frame("step")
    after = steps[(steps["rank"] == 2) & (steps["end_ns"] > started_ns)]
    return int(after["step"].min())


def _step_end(run_dir: Path, step: int) -> int:
    """When rank 2 finished ``step`` (wall-clock ns)."""
    steps = RunStore.open(run_dir).frame("step")
    return int(steps[(steps["rank"] == 2) & (steps["step"] == step)]["end_ns"].min())


def _hog_cpu_s(pid: int) -> float:
    """CPU seconds the hog has used (``/proc/<pid>/stat`` utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop_hog(hog: subprocess.Popen[str], started_ns: int) -> str:
    """Kill the hog; what it took of its core (a failure's first question: did it compete?)."""
    try:
        used = _hog_cpu_s(hog.pid)
        took = f"the hog used {used:.1f} CPU s in {(time.time_ns() - started_ns) / 1e9:.1f} s"
    except (OSError, IndexError, ValueError) as exc:
        took = f"the hog's CPU time unread ({exc})"
    hog.kill()
    hog.wait()
    return took


def _figures(run_dir: Path, started_ns: int) -> str:
    """Per rank, before and after the hog: steps recorded, mean run-queue delay, mean compute,
    median collective wait (ms); what a failure needs to tell a missed hog from a weak one."""
    steps = RunStore.open(run_dir).frame("step")
    lines = []
    after = steps["end_ns"] > started_ns
    for when, rows in (("before", ~after), ("after", after)):
        g = steps[rows].groupby("rank")
        lines.append(
            f"{when} the hog: steps {g['step'].count().to_dict()} cpu_wait "
            f"{(g['cpu_wait_ns'].mean() / 1e6).round(1).to_dict()} compute "
            f"{(g['compute_ns'].mean() / 1e6).round(1).to_dict()} wait "
            f"{(g['collective_wait_ns'].median() / 1e6).round(1).to_dict()}"
        )
    return "\n".join(lines)


def _check(run_dir: Path, hog_pid: int, started_ns: int, took: str = "") -> None:
    findings = _triage(run_dir)
    shown = "\n".join(
        [f"{f['cause']} {f['severity']} {f['ranks']}: {f['summary']}" for f in findings]
        + [took, _figures(run_dir, started_ns)]
    )
    assert findings, f"no finding\n{shown}"
    # A CPU-bound neighbour on the machine (another job, a test runner) contends the ranks it
    # shares a CPU with: a contention finding naming a process outside the job is true, and may
    # rank above the hog's; every other finding must come after the hog's.
    hogged = [i for i, f in enumerate(findings) if (f["cause"], f["ranks"]) == ("node", [2])]
    assert hogged, shown
    ahead = [f for f in findings[: hogged[0]] if not _foreign_process(f, hog_pid)]
    assert not ahead, shown
    top = findings[hogged[0]]
    # The onset is where rank 2's delay stood out: on this 2-core VM the scheduler keeps moving
    # the other sessions' work about for a while, so it can trail the hog by a few seconds
    # (seen: 1.4 s, 33 steps of this job, with a busy loop beside it).
    at = _hog_step(run_dir, started_ns)
    assert top["onset_step"] is not None and at - 3 <= top["onset_step"], (at, shown)
    trail_s = (_step_end(run_dir, top["onset_step"]) - started_ns) / 1e9
    assert trail_s <= 3.0, (at, trail_s, shown)
    named = [e for e in top["evidence"] if e["metric"] == "host_process_cpu_pct"]
    hog = [e for e in named if e["subject"].startswith(f"pid {hog_pid} ")]
    assert hog and "CPU 1" in hog[0]["note"], json.dumps(top["evidence"], indent=1)
    assert f"pid {hog_pid}" in top["summary"], top["summary"]
    # no other slowdown diagnosis at warning or above (a drift finding is another question):
    # contention on the ranks of CPU 0 is not the hog's echo (CI: rank 0 waited 5.9 ms/step
    # against 0.8 on ranks 1 and 3 from step 16, before the hog, and no process took 10% of a
    # core: true, measured, and said so after the hog's finding)
    others = [
        f
        for f in findings
        if f is not top
        and f["severity"] != "info"
        and f["symptom"] == "slowdown"
        and not _foreign_process(f, hog_pid)
        and not _off_the_hogs_cpu(f, hog_pid)
        and not _before_the_hog_elsewhere(f, at)
    ]
    assert not others, shown


def _before_the_hog_elsewhere(f: dict, hog_step: int) -> bool:
    """A finding on ranks other than rank 2 that began before the hog (from the start: no onset)
    is this VM's condition, not the hog's echo (quiet CI: rank 0, on CPU 0 with rank 1 and diag's
    own processes, waited 8.2 ms/step longer for data than its peers from the start, a true
    ``data`` warning; the old code named it the same). An echo of the hog begins with it."""
    onset = f["onset_step"]
    return 2 not in f["ranks"] and (onset is None or onset < hog_step - 3)


def _foreign_process(f: dict, hog_pid: int) -> bool:
    """Contention naming a process outside the job, not the test's hog, on the ranks' CPU."""
    return str(f["id"]).startswith("contention-") and any(
        e["metric"] == "host_process_cpu_pct"
        and "a CPU the culprit ran on" in e["note"]
        and not e["subject"].startswith(f"pid {hog_pid} ")
        for e in f["evidence"]
    )


def _off_the_hogs_cpu(f: dict, hog_pid: int) -> bool:
    """Contention of ranks pinned to CPU 0 (not rank 2, the hog not named), its run-queue delay
    above its peers' in its own evidence: the busy machine's work on CPU 0, not the hog's."""
    waits = [e for e in f["evidence"] if e["metric"] == "cpu_wait_ms"]
    return (
        str(f["id"]).startswith("contention-")
        and 2 not in f["ranks"]
        and f"pid {hog_pid}" not in f["summary"]
        and bool(waits)
        and all(e["value"] > (e["reference"] or 0.0) for e in waits)
    )


def test_a_hog_on_one_rank_cpu_under_diag_run(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "job.log"
    # 40 steps before the hog and STEPS_AFTER with it, as under diag attach: 120 steps after it
    # ran out of 300 s in busy CI run 91 (rank 2 gets a few % of its core, the busy neighbour
    # and the suite's other work took the rest); the wait allows 7 s a step
    job_cmd = torchrun(4, "--steps", str(STEPS_BEFORE + STEPS_AFTER), *ARGS, script=PINNED)
    with open(log, "wb") as sink:
        job = subprocess.Popen(diag("run", "--out", str(run_dir), "--live", "off", "--", *job_cmd),
                               env=_env(), stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    hog, took = None, ""
    try:
        _wait_for(log, f"rank 0 step {STEPS_BEFORE} ")
        hog, started_ns = cpu_hog.start_hog(cpu=1), time.time_ns()
        assert job.wait(timeout=7 * STEPS_AFTER) == 0, log.read_text()[-2000:]
    finally:
        if hog is not None:
            took = _stop_hog(hog, started_ns)
        if job.poll() is None:
            job.kill()
    _check(run_dir, hog.pid, started_ns, took)


def test_a_hog_on_one_rank_cpu_under_diag_attach(tmp_path: Path) -> None:
    if sys.version_info < (3, 14) and not importlib.util.find_spec("hypno"):
        pytest.skip("no injector: pip install hypno")
    out, log, err_log = tmp_path / "attach", tmp_path / "job.log", tmp_path / "attach.err"
    with open(log, "wb") as sink:
        job = subprocess.Popen(torchrun(4, "--steps", "100000", *ARGS, script=PINNED),
                               env=_env(), stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    hog = attach = None
    took = ""
    try:
        _wait_for(log, "rank 0 step 0 ")
        with open(err_log, "wb") as err:
            attach = subprocess.Popen(
                diag("attach", str(job.pid), "--duration", "240", "--out", str(out), "--live",
                     "off"),
                env=env(), stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        # Counted in steps from when every worker is hooked, not in seconds: on a loaded
        # machine the job runs slower, and a fixed time gave too few steps (seen: 52 in 18 s,
        # and a rank hooked 3 s after the first had no steps before the hog).
        _wait_for(err_log, "diag attach: hooked ranks")
        _wait_for_step(log, _newest_step(log) + STEPS_BEFORE)  # the onset's baseline
        hog, started_ns = cpu_hog.start_hog(cpu=1), time.time_ns()
        _wait_for_step(log, _newest_step(log) + STEPS_AFTER, timeout_s=240)
        # The hog goes before the detach: with it, rank 2 got a few % of its core and diag
        # attach, at nice 19 for its live triage, took over 120 s to detach (busy CI run 111,
        # a CPU-bound neighbour besides); the diagnosis is of the STEPS_AFTER steps above.
        took = _stop_hog(hog, started_ns)
        attach.send_signal(signal.SIGTERM)  # detach (as Ctrl-C does)
        assert attach.wait(timeout=180) == 0, err_log.read_text()
    finally:
        if attach is not None and attach.poll() is None:
            attach.kill()
            attach.wait()
        if hog is not None and hog.poll() is None:
            hog.kill()
            hog.wait()
        job.terminate()
        job.wait(timeout=60)
    _check(out, hog.pid, started_ns, took)
