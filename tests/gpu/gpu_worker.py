"""A small CUDA training job for ``tests/gpu/gpu_check.py`` (run under ``diag run`` by torchrun).

DDP over NCCL when the world has 2+ ranks (gloo-free), an MLP on ``cuda:LOCAL_RANK`` (with
``--same-gpu``: every rank on ``cuda:0``, DDP over gloo, for a one-GPU machine); rank
``--slow-rank`` does ``--extra`` more matrix products per step on its GPU. The script keeps its
own ground truth with CUDA events of its own (forward + backward device time per step, read after
a synchronize at the end: the script may synchronize, diag may not) and writes it as JSON lines
to ``--truth``: ``{"rank", "step", "fwd_bwd_ms"}``.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--extra", type=int, default=40)
    p.add_argument("--truth", required=True)
    # every rank on cuda:0 over gloo (NCCL refuses two ranks on one GPU)
    p.add_argument("--same-gpu", action="store_true")
    args = p.parse_args()
    local = 0 if args.same_gpu else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    dist.init_process_group("nccl" if world > 1 and not args.same_gpu else "gloo")
    dev = torch.device("cuda", local)
    model = nn.Sequential(nn.Linear(2048, 4096), nn.GELU(), nn.Linear(4096, 2048)).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local]) if world > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    burn = torch.randn(2048, 2048, device=dev)
    marks = []
    for step in range(args.steps):
        x = torch.randn(256, 2048, device=dev)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y = ddp(x)
        if rank == args.slow_rank:
            z = burn
            for _ in range(args.extra):
                z = torch.tanh(z @ burn)
            y = y + z.mean() * 0
        loss = y.pow(2).mean()
        loss.backward()
        b.record()
        opt.step()
        opt.zero_grad(set_to_none=True)
        marks.append((step, a, b))
    torch.cuda.synchronize()
    with open(args.truth, "a") as f:
        for step, a, b in marks:
            f.write(
                json.dumps({"rank": rank, "step": step, "fwd_bwd_ms": a.elapsed_time(b)}) + "\n"
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
