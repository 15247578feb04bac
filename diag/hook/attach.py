"""The entry point ``diag attach`` injects into a running worker: start the hook, detach later.

Runs in a thread of its own that the injected code started (:func:`diag.attach.inject.payload`),
never in the thread the injector stopped, so it may import and start threads freely; it never
raises: it installs the hook (torch is already imported, the patches are a few attribute swaps),
starts one watcher thread and writes one status file, all in milliseconds. Rules:

- A hook already present (the worker started under ``diag run``, or another ``diag attach`` is
  attached) is reused, never installed twice; this attach will not uninstall it either.
- The hang watchdog is armed at once (:meth:`Hook.arm_watchdog`): a worker that is already stuck
  makes no progress after the attach, yet finding it is what attaching is for (the stall is
  measured from the attach).
- Detach (:meth:`Hook.detach`): the watcher uninstalls the hook (patches restored, optimizer hooks
  removed, profiler window closed, final flush, hook thread stopped, daemon connection closed) as
  soon as the stop file exists, the attaching process is gone or the deadline passed; then it
  ends. It is not an exit: the last health report does not say ``final``. The job runs on
  untouched; only diag's imported modules stay in ``sys.modules``.

Only the hook's public API is used: :func:`~diag.hook.core.install`,
:func:`~diag.hook.core.installed`, :meth:`Hook.arm_watchdog`, :meth:`Hook.detach`.

The status file (JSON, replaced whole: :func:`diag.fsutil.atomic_write`) says ``state``:
``attached``, ``reused``, ``failed`` (with ``error``), then ``detached``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from diag.fsutil import atomic_write

if TYPE_CHECKING:
    from diag.hook.core import Hook

POLL_S = 0.2


def _write_status(path: str, **fields: Any) -> None:
    if not path:
        return
    with contextlib.suppress(OSError):
        atomic_write(path, json.dumps({"pid": os.getpid(), **fields}))


def _should_stop(stop_file: str, owner_pid: int, deadline: float) -> bool:
    if stop_file and os.path.exists(stop_file):
        return True
    if deadline and time.time() >= deadline:
        return True
    if owner_pid:
        try:
            os.kill(owner_pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            pass
    return False


def _watch(hook: Hook, status: str, stop_file: str, owner_pid: int, deadline: float) -> None:
    while not _should_stop(stop_file, owner_pid, deadline):
        time.sleep(POLL_S)
        if not hook.active:  # uninstalled by someone else (the job itself)
            break
    hook.detach()  # a no-op if the job uninstalled it
    _write_status(status, state="detached")


def start(spec_json: str) -> None:
    """Install the hook with the config in ``spec_json`` (``{"hook": {...HookConfig fields},
    "status": path, "stop_file": path, "owner_pid": int, "deadline": unix seconds or 0}``)."""
    status = ""
    try:
        spec = json.loads(spec_json)
        status = str(spec.get("status", ""))
        from diag.config import HookConfig
        from diag.hook import core as hook_mod

        present = hook_mod.installed()
        if present is not None and present.active:
            _write_status(status, state="reused", job_id=present.cfg.job_id)
            return
        hook = hook_mod.install(HookConfig(**spec["hook"]))
        hook.arm_watchdog()
        threading.Thread(
            target=_watch,
            args=(
                hook,
                status,
                str(spec.get("stop_file", "")),
                int(spec.get("owner_pid", 0)),
                float(spec.get("deadline", 0)),
            ),
            name="diag-attach-watch",
            daemon=True,
        ).start()
        _write_status(status, state="attached")
    except BaseException as exc:  # never into the job
        _write_status(status, state="failed", error=f"{type(exc).__name__}: {exc}"[:300])
