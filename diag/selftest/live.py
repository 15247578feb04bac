"""Run a fault case as a real torchrun job under ``diag run`` and return its findings.

The job is :mod:`diag.selftest.workloads.train_ddp` (DDP on gloo, CPU) with the case's fault sized
by ``--severity`` (the job measures its own step time before the onset, see its docstring) and a
clean run's ordinary irregularities in every case: two warm-up steps with extra compute on every
rank, an evaluation pass every 25 steps, a checkpoint save every 20 steps (every 10 in checkpoint
cases) and a profiler window every 10 steps from step 10 (so the kernel detector sees windows
before and after an onset).

Faults, by cause (the tuning mechanisms; :mod:`diag.selftest.mechanisms` has the others):
``node`` extra compute on the culprit; ``structural`` every replica of one stage of the pipeline
job (:mod:`diag.selftest.workloads.pipeline_job`) doing more work from the start; ``data``
the culprit's loader stalls; ``kernel`` the operator ``diagfault::scale_input`` takes longer on
the culprit; ``checkpoint`` rank 0's saves stall inside ``torch.save``. ``link`` needs hosts
joined by a rate-limited link: :func:`run_case` hands it to :func:`diag.selftest.link.run_link_case`
(two network namespaces as nodes, root only; :class:`Unsupported` where they are unavailable).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from diag.attach.discover import find_workers
from diag.errors import DiagError
from diag.findings import Finding
from diag.selftest.cases import CLEAN, Case, Unsupported
from diag.selftest.mechanisms import Actor, mechanism_of
from diag.selftest.workloads import PIPELINE_JOB, TRAIN_DDP

KERNEL = "diagfault::scale_input"
POLL_S = 0.05
_STEP_LINE = re.compile(rb"rank (\d+) step (\d+) loss")
PROFILE_EVERY = 10


def job_args(case: Case, ckpt_dir: Path) -> list[str]:
    """The training script's arguments for ``case``: the common ones, then the fault's (its
    cause's tuning injector unless its mechanism replaces it, and the mechanism's own)."""
    mech = mechanism_of(case)
    if mech is not None and mech.workload == "pipeline":
        return mech.job_args(case)  # the pipeline job's own arguments, fault included
    args = _common_args(case, ckpt_dir)
    if case.cause == CLEAN:
        return args
    args += ["--severity", str(case.severity)]
    if mech is None or not mech.replaces_base:
        args += _base_args(case)
    if mech is not None:
        args += mech.job_args(case)
        if mech.actor is not None:
            args += ["--print-every", "1"]  # the runner follows every step to act at the onset
    return args


def _common_args(case: Case, ckpt_dir: Path) -> list[str]:
    save_every = 10 if case.cause == "checkpoint" else 20
    args = [
        "--steps", str(case.steps), "--seed", str(case.seed), "--print-every", "20",
        "--hidden", "512", "--batch", "64",
        "--warmup-steps", "2", "--warmup-ms", "30", "--eval-every", "25",
        "--save-every", str(save_every), "--ckpt-dir", str(ckpt_dir),
    ]  # fmt: skip
    return args


def _base_args(case: Case) -> list[str]:
    """The cause's tuning injector (:data:`~diag.selftest.mechanisms.DEFAULT_MECHANISM`)."""
    args: list[str] = []
    rank = str(case.ranks[0]) if case.ranks else "1"
    onset = str(case.onset_step)
    match case.cause:
        case "node":
            args += ["--slow-rank", rank, "--slow-from-step", onset]
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
    """The case as this runner injects it (the kernel it slows down, the culprits its mechanism
    makes); :class:`Unsupported` for a cause a single-node job cannot have (a link)."""
    if case.cause == "link":
        raise Unsupported("a link fault needs two hosts: see diag.selftest.link")
    mech = mechanism_of(case)
    if case.cause == "kernel" and (mech is None or not mech.replaces_base):
        case = replace(case, kernel=KERNEL)
    return case if mech is None else mech.prepare(case)


def run_local_case(
    case: Case,
    workdir: Path,
    *,
    timeout_s: float = 600.0,
    profile: tuple[int, int] = (PROFILE_EVERY, PROFILE_EVERY),
    diag_args: Sequence[str] = (),
    stop_when: Callable[[Path], bool] | None = None,
) -> tuple[Case, list[Finding]]:
    """Run ``case`` under ``diag run`` on this node in ``workdir`` (its run directory is
    ``workdir/run``) and return the prepared case and ``diag triage``'s findings, ranked.
    ``profile``: the periodic profiler windows' first step and period; ``diag_args``: more
    ``diag run`` options (``--auto-capture off``); ``stop_when(run_dir)``: once true, the job
    ends early (at the same step on every rank; ``case.steps`` is then the cap)."""
    from diag.diagnose.triage import triage
    from diag.store.run_store import RunStore

    case = prepare(case)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "ckpt").mkdir(exist_ok=True)
    out = workdir / "run"
    job = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(case.world_size), str(_script(case)),
        *job_args(case, workdir / "ckpt"),
    ]  # fmt: skip
    stop = workdir / "stop"
    if stop_when is not None:  # train_ddp ends once the file exists
        job += ["--stop-file", str(stop)]
    env = dict(os.environ)
    env["DIAG_HOOK_PROFILE_FIRST_STEP"] = str(profile[0])
    env["DIAG_HOOK_PROFILE_EVERY_STEPS"] = str(profile[1])
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable, "-m", "diag.cli.main", "run", "--out", str(out), "--live", "off",
        *diag_args,
    ]  # fmt: skip
    mech = mechanism_of(case)
    actor = mech.actor(case) if mech is not None and mech.actor is not None else None
    log = workdir / "diag-run.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([*cmd, "--", *job], env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        code = _follow(
            proc, case, actor, out / "logs" / "job.log", time.monotonic() + timeout_s,
            stop=None if stop_when is None else (lambda: stop_when(out), stop),
        )  # fmt: skip
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if actor is not None:
            actor.stop()
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise DiagError(f"{case.name}: the job exited {code}: {tail[0]}")
    return case, list(triage(RunStore.open(out)).findings)


def _script(case: Case) -> Path:
    mech = mechanism_of(case)
    return PIPELINE_JOB if mech is not None and mech.workload == "pipeline" else TRAIN_DDP


def _follow(
    proc: subprocess.Popen[bytes],
    case: Case,
    actor: Actor | None,
    job_log: Path,
    deadline: float,
    stop: tuple[Callable[[], bool], Path] | None = None,
) -> int:
    """Wait for ``diag run`` to end; with an actor, start it once every rank finished a step
    and apply its fault once step ``onset - 1`` is done; with ``stop`` (a condition, the job's
    stop file), create the file once the condition holds. The job's exit code."""
    steps = StepLines(job_log)
    started = applied = actor is None
    while proc.poll() is None:
        if time.monotonic() > deadline:
            raise DiagError(f"{case.name}: the job did not finish in time")
        time.sleep(POLL_S)
        if stop is not None and not stop[1].exists() and stop[0]():
            stop[1].touch()
        if started and applied:
            continue
        assert actor is not None
        done = steps.poll()
        if not started and len(steps.ranks) == case.world_size:
            workers = find_workers(proc.pid)
            actor.at_start({w.rank: w.pid for w in workers})
            started = True
        onset = case.onset_step if case.onset_step is not None else 2
        if started and not applied and done >= onset - 1:
            actor.at_onset()
            applied = True
    return int(proc.returncode)


class StepLines:
    """The job's ``rank R step S`` lines as they appear in its log: the newest step every rank
    finished, and the ranks seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._rest = b""
        self.steps: dict[int, int] = {}  # rank -> newest step printed
        self.ranks: set[int] = set()

    def poll(self) -> int:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = self._rest + fh.read()
                self._offset = fh.tell()
        except OSError:
            return -1
        *lines, self._rest = data.split(b"\n")
        for line in lines:
            m = _STEP_LINE.search(line)
            if m:
                rank, step = int(m[1]), int(m[2])
                self.ranks.add(rank)
                self.steps[rank] = max(step, self.steps.get(rank, -1))
        return min(self.steps.values()) if self.steps else -1
