"""Run probes on this process's device; under torchrun every rank runs and rank 0 gathers.

The device is ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU. Its id, the baseline key,
is the GPU's UUID or ``cpu <model name>`` (from ``/proc/cpuinfo``). Under torchrun (``WORLD_SIZE``
> 1 in the environment) a process group is initialized (NCCL on GPUs, gloo on CPU) and every rank
runs the same probes in the same order, so collective probes meet; :func:`gather` brings every
rank's ``(host, result)`` rows to rank 0.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from diag.errors import ConfigError
from probes import DEFAULT_PROBES, PROBES
from probes.base import ProbeContext, ProbeResult, run_guarded

Row = tuple[str, ProbeResult]


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def host_name() -> str:
    return os.environ.get("DIAG_HOST") or socket.gethostname()


def make_context(gpu_backend: Any = None) -> ProbeContext:
    """This process's probe context; initializes the process group under torchrun."""
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = f"cuda:{local}"
        torch.cuda.set_device(local)
        device_id = str(torch.cuda.get_device_properties(local).uuid)
    else:
        device, device_id = "cpu", f"cpu {cpu_model()}"
    distributed = world > 1
    if distributed:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if device != "cpu" else "gloo")
    return ProbeContext(
        device=device,
        device_id=device_id,
        host=host_name(),
        rank=rank,
        world_size=world,
        distributed=distributed,
        gpu_backend=gpu_backend,
    )


def check_names(names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        known = ", ".join(n for n in PROBES if n in DEFAULT_PROBES)
        raise ConfigError(f"unknown probe(s) {', '.join(unknown)}; known: {known}")
    pairs = [n for n in names if n not in DEFAULT_PROBES]
    if pairs:
        raise ConfigError(
            f"{', '.join(pairs)} runs between two hosts' node daemons (the analyzer's link probe "
            "round), not in preflight"
        )


def run_probes(
    names: Sequence[str],
    ctx: ProbeContext,
    params: dict[str, object] | None = None,
    on_done: Callable[[str, list[ProbeResult]], None] | None = None,
) -> list[Row]:
    """Run the named probes in order with their default parameters (or ``params[name]``)."""
    check_names(names)
    rows: list[Row] = []
    for name in names:
        probe = PROBES[name]()
        prm: Any = (params or {}).get(name) or probe.Params()
        results = run_guarded(probe, prm, ctx, float(prm.timeout_s))
        rows += [(ctx.host, r) for r in results]
        if on_done is not None:
            on_done(name, results)
    return rows


def gather(rows: list[Row], ctx: ProbeContext) -> list[Row]:
    """Every rank's rows on rank 0 (rank order); other ranks get ``[]``; one process: ``rows``."""
    if not ctx.distributed:
        return rows
    import torch.distributed as dist

    everything: list[list[Row] | None] = [None] * ctx.world_size if ctx.rank == 0 else []
    dist.gather_object(rows, everything if ctx.rank == 0 else None, dst=0)
    return [row for part in everything if part for row in part]
