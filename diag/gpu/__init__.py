"""The GPU seam, used by the node daemon and the probes: :class:`~diag.gpu.backend.GpuBackend`
with the real NVML implementation (:mod:`diag.gpu.nvml`, the only module that imports pynvml, and
only when opened) and a scripted fake (:mod:`diag.gpu.fake`).

Imports only diag's contracts (``diag.errors``); :func:`open_backend` is the registry of backends
by name, for the composition roots (the daemon, ``diag preflight``).
"""

from __future__ import annotations

from diag.errors import ConfigError
from diag.gpu.backend import GpuBackend

#: Backend names ``--gpu-backend`` takes; "none" (no GPU telemetry) is not a backend.
BACKENDS = ("nvml", "fake")


def open_backend(name: str, *, fake_gpus: int = 0) -> GpuBackend:
    """The backend ``name`` names: "nvml" (raises ``CollectorUnavailable`` without a GPU driver;
    every call under a deadline, :mod:`diag.gpu.deadline`) or "fake" (``fake_gpus`` healthy
    devices)."""
    if name == "fake":
        from diag.gpu.fake import FakeGpuBackend

        return FakeGpuBackend.healthy(fake_gpus)
    if name == "nvml":
        from diag.gpu.deadline import DeadlineBackend, open_with_deadline
        from diag.gpu.nvml import NvmlBackend  # pynvml only when NVML is asked for

        # a wedged driver blocks NVML calls forever: every call under a deadline
        return DeadlineBackend(open_with_deadline(NvmlBackend.open))
    raise ConfigError(f"unknown gpu_backend {name!r} (use nvml, fake or none)")


__all__ = ["BACKENDS", "GpuBackend", "open_backend"]
