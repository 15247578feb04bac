"""The hook as ``diag attach`` installs it, for ``bench/overhead.py --attach``.

With ``--attach`` the base tier's process group is created without the hook (the Flight Recorder
keeps torch's default size, as in a job started without diag), and each "on" block installs the
hook through :func:`diag.hook.attach.start` (the entry point the injected code calls) and ends
with the attach's detach (the stop file; the hook's watcher thread uninstalls it).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from diag.config import HookConfig
from diag.hook import attach as hook_attach


class Attacher:
    """Attach and detach the hook in this process, as an injected worker would."""

    def __init__(self, cfg: HookConfig, tmp: str) -> None:
        self.status = Path(tmp) / "attach-status.json"
        self.stop_file = Path(tmp) / "attach-stop"
        self.spec = {
            "hook": dataclasses.asdict(cfg),
            "status": str(self.status),
            "stop_file": str(self.stop_file),
            "owner_pid": 0,
            "deadline": 0,
        }

    def _wait(self, state: str, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if json.loads(self.status.read_text())["state"] == state:
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.01)
        raise RuntimeError(f"hook_attach did not reach {state!r}")

    def attach(self, cfg: HookConfig | None = None) -> None:
        """Attach with the hook configuration given at construction, or ``cfg``."""
        self.stop_file.unlink(missing_ok=True)
        self.status.unlink(missing_ok=True)
        spec = self.spec if cfg is None else {**self.spec, "hook": dataclasses.asdict(cfg)}
        hook_attach.start(json.dumps(spec))
        self._wait("attached")

    def detach(self) -> None:
        self.stop_file.touch()
        self._wait("detached")
