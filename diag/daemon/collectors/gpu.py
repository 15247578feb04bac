"""The daemon's GPU collector: backend readings -> ``GpuSample`` and ``XidEvent`` events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.collectors.base import UNSTAMPED
from diag.gpu import open_backend
from diag.gpu.backend import READING_FIELDS, GpuBackend, throttle_reason_names


class GpuCollector:
    """Turns backend readings into ``GpuSample`` and ``XidEvent`` events (rank -1: node-level)."""

    name: ClassVar[str] = "gpu"

    def __init__(self, backend: GpuBackend, *, interval_s: float = 1.0) -> None:
        self.backend = backend
        self.interval_s = interval_s

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> GpuCollector:
        return cls(
            open_backend(cfg.gpu_backend, fake_gpus=cfg.fake_gpus), interval_s=cfg.gpu_interval_s
        )

    def collect(self, now_ns: int) -> Iterable[schema.Event]:
        out: list[schema.Event] = []
        for r in self.backend.read():
            fields = {name: getattr(r, name) for name in READING_FIELDS}
            out.append(
                schema.GpuSample(
                    ts_ns=now_ns,
                    throttle_reasons=throttle_reason_names(r.throttle_reasons_mask),
                    **fields,
                    **UNSTAMPED,  # type: ignore[arg-type]
                )
            )
        for x in self.backend.poll_xids():
            out.append(
                schema.XidEvent(
                    ts_ns=now_ns,
                    gpu_index=x.gpu_index,
                    xid=x.xid,
                    message=x.message,
                    **UNSTAMPED,  # type: ignore[arg-type]
                )
            )
        return out

    def close(self) -> None:
        self.backend.close()
