"""Run a few lines of Python inside a running worker, without its cooperation.

On Python >= 3.14 (target and ``diag attach`` alike) through ``sys.remote_exec`` (PEP 768: the
interpreter runs the file at its next safe point); before, through ``hypno`` (``pip install
hypno``, which brings ``pyinjector``: it stops one thread of the target with ptrace, makes it load
a small library whose constructor takes the GIL and runs the code). The injector's Python must be
the target's version, which is checked first. Never gdb's ``call``: on these machines it failed
and crashed the target worker.

Which thread hosts the code matters (hypno). The main thread of a training job is almost always
busy: stopped at an arbitrary instruction it may hold a lock the injected code needs again (the
allocator's, the GIL's own mutex, ``threading``'s thread-table lock), and the code then waits on
itself forever, with the training loop stopped under it (seen: one ``diag attach`` in ~25 hung
that way). So the code is hosted by an *idle* thread instead (:func:`host_thread`): one asleep in
an event loop, a sleep or a lock wait (gloo's, the store's and the intra-op pool's threads are),
which holds nothing the code needs; it takes the GIL like any thread, so the code runs where the
training thread released the GIL, a consistent point. The main thread hosts it only when no
other thread is asleep, and only while it sleeps itself.

The injector runs in a child process with a time limit: if the code does not return, ``diag
attach`` says so in one line instead of hanging. The child is not killed (a tracer that dies in
the middle of a remote call would leave the worker's thread on a breakpoint); it finishes on its
own, and a hook it starts late detaches at once (its ``diag attach`` is gone).

The injected code only starts a thread (:func:`payload`), which puts diag's package root on
``sys.path`` (appended: a diag the job already imports wins), imports :mod:`diag.hook.attach` and
calls ``start(<json>)``; everything else happens in the target's own threads.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diag
from diag.attach import AttachError

PACKAGE_ROOT = Path(diag.__file__).resolve().parent.parent
REMOTE_EXEC_MIN = (3, 14)
PROC = Path("/proc")
INJECT_TIMEOUT_S = 30.0  # the most the injected code may take to return (GIL wait + hook start)
HOST_SEARCH_S = 3.0  # the most spent looking for an idle thread before settling for less

# Blocking system calls of an idle thread, by machine: rank 0 = an event loop, a sleep or a
# socket wait (nothing waits on it), rank 1 = a futex (a lock or condition wait: a pool thread).
# x86_64: read, poll, select, nanosleep, accept, recvfrom, recvmsg, wait4, clock_nanosleep,
# epoll_wait, pselect6, ppoll, epoll_pwait, accept4, epoll_pwait2; futex. aarch64: epoll_pwait,
# read, pselect6, ppoll, nanosleep, clock_nanosleep, accept, recvfrom, recvmsg, accept4, wait4,
# epoll_pwait2; futex. Anything else (mmap, brk: maybe inside the allocator) is not idle.
_EVENT_LOOP, _LOCK_WAIT = 0, 1
_IDLE_SYSCALLS: dict[str, dict[int, int]] = {
    "x86_64": {
        **dict.fromkeys(
            (0, 7, 23, 35, 43, 45, 47, 61, 230, 232, 270, 271, 281, 288, 441), _EVENT_LOOP
        ),
        202: _LOCK_WAIT,
    },
    "aarch64": {
        **dict.fromkeys((22, 63, 72, 73, 101, 115, 202, 207, 212, 242, 260, 441), _EVENT_LOOP),
        98: _LOCK_WAIT,
    },
}

_HYPNO_CHILD = (
    "import sys\n"
    "try:\n"
    "    import hypno\n"
    "    hypno.inject_py(int(sys.argv[1]), sys.stdin.read())\n"
    "except Exception as exc:\n"
    "    print(f'{type(exc).__name__}: {exc}'.splitlines()[0], file=sys.stderr)\n"
    "    sys.exit(1)\n"
)


@dataclass(frozen=True, slots=True)
class Injector:
    """How code gets into processes of one Python version (``method``: remote_exec or hypno)."""

    method: str
    version: tuple[int, int]


#: What names a CPython version in a mapped file: ``libpython3.11.so``, an extension module's
#: ``.cpython-311-x86_64-linux-gnu.so`` (torch's ``_C`` in every job), ``python3.11`` itself.
_MAPPED_VERSION = (
    re.compile(r"libpython(\d+)\.(\d+)"),
    re.compile(r"\.cpython-(\d)(\d+)-"),
    re.compile(r"/python(\d+)\.(\d+)(?:/|$)"),
)
_EXE_VERSION = re.compile(r"python(\d+)\.(\d+)$")
#: The longest /proc/PID/maps read (a job maps a few thousand files: ~1 MB).
MAX_MAPS_BYTES = 16 << 20


def target_version(pid: int, proc_root: str = "/proc") -> tuple[int, int]:
    """The Python version of process ``pid``, read from what it has mapped (its libpython, its
    extension modules) or its executable's name; only when neither says, asked of its own
    executable in isolated mode without ``site`` (``-I -S``: no ``.pth`` file, no environment,
    none of the user's code runs) and, when diag runs as root, as the process's own user."""
    base = f"{proc_root}/{pid}"
    try:
        exe = os.readlink(f"{base}/exe")
    except FileNotFoundError:
        raise AttachError(f"pid {pid}: vanished") from None
    except PermissionError:
        raise AttachError(f"pid {pid}: permission denied reading {base}/exe") from None
    found = _version_from_maps(base) or _version_from_name(exe)
    if found is not None:
        return found
    return _ask_interpreter(pid, exe, base)


def _version_from_maps(base: str) -> tuple[int, int] | None:
    try:
        with open(f"{base}/maps", "rb") as fh:
            text = fh.read(MAX_MAPS_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    counts: dict[tuple[int, int], int] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        path = parts[5] if len(parts) == 6 else ""
        for pattern in _MAPPED_VERSION:
            m = pattern.search(path)
            if m:
                v = (int(m[1]), int(m[2]))
                counts[v] = counts.get(v, 0) + 1
                break
    if not counts:
        return None
    return max(counts, key=lambda v: counts[v])  # the interpreter's, not a stray library's


def _version_from_name(exe: str) -> tuple[int, int] | None:
    m = _EXE_VERSION.search(os.path.basename(exe))
    return (int(m[1]), int(m[2])) if m else None


def _ask_interpreter(pid: int, exe: str, base: str) -> tuple[int, int]:
    owner: dict[str, Any] = {}
    try:
        st = os.stat(base)
        if os.geteuid() == 0 and st.st_uid != 0:
            owner = {"user": st.st_uid, "group": st.st_gid, "extra_groups": []}
    except OSError:
        raise AttachError(f"pid {pid}: vanished") from None
    try:
        proc = subprocess.run(
            [exe, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=10, cwd="/", env={}, **owner,
        )  # fmt: skip
        major, minor = proc.stdout.strip().split(".")
        return int(major), int(minor)
    except (OSError, ValueError, subprocess.SubprocessError):
        raise AttachError(f"pid {pid}: {exe} is not a Python interpreter diag can ask") from None


def choose(version: tuple[int, int]) -> Injector:
    """The injector for targets of ``version``; :class:`AttachError` when none fits."""
    ours = sys.version_info[:2]
    if version != ours:
        raise AttachError(
            f"the job runs Python {version[0]}.{version[1]}, diag attach runs "
            f"{ours[0]}.{ours[1]}: run diag attach with the job's Python"
        )
    if version >= REMOTE_EXEC_MIN and hasattr(sys, "remote_exec"):
        return Injector("remote_exec", version)
    try:
        import hypno  # noqa: F401
    except ImportError:
        raise AttachError(
            "no injector: on Python < 3.14 diag attach needs hypno (pip install hypno)"
        ) from None
    return Injector("hypno", version)


def payload(spec: dict[str, Any]) -> str:
    """The code run inside the worker: one statement that starts a thread and returns.

    The host thread runs it inside the injector's ``dlopen``, holding the dynamic loader's lock:
    anything more there (an import of a C extension, a ``threading.Thread.start`` that waits for
    its thread) can wait on a thread that waits on that lock, and the worker hangs (seen: a hook
    thread started there never got the GIL). So the hook starts in its own thread, after the
    host returned; nothing is bound in the job's ``__main__``, and nothing raises into it."""
    root = str(PACKAGE_ROOT)
    body = (
        "try:\n"
        "    import sys\n"
        f"    sys.path.append({root!r}) if {root!r} not in sys.path else None\n"
        "    import diag.hook.attach\n"
        f"    diag.hook.attach.start({json.dumps(spec)!r})\n"
        "except BaseException:\n"
        "    pass\n"
    )
    return (
        "try:\n"
        "    __import__('_thread').start_new_thread(\n"
        f"        exec, (compile({body!r}, '<diag attach>', 'exec'), {{}}))\n"
        "except BaseException:\n"
        "    pass\n"
    )


def gone(pid: int) -> bool:
    """No process ``pid`` any more, or only its zombie (it exited; its parent has not reaped it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    state = stat[stat.rfind(")") + 2 :].split()[:1]
    return state in (["Z"], ["X"])


def idle_rank(pid: int, tid: int, proc_root: Path = PROC, machine: str = "") -> int | None:
    """How idle thread ``tid`` of ``pid`` is now: 0 asleep in an event loop, sleep or socket
    wait, 1 in a futex wait, None running, in another system call, or unreadable."""
    table = _IDLE_SYSCALLS.get(machine or platform.machine(), {})
    try:
        fields = (proc_root / str(pid) / "task" / str(tid) / "syscall").read_text().split()
        return table.get(int(fields[0])) if len(fields) > 1 else None  # "running", or "-1 sp pc"
    except (OSError, ValueError, IndexError):
        return None


def host_thread(
    pid: int,
    *,
    proc_root: Path = PROC,
    machine: str = "",
    search_s: float = HOST_SEARCH_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """The thread of ``pid`` to host injected code: a thread other than the main one that stays
    asleep across two looks (an event loop or sleep preferred to a lock wait); failing that
    within ``search_s``, the main thread while it sleeps; failing that, the main thread."""
    deadline = clock() + search_s
    while True:
        try:
            tids = sorted(int(t) for t in os.listdir(proc_root / str(pid) / "task"))
        except (OSError, ValueError):
            return pid  # gone or unreadable: the injection says which
        first = {t: idle_rank(pid, t, proc_root, machine) for t in tids}
        sleep(0.01)
        again = {t: idle_rank(pid, t, proc_root, machine) for t in tids}
        idle = {t: rank for t, rank in again.items() if rank is not None and first[t] is not None}
        others = sorted((rank, t) for t, rank in idle.items() if t != pid)
        if others:
            return others[0][1]
        if clock() >= deadline or (pid in idle and clock() >= deadline - search_s / 2):
            return pid
        sleep(0.05)


def inject(injector: Injector, pid: int, code: str) -> None:
    """Run ``code`` in ``pid``; :class:`AttachError` (one line) when it cannot be done."""
    if gone(pid):
        raise AttachError(f"pid {pid}: vanished before the hook could be injected")
    if injector.method == "remote_exec":
        try:
            with tempfile.NamedTemporaryFile(
                "w", prefix="diag-attach-", suffix=".py", delete=False
            ) as f:
                f.write(code)
            os.chmod(f.name, 0o644)
            # The file is read by the target at its next safe point: left in place (tiny).
            sys.remote_exec(pid, f.name)  # type: ignore[attr-defined]
            return
        except Exception as exc:
            raise _failed(pid, str(exc)) from None
    for attempt in range(3):
        try:
            inject_thread(pid, host_thread(pid), code)
            return
        except AttachError as exc:
            # the chosen thread ended before the injector reached it (a short-lived thread)
            if attempt == 2 or gone(pid) or "No such process" not in str(exc):
                raise


def inject_thread(pid: int, tid: int, code: str, timeout_s: float = INJECT_TIMEOUT_S) -> None:
    """Run ``code`` with hypno in thread ``tid`` of ``pid`` (an injector child process, at most
    ``timeout_s``); :class:`AttachError` (one line) when it fails or does not return."""
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HYPNO_CHILD, str(tid)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a Ctrl-C of diag attach must not reach a tracer mid-call
        )
    except OSError as exc:
        raise AttachError(f"pid {pid}: cannot start the injector ({exc})") from None
    try:
        _, err = proc.communicate(code, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AttachError(
            f"pid {pid}: the injected code did not return within {timeout_s:.0f} s (thread "
            f"{tid}); the injector is left to finish on its own, and a hook it starts late "
            "detaches at once"
        ) from None
    if proc.returncode != 0:
        lines = (err or "").strip().splitlines()
        raise _failed(pid, lines[-1] if lines else f"injector exited {proc.returncode}")


def _failed(pid: int, why: str) -> AttachError:
    what = "vanished during injection" if gone(pid) else f"injection failed ({why})"
    return AttachError(f"pid {pid}: {what}".splitlines()[0])
