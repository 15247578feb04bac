""":func:`diag.hook.attach.start` in this process: attach, reuse, detach, bad spec."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from diag.config import HookConfig
from diag.hook import attach as hook_attach
from diag.hook import core as hook


def _spec(tmp_path: Path, **extra: object) -> str:
    cfg = HookConfig(flush_interval_s=0.05, hang_min_s=0)
    return json.dumps(
        {
            "hook": dataclasses.asdict(cfg),
            "status": str(tmp_path / "status.json"),
            "stop_file": str(tmp_path / "stop"),
            "owner_pid": 0,
            "deadline": 0,
            **extra,
        }
    )


def _state(tmp_path: Path, want: str, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = json.loads((tmp_path / "status.json").read_text())
            if state["state"] == want:
                return state
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"no {want!r} status in {tmp_path}")


def test_attach_then_detach_releases_the_hook(tmp_path: Path) -> None:
    hook_attach.start(_spec(tmp_path))
    assert _state(tmp_path, "attached")
    attached = hook.installed()
    assert attached is not None and attached.active
    (tmp_path / "stop").touch()
    _state(tmp_path, "detached")
    assert hook.installed() is None and not attached.active
    assert not attached.thread.is_alive() and attached.thread.sender._sock is None
    (tmp_path / "stop").unlink()
    hook_attach.start(_spec(tmp_path))  # a second attach to the same process works again
    _state(tmp_path, "attached")
    (tmp_path / "stop").touch()
    _state(tmp_path, "detached")


def test_a_present_hook_is_reused_not_replaced(tmp_path: Path) -> None:
    present = hook.install(HookConfig(job_id="from-diag-run", hang_min_s=0))
    try:
        hook_attach.start(_spec(tmp_path))
        assert _state(tmp_path, "reused")["job_id"] == "from-diag-run"
        assert hook.installed() is present and present.active
    finally:
        hook.uninstall()


def test_a_bad_spec_is_a_status_never_an_exception(tmp_path: Path) -> None:
    spec = json.loads(_spec(tmp_path))
    spec["hook"]["no_such_field"] = 1
    hook_attach.start(json.dumps(spec))
    assert "no_such_field" in _state(tmp_path, "failed")["error"]
    assert hook.installed() is None
    hook_attach.start("not json")  # no status path: nothing to report, still no exception


def test_the_deadline_detaches(tmp_path: Path) -> None:
    hook_attach.start(_spec(tmp_path, deadline=time.time() + 0.3))
    _state(tmp_path, "attached")
    _state(tmp_path, "detached")
    assert hook.installed() is None
