"""Synthetic runs for the fail-slow detectors: seeded, synchronous, written into a real RunStore.

The model is synchronous data-parallel training: at each step every rank spends ``data_ms`` in the
loader, ``compute_ms`` computing and ``ckpt_ms`` checkpointing, then meets its peers in the
collectives; each rank's collective wait is the slowest rank's busy time minus its own, plus
``comm_ms`` of transfer. So every rank's step lasts as long as the slowest rank's, and the ranks
that wait are the ones that are not slow, as in a real job.

Severity is the fraction of the job's step time lost: ``severity=0.2`` makes the culprit's extra
time ``base * 0.2 / 0.8``, so the step goes from ``base`` to ``base / 0.8`` and the expected
``Finding.slowdown`` is 0.2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from diag import schema
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One synthetic run. Ranks ``r`` live on host ``node{r // ranks_per_host}``."""

    ranks: int = 4
    ranks_per_host: int = 2
    steps: int = 120
    seed: int = 0
    compute_ms: float = 100.0
    data_ms: float = 5.0
    comm_ms: float = 20.0
    noise: float = 0.03  # std of the compute noise, as a fraction of compute_ms
    warmup_steps: int = 3  # first steps are warmup_factor x slower on every rank
    warmup_factor: float = 3.0
    slow_ranks: tuple[int, ...] = ()  # compute gets slower from onset_step
    slower: tuple[int, ...] = ()  # ... and these slow ranks twice as much
    data_ranks: tuple[int, ...] = ()  # data-loader wait gets longer from onset_step
    onset_step: int = 0
    severity: float = 0.0
    moving_imbalance: float = 0.0  # extra compute (fraction) on one random rank per step
    stall_ranks: tuple[int, ...] = ()  # from onset_step, stalled in a random stall_share of steps
    stall_share: float = 0.4  # ... each stall extra_ms / stall_share: extra_ms lost on average
    ckpt_every: int = 0  # a checkpoint save on every rank every N steps (0: none)
    ckpt_ms: float = 0.0
    ckpt_bytes: int = 0
    # (rank, step, ms): the rank's training thread waited that much longer for a CPU in that step
    # (cpu_wait_ns; the step's compute_ns holds it, as the hook's does)
    run_queue: tuple[tuple[int, int, float], ...] = ()
    # a one-step profiler window on every rank every N steps from step N (0: none), in which
    # rank r computes window_cost_ms[r] longer (the profiler's cost, each rank its own)
    window_every: int = 0
    window_cost_ms: tuple[float, ...] = ()
    # ... each window's cost drawn anew per rank, uniform in (1 +- spread) x window_cost_ms[r]
    window_cost_spread: float = 0.0
    # (from_step, costs): window_cost_ms from that step on (a cost that changes over the run)
    window_cost_change: tuple[int, tuple[float, ...]] | None = None
    # (rank, step, ms): the rank computed that much longer in that step (a stop-the-world pause)
    pauses: tuple[tuple[int, int, float], ...] = ()

    @property
    def base_step_ms(self) -> float:
        return self.data_ms + self.compute_ms + self.comm_ms

    @property
    def extra_ms(self) -> float:
        """The culprit's extra time per step that loses ``severity`` of the step."""
        return self.base_step_ms * self.severity / (1.0 - self.severity)

    def host(self, rank: int) -> str:
        return f"node{rank // self.ranks_per_host}"

    def events(self) -> list[schema.Event]:
        rng = np.random.default_rng(self.seed)
        sources = [Source(self.host(r), r, pid=1000 + r) for r in range(self.ranks)]
        out: list[schema.Event] = []
        t = T0
        for step in range(self.steps):
            compute = self.compute_ms * (1 + self.noise * rng.standard_normal(self.ranks))
            data = np.full(self.ranks, self.data_ms)
            ckpt = np.zeros(self.ranks)
            if step < self.warmup_steps:
                compute *= self.warmup_factor
            if step >= self.onset_step:
                compute[list(self.slow_ranks)] += self.extra_ms
                compute[list(self.slower)] += self.extra_ms
                data[list(self.data_ranks)] += self.extra_ms
            if self.moving_imbalance:
                compute[rng.integers(self.ranks)] += self.moving_imbalance * self.compute_ms
            if self.stall_ranks and step >= self.onset_step:
                hit = [r for r in self.stall_ranks if rng.random() < self.stall_share]
                compute[hit] += self.extra_ms / self.stall_share
            if self.ckpt_every and step % self.ckpt_every == self.ckpt_every - 1:
                ckpt[:] = self.ckpt_ms
            profiled = bool(self.window_every) and step > 0 and step % self.window_every == 0
            if profiled:
                costs = self.window_cost_ms
                if self.window_cost_change and step >= self.window_cost_change[0]:
                    costs = self.window_cost_change[1]
                cost = np.asarray(costs, dtype=float)
                if self.window_cost_spread:
                    cost *= 1 + self.window_cost_spread * rng.uniform(-1, 1, len(cost))
                compute[: len(cost)] += cost
            for r, at, ms in self.pauses:
                if at == step:
                    compute[r] += ms
            queued = np.zeros(self.ranks)
            for r, at, ms in self.run_queue:
                if at == step:
                    queued[r] += ms
            busy = compute + queued + data + ckpt
            wait = busy.max() - busy + self.comm_ms
            dur_ms = float(busy.max() + self.comm_ms)
            for r, src in enumerate(sources):
                out.append(
                    _step(src, step, t, dur_ms, compute[r], wait[r], data[r], ckpt[r], queued[r])
                )
                if ckpt[r]:
                    out.append(self._ckpt(src, step, t, ckpt[r]))
                if profiled:
                    out.append(_window(src, step, t, dur_ms))
            t += int(dur_ms * MS)
        return out

    def _ckpt(self, src: Source, step: int, t: int, ms: float) -> schema.CheckpointEvent:
        return schema.CheckpointEvent(
            **src.env(t + int(ms * MS), step),
            op="save",
            api="dcp",
            path=f"/ckpt/run1/step{step}",
            num_bytes=self.ckpt_bytes,
            start_ns=t,
            duration_ns=int(ms * MS),
        )

    def write(self, run_dir: Path) -> RunStore:
        """Write the run into ``run_dir`` (a real store: parts on disk) and return the store."""
        store = RunStore.create(run_dir)
        store.append(self.events())
        store.flush()
        return RunStore.open(run_dir)


def _window(src: Source, step: int, t: int, dur_ms: float) -> schema.ProfileWindow:
    dur = int(dur_ms * MS)
    return schema.ProfileWindow(
        **src.env(t + dur + 50 * MS, step),
        window_id=f"p{step}",
        trigger="periodic",
        start_ns=t,
        end_ns=t + dur,
        duration_ns=dur,
        num_ops=500,
    )


def _step(
    src: Source,
    step: int,
    t: int,
    dur_ms: float,
    compute: float,
    wait: float,
    data: float,
    ckpt: float,
    queued: float = 0.0,
) -> schema.StepEvent:
    dur = int(dur_ms * MS)
    return schema.StepEvent(
        **src.env(t + dur, step),
        start_ns=t,
        end_ns=t + dur,
        duration_ns=dur,
        data_wait_ns=int(data * MS),
        forward_ns=int(compute * 0.3 * MS),
        backward_ns=int((compute * 0.6 + wait) * MS),
        optimizer_ns=int(compute * 0.1 * MS),
        checkpoint_ns=int(ckpt * MS),
        compute_ns=int((compute + queued) * MS),
        cpu_wait_ns=int(queued * MS),
        collective_wait_ns=int(wait * MS),
        loss=1.0,
        num_collectives=3,
    )
