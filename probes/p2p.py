"""Point-to-point bandwidth matrix: for every pair of ranks (i < j), ``repeats`` ping-pongs of
``size_bytes`` (i sends, j returns it), one pair at a time while the others wait; GB/s of one-way
payload ``size / (round trip / 2)``. A slow link shows as the pairs that cross it: the matrix names
``r<i>@<host> <-> r<j>@<host>`` for each pair, reported by rank i. One process is ``unsupported``.

Every rank must call it with the same parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from probes.base import ProbeContext, ProbeResult, best_time, params_dict, sync_for, unsupported
from probes.collective import size_label


@dataclass(frozen=True, slots=True, kw_only=True)
class P2pParams:
    size_bytes: int = 1 << 22
    repeats: int = 3
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not 4 <= self.size_bytes <= 1 << 32 or not 1 <= self.repeats <= 100:
            raise ValueError("size_bytes must be in [4, 4 GiB] and repeats in [1, 100]")


def pair_name(i: int, j: int, hosts: list[str]) -> str:
    return f"r{i}@{hosts[i]}<->r{j}@{hosts[j]}"


class P2pProbe:
    name: ClassVar[str] = "p2p"
    Params: ClassVar[type] = P2pParams

    def run(self, params: P2pParams, ctx: ProbeContext) -> list[ProbeResult]:
        if not ctx.distributed or ctx.world_size < 2:
            return unsupported(self.name, ctx, "one process: launch under torchrun", params)
        import torch
        import torch.distributed as dist

        hosts: list[str] = [""] * ctx.world_size
        dist.all_gather_object(hosts, ctx.host)
        buf = torch.ones(max(1, params.size_bytes // 4), device=ctx.device)
        sync = sync_for(ctx.device)
        out = []
        for i in range(ctx.world_size):
            for j in range(i + 1, ctx.world_size):
                if ctx.rank == i:

                    def ping(peer: int = j) -> None:
                        dist.send(buf, peer)
                        dist.recv(buf, peer)

                    secs = best_time(ping, params.repeats, sync)
                    out.append(
                        ProbeResult(
                            probe=self.name,
                            device=pair_name(i, j, hosts),
                            status="ok",
                            metric=f"pingpong {size_label(params.size_bytes)}",
                            value=params.size_bytes / (secs / 2) / 1e9,
                            unit="GB/s",
                            params=params_dict(params),
                        )
                    )
                elif ctx.rank == j:
                    for _ in range(params.repeats + 1):
                        dist.recv(buf, i)
                        dist.send(buf, i)
                dist.barrier()
        return out
