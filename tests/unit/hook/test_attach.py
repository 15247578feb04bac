""":func:`diag.hook.attach.start` in this process: attach, reuse, detach, bad spec."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path

from diag import schema
from diag.config import HookConfig
from diag.hook import attach as hook_attach
from diag.hook import core as hook
from tests.fakes.hook_sink import FrameSink, of_kind


def _spec(tmp_path: Path, daemon_sock: str = "", **extra: object) -> str:
    cfg = HookConfig(flush_interval_s=0.05, hang_min_s=0, daemon_sock=daemon_sock)
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
    assert not attached.thread.is_alive() and not attached.thread.sender.connected
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


def test_a_detach_is_not_an_exit_and_closes_the_connection(tmp_path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="dh"))  # AF_UNIX paths must stay short
    sink = FrameSink(short / "d.sock")
    sink.start()
    try:
        hook_attach.start(_spec(tmp_path, daemon_sock=sink.path))
        _state(tmp_path, "attached")
        (tmp_path / "stop").touch()
        _state(tmp_path, "detached")
        assert sink.peers_closed(timeout_s=1.0)  # the daemon connection ended with the detach
    finally:
        events = sink.close()
        shutil.rmtree(short, ignore_errors=True)
    health = of_kind(events, schema.HookHealth)
    assert health and not health[-1].final  # the job runs on: not "exited normally"
    assert health[-1].num_errors == 0, health[-1].last_error


def test_attach_arms_the_watchdog_for_a_rank_that_never_progresses(tmp_path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="dh"))
    sink = FrameSink(short / "d.sock")
    sink.start()
    spec = json.loads(_spec(tmp_path, daemon_sock=sink.path))
    spec["hook"]["hang_min_s"] = 0.3
    try:
        t0 = time.time_ns()
        hook_attach.start(json.dumps(spec))
        _state(tmp_path, "attached")
        deadline = time.monotonic() + 10
        while not of_kind(list(sink.events), schema.HangReport):  # no step, no collective ever
            assert time.monotonic() < deadline, "no HangReport"
            time.sleep(0.02)
        (tmp_path / "stop").touch()
        _state(tmp_path, "detached")
    finally:
        events = sink.close()
        shutil.rmtree(short, ignore_errors=True)
    (report,) = of_kind(events, schema.HangReport)
    assert report.stall_ns >= 0.3e9 and t0 <= report.stalled_since_ns  # measured from the attach
