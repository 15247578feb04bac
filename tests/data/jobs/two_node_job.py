"""A tiny gloo job for the two-node harness: a few all_reduces, one JSON result line per rank.

Run under torchrun; prints ``RESULT {"rank", "world_size", "local_rank", "hostname", "sum", ...}``.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

ROUNDS = 5


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = 0.0
    for i in range(ROUNDS):
        t = torch.tensor([float(rank + 1 + i)])
        dist.all_reduce(t)
        total += float(t.item())
    # Every rank learns every rank's host name: proves the hosts really differ end to end.
    hosts: list[str | None] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    dist.barrier()
    result = {
        "rank": rank,
        "world_size": world,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "hostname": socket.gethostname(),
        "hosts": hosts,
        "sum": total,
        "master_addr": os.environ.get("MASTER_ADDR"),
        "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
    }
    # One write(2): the node's two workers share torchrun's stdout, print() could interleave.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), ("RESULT " + json.dumps(result) + "\n").encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
