"""The real training jobs diag's self-test, demo and integration tests run under torchrun (by path,
so each is a plain script): ``train_ddp.py`` (DDP on gloo with injectable faults: slow rank,
loader, storage, kernel, numerics), ``pipeline_job.py`` (pipeline x data parallel on gloo, with
its own process groups, p2p microbatches and layout-shaped faults) and ``hang_job.py`` (hangs and
crashes on purpose)."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
#: The demo and fault-suite job (see its docstring for the faults it injects).
TRAIN_DDP = _HERE / "train_ddp.py"
#: The pipeline-parallel x data-parallel job (stages, replicas, faults: see its docstring).
PIPELINE_JOB = _HERE / "pipeline_job.py"
#: The job that hangs (stuck loader, skipped collective) or fails (raise, SIGKILL) on purpose.
HANG_JOB = _HERE / "hang_job.py"
