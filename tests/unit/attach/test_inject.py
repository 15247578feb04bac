"""The injected code, the host thread and the injector choice, without touching another process
(a real interpreter's version and a real process's idle thread: the integration tests,
tests/integration/test_attach_inject.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from diag.attach import AttachError, inject


def test_payload_returns_at_once_and_starts_the_hook_in_a_thread_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The injected code runs where the injector stopped a thread (inside its dlopen): it only
    starts a thread, binds nothing in the namespace it runs in, and that thread calls start."""
    import diag.hook.attach

    calls: list[tuple[str, bool]] = []
    done = threading.Event()

    def start(spec: str) -> None:
        time.sleep(0.3)
        calls.append((spec, threading.current_thread() is threading.main_thread()))
        done.set()

    monkeypatch.setattr(diag.hook.attach, "start", start)
    code = inject.payload({"hook": {"job_id": "x'y\\"}, "status": "/tmp/s.json"})
    assert len(code) < 4096
    namespace: dict[str, object] = {}
    t0 = time.monotonic()
    exec(compile(code, "<injected>", "exec"), namespace)
    took = time.monotonic() - t0
    assert done.wait(10)
    assert took < 0.25 and set(namespace) == {"__builtins__"}  # start() sleeps 0.3 s elsewhere
    [(spec, on_main)] = calls
    assert json.loads(spec)["hook"]["job_id"] == "x'y\\" and on_main is False


def _fake_proc(root: Path, pid: int, threads: dict[int, str]) -> Path:
    for tid, syscall in threads.items():
        task = root / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "syscall").write_text(syscall + "\n")
    return root


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_the_host_thread_is_an_idle_one_not_the_busy_main_thread(tmp_path: Path) -> None:
    futex, epoll = (
        "202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f00",
        "232 0x3 0x7f 0x40 0x1 0 0 0x1 0x2",
    )
    root = _fake_proc(tmp_path, 10, {10: "running", 11: futex, 12: epoll, 13: "9 0 0 0 0 0 0 1 2"})
    clock = _Clock()
    host = inject.host_thread(10, proc_root=root, machine="x86_64", clock=clock, sleep=clock.sleep)
    assert host == 12 and clock.now < 0.1  # an event loop before a lock wait; mmap (9) is not idle
    (root / "10" / "task" / "12").rename(root / "10" / "task" / "99")
    (root / "10" / "task" / "99" / "syscall").write_text("running\n")
    assert inject.host_thread(10, proc_root=root, machine="x86_64", clock=clock,
                              sleep=clock.sleep) == 11  # fmt: skip


def test_the_main_thread_hosts_only_when_no_other_thread_sleeps(tmp_path: Path) -> None:
    root = _fake_proc(tmp_path, 10, {10: "230 0 0 0 0 0 0 1 2", 11: "running"})
    clock = _Clock()
    assert inject.host_thread(10, proc_root=root, machine="x86_64", search_s=3.0, clock=clock,
                              sleep=clock.sleep) == 10  # fmt: skip
    assert clock.now >= 1.5  # the other threads were given half the search first
    (root / "10" / "task" / "10" / "syscall").write_text("running\n")
    clock.now = 0.0
    assert inject.host_thread(10, proc_root=root, machine="x86_64", search_s=3.0, clock=clock,
                              sleep=clock.sleep) == 10  # fmt: skip
    assert clock.now >= 3.0
    assert inject.host_thread(77, proc_root=root, machine="x86_64") == 77  # gone: its own pid


def test_a_version_mismatch_is_one_line() -> None:
    with pytest.raises(AttachError, match=r"the job runs Python 2\.7, diag attach runs"):
        inject.choose((2, 7))


def test_gone_and_missing_processes() -> None:
    assert not inject.gone(os.getpid())
    assert inject.gone(2**22 + 7)
    with pytest.raises(AttachError, match="vanished"):
        inject.inject(inject.Injector("hypno", sys.version_info[:2]), 2**22 + 7, "pass")
