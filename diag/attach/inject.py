"""Run a few lines of Python inside a running worker, without its cooperation.

On Python >= 3.14 (target and ``diag attach`` alike) through ``sys.remote_exec`` (PEP 768: the
interpreter runs the file at its next safe point); before, through ``hypno`` (``pip install
hypno``, which brings ``pyinjector``: it loads a small library into the target that runs the code
under the GIL). The injector's Python must be the target's version, which is checked first. Never
gdb's ``call``: on these machines it failed and crashed the target worker.

The injected code is only: put diag's package root on ``sys.path`` (appended: a diag the job
already imports wins), import :mod:`diag.hook.attach`, call ``start(<json>)``; everything else
happens in the target's own threads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diag
from diag.attach import AttachError

PACKAGE_ROOT = Path(diag.__file__).resolve().parent.parent
REMOTE_EXEC_MIN = (3, 14)


@dataclass(frozen=True, slots=True)
class Injector:
    """How code gets into processes of one Python version (``method``: remote_exec or hypno)."""

    method: str
    version: tuple[int, int]


def target_version(pid: int) -> tuple[int, int]:
    """The Python version of process ``pid``, asked of its own executable."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        raise AttachError(f"pid {pid}: vanished") from None
    except PermissionError:
        raise AttachError(f"pid {pid}: permission denied reading /proc/{pid}/exe") from None
    try:
        proc = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        major, minor = proc.stdout.strip().split(".")
        return int(major), int(minor)
    except (OSError, ValueError, subprocess.TimeoutExpired):
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
    """The code run inside the worker (a few lines; never raises into it)."""
    root = str(PACKAGE_ROOT)
    return (
        "import sys\n"
        "try:\n"
        f"    sys.path.append({root!r}) if {root!r} not in sys.path else None\n"
        "    import diag.hook.attach\n"
        f"    diag.hook.attach.start({json.dumps(spec)!r})\n"
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


def inject(injector: Injector, pid: int, code: str) -> None:
    """Run ``code`` in ``pid``; :class:`AttachError` (one line) when it cannot be done."""
    if gone(pid):
        raise AttachError(f"pid {pid}: vanished before the hook could be injected")
    try:
        if injector.method == "remote_exec":
            with tempfile.NamedTemporaryFile(
                "w", prefix="diag-attach-", suffix=".py", delete=False
            ) as f:
                f.write(code)
            os.chmod(f.name, 0o644)
            # The file is read by the target at its next safe point: left in place (tiny).
            sys.remote_exec(pid, f.name)  # type: ignore[attr-defined]
            return
        import hypno

        hypno.inject_py(pid, code)
    except AttachError:
        raise
    except Exception as exc:
        what = "vanished during injection" if gone(pid) else f"injection failed ({exc})"
        raise AttachError(f"pid {pid}: {what}".splitlines()[0]) from None
