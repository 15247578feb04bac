"""Deterministic numerics check: a fixed-seed chain of ``depth`` matmuls (``x = tanh(x @ w_k)``)
on ``size`` x ``size`` float32 tensors; the result's SHA-256 (first 16 hex digits) is ``detail``
and ``value`` its float64 sum. Devices of the same type must agree exactly; a device whose digest
differs from its peers' has silently corrupted data (preflight's consistency rule compares them).
On the CPU one thread is used so the reduction order, and so the digest, is fixed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

from probes.base import MAX_FLOP, ProbeContext, ProbeResult, params_dict


@dataclass(frozen=True, slots=True, kw_only=True)
class NumericsParams:
    size: int = 256
    depth: int = 16
    seed: int = 1234
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.size <= 8192 or not 1 <= self.depth <= 1000:
            raise ValueError("size must be in [1, 8192] and depth in [1, 1000]")
        if 2 * self.size**3 * self.depth > MAX_FLOP:
            raise ValueError(f"size**3 x depth costs more than {MAX_FLOP:.0e} flops")


def chain_digest(params: NumericsParams, device: str) -> tuple[str, float]:
    import torch

    gen = torch.Generator().manual_seed(params.seed)
    x = torch.randn(params.size, params.size, generator=gen).to(device)
    for _ in range(params.depth):
        w = torch.randn(params.size, params.size, generator=gen).to(device) / params.size**0.5
        x = torch.tanh(x @ w)
    host = x.detach().to("cpu").contiguous()
    digest = hashlib.sha256(host.numpy().tobytes()).hexdigest()[:16]
    return digest, float(host.double().sum())


class NumericsProbe:
    name: ClassVar[str] = "numerics"
    Params: ClassVar[type] = NumericsParams

    def run(self, params: NumericsParams, ctx: ProbeContext) -> list[ProbeResult]:
        import torch

        if ctx.device == "cpu":
            torch.set_num_threads(1)
        digest, total = chain_digest(params, ctx.device)
        return [
            ProbeResult(
                probe=self.name,
                device=ctx.device_id,
                status="ok",
                metric="checksum",
                value=total,
                unit="sum",
                detail=digest,
                params=params_dict(params),
            )
        ]
