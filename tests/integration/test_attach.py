"""``diag attach`` to real torchrun jobs started without diag (CPU, gloo).

- a 4-rank job with a slow rank, attached after it started, twice: each attach names the slow rank
  (node finding), leaves no diag thread behind in the workers, and the job exits 0;
- a 2-rank job with a rank stuck in its data loader, attached after it got stuck: the hang finding
  names that rank and its stack within seconds;
- a PID that is not a torchrun job, one that does not exist, and a worker that vanishes mid-attach:
  one line, exit 2, the other worker untouched.
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

from diag.selftest.workloads import HANG_JOB
from tests.fakes.diagproc import diag, env, torchrun

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        sys.version_info < (3, 14) and not importlib.util.find_spec("hypno"),
        reason="no injector: pip install hypno",
    ),
]


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as sink:
        return subprocess.Popen(cmd, env=env(), stdout=sink, stderr=subprocess.STDOUT)


def _wait_for(log: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {log}:\n{log.read_text()[-2000:]}")


def _newest_step(log: Path, rank: int) -> int:
    steps = re.findall(rf"rank {rank} step (\d+) ", log.read_text(errors="replace"))
    return max((int(s) for s in steps), default=-1)


def _findings(out: Path) -> list[dict]:
    try:
        lines = (out / "findings.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError):
        return []


def _workers(agent: int) -> list[int]:
    children = subprocess.run(["pgrep", "-P", str(agent)], capture_output=True, text=True)
    return [int(p) for p in children.stdout.split()]


def _threads(pid: int) -> str:
    spy = Path(sys.executable).parent / "py-spy"
    return subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True,
                          timeout=30).stdout  # fmt: skip


def test_attach_twice_to_a_slow_rank_job(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    # Steps enough for both attaches however busy the machine (500 ran out before the second
    # attach on a loaded one: busy CI run 72); the job is stopped at the end, after proving it
    # still steps once both have detached.
    job = _start(torchrun(4, "--steps", "100000", "--slow-rank", "2", "--slow-ms", "40",
                          "--slow-from-step", "0", "--print-every", "10"), log)  # fmt: skip
    try:
        _wait_for(log, "step 0 loss")
        for attempt in (1, 2):
            out = tmp_path / f"attach{attempt}"
            res = subprocess.run(
                # detach after 60 steps on every rank (a fixed time gives a loaded machine few)
                diag("attach", str(job.pid), "--steps", "60", "--duration", "60", "--out",
                     str(out), "--live", "off"),
                env=env(), capture_output=True, text=True, timeout=90,
            )  # fmt: skip
            assert res.returncode == 0, res.stderr
            assert "hooked ranks 0,1,2,3" in res.stderr
            node = [f for f in _findings(out) if f["id"] == "node-rank2"]
            assert node and node[0]["ranks"] == [2], _findings(out)
            for pid in _workers(job.pid):  # detached: no diag thread left in any worker
                stacks = _threads(pid)
                assert '"MainThread"' in stacks and '"diag-' not in stacks, stacks
        # never harmed: every rank steps on after both detached (a crash ends the job)
        after = {r: _newest_step(log, r) for r in range(4)}
        for r in range(4):
            _wait_for(log, f"rank {r} step {after[r] + 10} ", timeout_s=120)
        assert job.poll() is None, log.read_text(errors="replace")[-3000:]
    finally:
        if job.poll() is None:
            job.terminate()
            job.wait(timeout=60)


def test_attach_to_a_stuck_loader_names_the_rank(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    job = _start(torchrun(2, "--steps", "40", "--at-step", "3", "--stuck-loader-rank", "1",
                          "--timeout-s", "60", script=HANG_JOB), log)  # fmt: skip
    out = tmp_path / "attach"
    try:
        _wait_for(log, "FAULT rank 1 stuck-loader")
        time.sleep(1.0)  # stuck for good before the attach
        t0 = time.monotonic()
        proc = subprocess.Popen(
            diag("attach", str(job.pid), "--duration", "20", "--hang-min-s", "2",
                 "--out", str(out), "--live", "off"),
            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        hang: list[dict] = []
        while not hang and time.monotonic() - t0 < 20:
            hang = [f for f in _findings(out) if f["id"] == "hang"]
            time.sleep(0.25)
        first_s = time.monotonic() - t0
        print(f"hang finding {first_s:.1f} s after diag attach started")
        proc.send_signal(signal.SIGINT)  # Ctrl-C: detach
        assert proc.wait(timeout=30) == 0
        assert hang, f"no hang finding within 20 s: {_findings(out)}"
        assert first_s < 15, first_s
        f = hang[0]
        assert f["ranks"] == [1] and f["cause"] == "data", f
        assert "Samples.__getitem__" in json.dumps(f["evidence"]), f
        final = [f for f in _findings(out) if f["id"] == "hang"]
        assert final and final[0]["ranks"] == [1]
        assert job.poll() is None  # the job itself is left alone
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=60)


def _fake_job(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A process tree shaped like torchrun's (two children with a worker's environment)."""
    script = (
        "import os, subprocess, sys, time\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
        "        env={**os.environ, 'RANK': str(r), 'LOCAL_RANK': str(r),\n"
        "             'TORCHELASTIC_RUN_ID': 'fake'}) for r in (0, 1)]\n"
        "print('up', flush=True)\n"
        "time.sleep(120)\n"
    )
    log = tmp_path / "fake.log"
    proc = _start([sys.executable, "-c", script], log)
    _wait_for(log, "up")
    return proc


def test_attach_errors_are_one_line(tmp_path: Path) -> None:
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        res = subprocess.run(diag("attach", str(plain.pid), "--duration", "1"),
                             env=env(), capture_output=True, text=True, timeout=60)  # fmt: skip
        assert res.returncode == 2
        assert res.stderr.strip().count("\n") == 0 and "not a torchrun job" in res.stderr
        assert plain.poll() is None
    finally:
        plain.kill()
    plain.wait()
    res = subprocess.run(diag("attach", str(plain.pid)), env=env(), capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2 and "no such process" in res.stderr
    assert res.stderr.strip().count("\n") == 0


def test_a_worker_vanishing_mid_attach(tmp_path: Path) -> None:
    import argparse

    from diag.attach import AttachError, discover, inject
    from diag.cli import attach_cmd

    agent = _fake_job(tmp_path)
    try:
        workers = discover.find_workers(agent.pid)
        assert [w.rank for w in workers] == [0, 1]
        injector = inject.choose(inject.target_version(workers[0].pid))
        calls: list[int] = []

        def vanish_then_inject(inj: inject.Injector, pid: int, code: str) -> None:
            calls.append(pid)
            os.kill(pid, signal.SIGKILL)
            while discover.still_running(workers[0]):
                time.sleep(0.01)
            inject.inject(inj, pid, code)

        args = argparse.Namespace(analyzer=None, hang_min_s=None, duration=1.0, live="off")
        with pytest.raises(AttachError) as err:
            attach_cmd.attach(workers, injector, args, tmp_path / "out",
                              inject_fn=vanish_then_inject)  # fmt: skip
        assert "vanished" in str(err.value) and "\n" not in str(err.value)
        assert calls == [workers[0].pid]  # the other worker was never touched
        assert discover.still_running(workers[1])
    finally:
        for pid in _workers(agent.pid):
            os.kill(pid, signal.SIGKILL)
        agent.kill()
        agent.wait()
