"""``diag attach``'s injector for this interpreter: chosen for its version, which a new process of
the target's own executable reports; the thread that hosts the injected code in a busy process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from diag.attach import inject

pytestmark = pytest.mark.integration


def test_this_python_gets_an_injector() -> None:
    ours = sys.version_info[:2]
    expected = "remote_exec" if hasattr(sys, "remote_exec") else "hypno"
    if expected == "hypno":
        pytest.importorskip("hypno")
    assert inject.choose(ours).method == expected
    assert inject.target_version(os.getpid()) == ours


def test_a_real_process_gets_a_sleeping_thread_as_host() -> None:
    script = (
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "print('up', flush=True)\n"
        "while True:\n"
        "    sum(range(1000))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        host = inject.host_thread(proc.pid)
        assert host != proc.pid
        assert inject.idle_rank(proc.pid, host) == 0  # asleep in clock_nanosleep
    finally:
        proc.kill()
        proc.wait()
