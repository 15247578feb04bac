"""Run a fault case as a real torchrun job under ``diag run`` and return its findings.

The job is :mod:`diag.selftest.workloads.train_ddp` (DDP on gloo, CPU) with the case's fault sized
by ``--severity`` (the job measures its own step time before the onset, see its docstring) and a
clean run's ordinary irregularities in every case: two warm-up steps with extra compute on every
rank, an evaluation pass every 25 steps, a checkpoint save every 20 steps (every 10 in checkpoint
cases) and a profiler window every 10 steps from step 10 (so the kernel detector sees windows
before and after an onset).

Faults, by cause: ``node`` extra compute on the culprit; ``structural`` the same from step 6
(sized on steps 1-5, there from the detectors' first analysed steps: no onset to find); ``data``
the culprit's loader stalls; ``kernel`` the operator ``diagfault::scale_input`` takes longer on
the culprit; ``checkpoint`` rank 0's saves stall inside ``torch.save``. ``link`` needs hosts
joined by a rate-limited link: :func:`run_case` hands it to :func:`diag.selftest.link.run_link_case`
(two network namespaces as nodes, root only; :class:`Unsupported` where they are unavailable).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from diag.errors import DiagError
from diag.findings import Finding
from diag.selftest.cases import CLEAN, Case, Unsupported
from diag.selftest.workloads import TRAIN_DDP

KERNEL = "diagfault::scale_input"
STRUCTURAL_FROM = 6
PROFILE_EVERY = 10


def job_args(case: Case, ckpt_dir: Path) -> list[str]:
    """The training script's arguments for ``case``."""
    save_every = 10 if case.cause == "checkpoint" else 20
    args = [
        "--steps", str(case.steps), "--seed", str(case.seed), "--print-every", "20",
        "--hidden", "512", "--batch", "64",
        "--warmup-steps", "2", "--warmup-ms", "30", "--eval-every", "25",
        "--save-every", str(save_every), "--ckpt-dir", str(ckpt_dir),
    ]  # fmt: skip
    if case.cause == CLEAN:
        return args
    args += ["--severity", str(case.severity)]
    rank = str(case.ranks[0]) if case.ranks else "1"
    onset = str(case.onset_step)
    match case.cause:
        case "node":
            args += ["--slow-rank", rank, "--slow-from-step", onset]
        case "structural":
            args += ["--slow-rank", rank, "--slow-from-step", str(STRUCTURAL_FROM)]
        case "data":
            args += ["--data-stall-rank", rank, "--data-stall-from-step", onset]
        case "kernel":
            args += ["--slow-kernel-rank", rank, "--slow-kernel-from-step", onset]
        case "checkpoint":
            args += ["--slow-ckpt-from-step", onset]
        case _:
            raise Unsupported(f"a {case.cause} fault cannot be injected into a single-node job")
    return args


def prepare(case: Case) -> Case:
    """The case as this runner injects it (the kernel it slows down); :class:`Unsupported` for
    a cause a single-node job cannot have (a link)."""
    if case.cause == "link":
        raise Unsupported("a link fault needs two hosts: see diag.selftest.link")
    return replace(case, kernel=KERNEL) if case.cause == "kernel" else case


def run_local_case(
    case: Case, workdir: Path, *, timeout_s: float = 600.0
) -> tuple[Case, list[Finding]]:
    """Run ``case`` under ``diag run`` on this node in ``workdir`` (its run directory is
    ``workdir/run``) and return the prepared case and ``diag triage``'s findings, ranked."""
    from diag.diagnose.triage import triage
    from diag.store.run_store import RunStore

    case = prepare(case)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "ckpt").mkdir(exist_ok=True)
    out = workdir / "run"
    job = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(case.world_size), str(TRAIN_DDP),
        *job_args(case, workdir / "ckpt"),
    ]  # fmt: skip
    env = dict(os.environ)
    env["DIAG_HOOK_PROFILE_FIRST_STEP"] = str(PROFILE_EVERY)
    env["DIAG_HOOK_PROFILE_EVERY_STEPS"] = str(PROFILE_EVERY)
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "diag.cli.main", "run", "--out", str(out), "--live", "off"]
    res = subprocess.run(
        [*cmd, "--", *job], env=env, capture_output=True, text=True, timeout=timeout_s
    )
    (workdir / "diag-run.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DiagError(f"{case.name}: the job exited {res.returncode}: {tail[0]}")
    return case, list(triage(RunStore.open(out)).findings)
