"""The probe contract: typed parameters in, one or more :class:`ProbeResult` out, never a raise.

A probe measures one property of a device or link (GEMM GFLOP/s, memory GB/s, ...). Rules:

- ``run(params, ctx)`` returns results whose ``status`` is one of :data:`STATUSES`: ``ok`` (a
  measured ``value`` in ``unit``), ``unsupported`` (meaningless here: no CUDA, no NVML, one
  process where ranks are needed; ``detail`` says why), ``timeout`` (``params.timeout_s``
  passed), ``failed`` (an exception; ``detail`` is its one-line message, never a traceback).
- Parameters are a frozen dataclass per probe, validated in ``__post_init__`` (a ``ValueError``
  names the field); they are never shell strings.
- ``value`` is a higher-is-better rate unless ``lower_is_better`` says otherwise (latency).
- Timed values are the best of ``repeats`` timed runs after one warm-up: slow-downs from other load
  only ever lower a rate, so the best run is the stablest estimate of what the device can do, and a
  device confined for the whole probe (a throttled GPU, a CPU quota) is slow in every run.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

STATUSES = ("ok", "unsupported", "timeout", "failed")

# What one probe request may cost, whoever sends it (its ``Params`` check these):
MAX_SIZE_MIB = 4096  # one buffer
MAX_BYTES = 4 << 30  # the operands of one call
MAX_FLOP = 1 << 43  # one call (2 x 16384^3: milliseconds on a GPU, seconds on a CPU)
MAX_DIM = 65536
MAX_SHAPES = 16
MAX_THREADS = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeContext:
    """Where a probe runs: the torch device, this process's rank and world (1 without torchrun),
    the host name, and the GPU telemetry backend (``None``: no NVML)."""

    device: str = "cpu"
    device_id: str = "cpu"
    host: str = ""
    rank: int = 0
    world_size: int = 1
    distributed: bool = False
    gpu_backend: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResult:
    """One measurement. ``device`` names what was measured (a GPU UUID, ``cpu <model>``, a rank
    pair ``r0@host<->r1@host``); ``metric`` which quantity of the probe (``float32 1024x1024x1024``,
    ``all_reduce 16 MiB``); the pair (probe, metric) keys baselines."""

    probe: str
    device: str
    status: str
    metric: str = ""
    value: float | None = None
    unit: str = ""
    detail: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    lower_is_better: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown probe status {self.status!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "device": self.device,
            "status": self.status,
            "metric": self.metric,
            "value": None if self.value is None else round(self.value, 6),
            "unit": self.unit,
            "detail": self.detail,
            "params": self.params,
        }


class Probe(Protocol):
    """A probe: its registry ``name``, its ``Params`` dataclass and ``run``."""

    name: ClassVar[str]
    Params: ClassVar[type]

    def run(self, params: Any, ctx: ProbeContext) -> list[ProbeResult]: ...


def params_dict(params: object) -> dict[str, Any]:
    """``params`` (a dataclass) as plain JSON values."""
    out = dataclasses.asdict(params)  # type: ignore[call-overload]
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def unsupported(probe: str, ctx: ProbeContext, why: str, params: object) -> list[ProbeResult]:
    return [
        ProbeResult(
            probe=probe,
            device=ctx.device_id,
            status="unsupported",
            detail=why,
            params=params_dict(params),
        )
    ]


def run_guarded(
    probe: Probe, params: object, ctx: ProbeContext, timeout_s: float
) -> list[ProbeResult]:
    """``probe.run`` in a worker thread: its results, ``timeout`` after ``timeout_s`` (the thread
    is left to finish on its own: a daemon thread, torch ops cannot be interrupted), ``failed`` with
    the exception's one line. Never raises."""
    box: list[list[ProbeResult]] = []
    err: list[BaseException] = []

    def work() -> None:
        try:
            box.append(probe.run(params, ctx))
        except BaseException as exc:  # a probe must never raise into preflight
            err.append(exc)

    thread = threading.Thread(target=work, name=f"probe-{probe.name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    base: dict[str, Any] = {
        "probe": probe.name,
        "device": ctx.device_id,
        "params": params_dict(params),
    }
    if thread.is_alive():
        return [ProbeResult(**base, status="timeout", detail=f"no result within {timeout_s:g} s")]
    if err:
        line = f"{type(err[0]).__name__}: {err[0]}".splitlines()[0]
        return [ProbeResult(**base, status="failed", detail=line)]
    return box[0]


def best_time(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    """The shortest of ``repeats`` timed calls of ``fn`` after one warm-up, in seconds."""
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def sync_for(device: str) -> Callable[[], None]:
    """A function that waits for queued work on ``device`` (a no-op on the CPU)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


def check_positive(name: str, values: Sequence[float]) -> None:
    for v in values:
        if v <= 0:
            raise ValueError(f"{name} must be positive, got {v}")
