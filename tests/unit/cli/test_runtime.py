"""The launcher's pieces of ``diag run`` that need no job: flags, worker env, run events."""

from __future__ import annotations

import json
from pathlib import Path

from diag.cli import runtime


def test_run_event_reads_torchrun_shape() -> None:
    launcher = runtime.Launcher(host="h", job_id="j")
    cmd = ["torchrun", "--nnodes=2", "--nproc-per-node", "4", "x.py", "--nnodes", "9"]
    ev = runtime.run_event(launcher, "start", command=cmd)
    assert (ev.nnodes, ev.nproc_per_node, ev.phase, ev.seq) == (2, 4, "start", 0)
    assert ev.source.startswith("h/launcher/")
    assert runtime.run_event(launcher, "end", command=cmd, exit_code=3).seq == 1


def test_worker_env_puts_the_hook_first_and_keeps_user_path() -> None:
    env = runtime.worker_env({"PYTHONPATH": "/user/lib"}, daemon_sock="/tmp/s", job_id="j")
    parts = env["PYTHONPATH"].split(":")
    assert parts[0].endswith("diag/hook/inject") and parts[-1] == "/user/lib"
    assert (env["DIAG_HOOK"], env["DIAG_HOOK_DAEMON_SOCK"], env["DIAG_HOOK_JOB_ID"]) == (
        "1", "/tmp/s", "j",
    )  # fmt: skip


def test_run_json_is_merged(tmp_path: Path) -> None:
    runtime.write_run_json(tmp_path, run_id="a", command=["x"])
    runtime.write_run_json(tmp_path, exit_code=3)
    assert json.loads((tmp_path / "run.json").read_text()) == {
        "run_id": "a", "command": ["x"], "exit_code": 3,
    }  # fmt: skip
