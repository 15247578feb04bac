"""The hook's crash file (:mod:`diag.hook.crash`) in real processes that abort or exit: every
thread's stack is written, the process still dies of its signal, a clean exit leaves nothing, and
a job that enabled faulthandler itself keeps it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from diag.postmortem.logs import parse_log

pytestmark = pytest.mark.integration


CRASHER = """
import os, sys, threading, time
from diag.hook.crash import CrashStacks
crash = CrashStacks(sys.argv[1], 3)
crash.enable()
print(crash.path, flush=True)
threading.Thread(target=lambda: time.sleep(60), daemon=True).start()
def fail_here():
    os.abort()
if sys.argv[2] == "abort":
    fail_here()
crash.disable(exiting=True)
"""


def _crasher(tmp_path: Path, how: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CRASHER, str(tmp_path / "crash"), how],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_hooks_crash_file_holds_every_threads_stack_and_the_process_still_dies(
    tmp_path: Path,
) -> None:
    res = _crasher(tmp_path, "abort")
    assert res.returncode == -6  # faulthandler lets the signal end the process as before
    (path,) = (tmp_path / "crash").iterdir()
    assert path.name.startswith("rank3.pid") and path.name == Path(res.stdout.strip()).name
    (clue,) = parse_log(path.read_text().splitlines(True), str(path), rank=3).clues
    assert clue.stack[-1].func == "fail_here" and "thread 0x" in clue.detail


def test_the_crash_file_goes_when_the_process_ends_cleanly_and_the_jobs_choice_wins(
    tmp_path: Path,
) -> None:
    assert _crasher(tmp_path, "exit").returncode == 0
    assert list((tmp_path / "crash").iterdir()) == []
    res = _crasher(tmp_path, "abort", PYTHONFAULTHANDLER="1")  # the job enabled it itself
    assert res.returncode == -6 and res.stdout.strip() == ""
    assert "Fatal Python error: Aborted" in res.stderr
    assert list((tmp_path / "crash").iterdir()) == []
