"""A small pipeline-parallel x data-parallel training job (gloo, CPU) to run under ``torchrun``;
it knows no diag.

    torchrun --standalone --nproc_per_node 4 diag/selftest/workloads/pipeline_job.py \\
        --steps 40 --pp 2 --microbatches 8

**Layout.** ``world = pp x dp``; rank ``r`` holds pipeline stage ``r // dp`` of data-parallel
replica ``r % dp`` (the pipeline dimension outermost, as Megatron orders it). The job creates its
own process groups with ``dist.new_group``: one "pp" group per replica (its stages, in stage
order) and one "dp" group per stage (its replicas), every rank creating every group in the same
order, as torch requires.

**Schedule.** Each step splits the replica's batch into ``--microbatches`` microbatches and runs
them through the stages with point-to-point operations on the pp group: activations forward with
``isend``/``irecv``, gradients of the stage input backward the same way (tags keep the two apart),
each ``irecv`` waited on with ``Work.wait()`` where the stage needs it, each ``isend`` waited on
before the step ends. ``--schedule gpipe`` runs every forward, then every backward;
``--schedule 1f1b`` (default) warms up with ``pp - stage - 1`` forwards, then alternates one
forward and one backward, then drains the backwards (Megatron's non-interleaved schedule). After
the last backward, each stage all-reduces its gradients over its dp group (one flat bucket), then
its own optimizer steps (``--grad-buckets`` all-reduces instead of one; ``--count-tokens``: the
last stage also all-reduces each microbatch's token count over dp to normalize its loss, as jobs
with uneven sequence lengths do). The explicit schedule (not ``torch.distributed.pipelining``)
keeps every p2p operation in this file, where a fault can be injected per stage, rank or
microbatch, and costs no shape-inference round trip at start-up.

Every rank prints ``rank <r> step <i> loss <repr(float)> stage <s> ms <step ms>`` after each
optimizer step; the loss is the last microbatch's term (its loss / microbatches: the scalar root
of the step's last ``backward()``, the value a hook records), known on the last stage only (others
print ``nan``).

Faults (each off by default):

- ``--slow-rank R --slow-ms X --slow-from-step S``: rank R does about X ms of extra real compute
  per step (spread over its forward microbatches) from step S on (a slow node);
- ``--slow-stage K --slow-stage-ms X``: every replica of stage K does X ms more per step from the
  first step (the layout's imbalance: a stage with more layers, the embedding or the loss);
- ``--imbalance-ms X --imbalance-from-step S``: uneven sequence lengths: from step S, each step one
  microbatch of one replica (both drawn from the step's seed, so they move from step to step) is
  long and costs X ms more on every stage of that replica (a data-shaped fault);
- ``--recreate-optimizer-at STEP``: before that step every rank builds a new optimizer over the
  same parameters and loads the old one's state into it (resume logic, a schedule change); the
  old optimizer is dropped. ``--optimizers N`` splits each stage's parameters over N optimizers,
  all stepped each iteration (per-group optimizers).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

ACT, GRAD = 0, 1  # tag kinds: activation (forward), input gradient (backward)


class Burner:
    """Real CPU work of about ``ms`` milliseconds: repeated 64x64 matrix products."""

    def __init__(self) -> None:
        self.a = torch.randn(64, 64) / 8
        self.per_ms = 0.0
        x = self.a
        for _ in range(20):  # warm up
            x = torch.tanh(x @ self.a)
        t0 = time.thread_time()  # CPU time: a rank descheduled meanwhile measures the same
        for _ in range(200):
            x = torch.tanh(x @ self.a)
        self.per_ms = 200 / max(1e-6, (time.thread_time() - t0) * 1000)

    def run(self, ms: float) -> None:
        x = self.a
        for _ in range(round(ms * self.per_ms)):
            x = torch.tanh(x @ self.a)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--pp", type=int, default=2, help="pipeline stages (world = pp x dp)")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
    p.add_argument("--mb-size", type=int, default=4, help="rows per microbatch")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=1, help="hidden layers per stage")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=20.0)
    p.add_argument("--slow-from-step", type=int, default=0)
    p.add_argument("--slow-stage", type=int, default=-1)
    p.add_argument("--slow-stage-ms", type=float, default=10.0)
    p.add_argument("--imbalance-ms", type=float, default=0.0, help="0 = off")
    p.add_argument("--imbalance-from-step", type=int, default=0)
    p.add_argument("--recreate-optimizer-at", type=int, default=-1)
    p.add_argument("--optimizers", type=int, default=1, help="optimizers per stage")
    p.add_argument(
        "--count-tokens", action="store_true",
        help="last stage: all-reduce each microbatch's token count over dp before its loss",
    )  # fmt: skip
    p.add_argument("--grad-buckets", type=int, default=1, help="dp all-reduces of the gradients")
    p.add_argument("--print-every", type=int, default=1)
    args = p.parse_args(argv)
    if min(args.microbatches, args.pp, args.optimizers, args.grad_buckets) < 1:
        p.error("--microbatches, --pp, --optimizers and --grad-buckets must be >= 1")
    return args


class Stage(nn.Module):
    def __init__(self, dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        mods: list[nn.Module] = [nn.Linear(dim, hidden), nn.Tanh()]
        for _ in range(layers - 1):
            mods += [nn.Linear(hidden, hidden), nn.Tanh()]
        mods.append(nn.Linear(hidden, dim))
        self.net = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Pipeline:
    """One rank's stage of one replica: its groups, model, optimizers and schedule."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank, world = dist.get_rank(), dist.get_world_size()
        if world % args.pp:
            raise SystemExit(f"world size {world} is not a multiple of --pp {args.pp}")
        self.dp = world // args.pp
        self.stage, self.replica = divmod(self.rank, self.dp)
        self.first, self.last = self.stage == 0, self.stage == args.pp - 1
        self.pp_group: dist.ProcessGroup | None = None
        self.dp_group: dist.ProcessGroup | None = None
        for replica in range(self.dp):  # every rank creates every group, in the same order
            ranks = [s * self.dp + replica for s in range(args.pp)]
            group = dist.new_group(ranks, group_desc="pp")
            if replica == self.replica:
                self.pp_group = group
        for stage in range(args.pp):
            ranks = [stage * self.dp + r for r in range(self.dp)]
            group = dist.new_group(ranks, group_desc="dp")
            if stage == self.stage:
                self.dp_group = group
        self.prev = self.rank - self.dp if not self.first else -1
        self.next = self.rank + self.dp if not self.last else -1
        torch.manual_seed(args.seed + self.stage)  # replicas of a stage start equal
        self.model = Stage(args.dim, args.hidden, args.layers)
        self.optimizers = self._build_optimizers()
        self.burner = Burner()
        self.pending_sends: list[dist.Work] = []

    def _build_optimizers(self) -> list[torch.optim.Optimizer]:
        params = list(self.model.parameters())
        n = min(self.args.optimizers, len(params))
        chunks = [params[i::n] for i in range(n)]
        return [torch.optim.Adam(chunk, lr=self.args.lr) for chunk in chunks]

    def recreate_optimizers(self) -> None:
        """New optimizer objects over the same parameters, with the old ones' state."""
        old = self.optimizers
        self.optimizers = self._build_optimizers()
        for new, prev in zip(self.optimizers, old, strict=True):
            new.load_state_dict(prev.state_dict())
        del old

    # ------------------------------------------------------------ per step
    def extra_ms(self, step: int, mb: int) -> float:
        """The injected faults' extra compute for microbatch ``mb`` of ``step`` on this rank."""
        a, m = self.args, self.args.microbatches
        ms = 0.0
        if self.rank == a.slow_rank and step >= a.slow_from_step:
            ms += a.slow_ms / m
        if self.stage == a.slow_stage:
            ms += a.slow_stage_ms / m
        if a.imbalance_ms > 0 and step >= a.imbalance_from_step:
            draw = random.Random(a.seed * 1_000_003 + step)
            if (draw.randrange(self.dp), draw.randrange(m)) == (self.replica, mb):
                ms += a.imbalance_ms
        return ms

    def batch(self, step: int, mb: int) -> tuple[torch.Tensor, torch.Tensor]:
        seed = ((self.args.seed * 1_000_003 + step) * 1_009 + self.replica) * 1_013 + mb
        g = torch.Generator().manual_seed(seed)
        n, d = self.args.mb_size, self.args.dim
        return torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)

    def _tag(self, mb: int, kind: int) -> int:
        return 2 * mb + kind

    def _recv(self, src: int, mb: int, kind: int) -> torch.Tensor:
        buf = torch.empty(self.args.mb_size, self.args.dim)
        work = dist.irecv(buf, src=src, group=self.pp_group, tag=self._tag(mb, kind))
        assert work is not None
        work.wait()
        return buf

    def _send(self, t: torch.Tensor, dst: int, mb: int, kind: int) -> None:
        work = dist.isend(t.contiguous(), dst=dst, group=self.pp_group, tag=self._tag(mb, kind))
        assert work is not None
        self.pending_sends.append(work)

    def forward(
        self, step: int, mb: int, state: dict[int, tuple[torch.Tensor, torch.Tensor]]
    ) -> float:
        if self.first:
            x, y = self.batch(step, mb)
        else:
            x = self._recv(self.prev, mb, ACT).requires_grad_()
            y = self.batch(step, mb)[1] if self.last else torch.empty(0)
        ms = self.extra_ms(step, mb)
        if ms > 0:
            self.burner.run(ms)
        out = self.model(x)
        if self.last:
            tokens = float(y.numel())
            if self.args.count_tokens and self.dp > 1:
                count = torch.tensor([tokens])
                dist.all_reduce(count, group=self.dp_group)
                tokens = float(count) / self.dp  # the replicas' mean (equal here)
            loss = (out - y).pow(2).sum() / tokens / self.args.microbatches
            state[mb] = (x, loss)
            return float(loss.detach())
        self._send(out.detach(), self.next, mb, ACT)
        state[mb] = (x, out)
        return math.nan

    def backward(self, mb: int, state: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        x, out = state.pop(mb)
        if self.last:
            out.backward()
        else:
            grad = self._recv(self.next, mb, GRAD)
            torch.autograd.backward(out, grad)
        if not self.first:
            assert x.grad is not None
            self._send(x.grad, self.prev, mb, GRAD)

    def step(self, step: int) -> float:
        a = self.args
        if step == a.recreate_optimizer_at:
            self.recreate_optimizers()
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=False)
        m = a.microbatches
        state: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        loss = math.nan
        if a.schedule == "gpipe":
            order = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        else:
            warm = min(a.pp - self.stage - 1, m)
            order = [("F", i) for i in range(warm)]
            for i in range(m - warm):
                order += [("F", warm + i), ("B", i)]
            order += [("B", i) for i in range(m - warm, m)]
        for what, mb in order:
            if what == "F":
                value = self.forward(step, mb, state)
                if self.last:
                    loss = value
            else:
                self.backward(mb, state)
        for work in self.pending_sends:
            work.wait()
        self.pending_sends.clear()
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        n = min(a.grad_buckets, len(grads))
        for bucket in (grads[i::n] for i in range(n)) if self.dp > 1 else ():
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat, group=self.dp_group)
            flat /= self.dp
            for g, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket), strict=True):
                g.copy_(synced)
        for opt in self.optimizers:
            opt.step()
        return loss


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    pipe = Pipeline(args)
    for step in range(args.steps):
        t0 = time.perf_counter()
        loss = pipe.step(step)
        ms = (time.perf_counter() - t0) * 1000
        if step % args.print_every == 0 or step == args.steps - 1:
            # one write per line: ranks share the launcher's stdout
            sys.stdout.write(
                f"rank {pipe.rank} step {step} loss {loss!r} stage {pipe.stage} ms {ms:.2f}\n"
            )
            sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
