"""``diag run`` of a real 2-rank torchrun job whose argv holds a non-UTF-8 byte and whose
checkpoints go to a non-UTF-8 path: no event is lost to it. Every step of every rank is stored,
the checkpoints and the command line arrive with the byte escaped, and every hook's final health
reports no drop and matches what the store holds."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from diag.store.run_store import RunStore
from tests.fakes.diagproc import diag, env, torchrun

pytestmark = pytest.mark.integration

STEPS = 8
SAVE_EVERY = 2


def test_a_non_utf8_argv_and_checkpoint_path_lose_no_event(tmp_path: Path) -> None:
    out = tmp_path / "run"
    ckpt_dir = tmp_path / os.fsdecode(b"ck\xff")  # the byte 0xff: not UTF-8
    ckpt_dir.mkdir()
    job = torchrun(
        2, "--steps", str(STEPS), "--save-every", str(SAVE_EVERY), "--ckpt-dir", str(ckpt_dir),
        "--hidden", "32", "--print-every", "1",
    )  # fmt: skip
    res = subprocess.run(
        diag("run", "--out", str(out), "--live", "off", "--", *job),
        env=env(), capture_output=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:].decode(errors="backslashreplace")
    escaped = str(tmp_path) + "/ck\\xff"
    store = RunStore.open(out)

    steps = store.frame("step")
    assert sorted(steps.groupby("rank")["step"].apply(sorted).to_dict().items()) == [
        (r, list(range(STEPS))) for r in (0, 1)
    ]
    ckpt = store.frame("checkpoint")
    saves = ckpt[(ckpt["op"] == "save") & (ckpt["rank"] == 0)]
    assert sorted(saves["path"]) == sorted(
        f"{escaped}/step{s}.pt" for s in range(SAVE_EVERY, STEPS + 1, SAVE_EVERY)
    )
    assert (saves["num_bytes"] > 0).all()
    infos = store.frame("rank_info")
    assert set(infos["rank"]) == {0, 1}
    assert all(f"--ckpt-dir '{escaped}'" in argv for argv in infos["argv"])  # shlex-quoted
    assert all(f"--ckpt-dir {escaped}" in cmd for cmd in store.frame("run")["command"])

    # Every event each hook emitted is stored: its final health says none was dropped, and its
    # count matches the store exactly; no hook went silent.
    health = store.frame("hook_health")
    final = health[health["final"]]
    assert sorted(final["rank"]) == [0, 1]
    assert (final["num_dropped"] == 0).all() and (final["num_errors"] == 0).all()
    for row in final.itertuples():
        stored = sum(
            int((store.frame(kind)["source"] == row.source).sum()) for kind in store.kinds()
        )
        assert stored == row.num_emitted
    assert "hook_silent" not in store.kinds()

    report = json.loads(
        subprocess.run(
            diag("report", str(out), "--json"), env=env(), capture_output=True, check=True,
        ).stdout
    )  # fmt: skip
    assert report["run"]["steps"] == STEPS and report["run"]["num_dropped"] == 0
    assert report["run"]["silent_ranks"] == []
