"""Synthetic runs for the ``diag diff`` tests, written into real run stores."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from diag import schema
from diag.store.run_store import RunStore

MS = 1_000_000
T0 = 1_800_000_000_000_000_000

#: phase -> default milliseconds of a 100 ms step (data + forward + backward + optimizer = 100)
PHASES_MS = {"data": 5.0, "forward": 30.0, "backward": 55.0, "optimizer": 10.0}


def base_loss(step: int, rank: int = 0) -> float:
    """A decaying, wiggly loss; each rank its own (ranks see different data)."""
    return 2.0 * math.exp(-step / 40) + 0.1 * math.sin(step * 0.7 + rank) + 0.5


class RunBuilder:
    """Events of one synthetic run: steps per rank, checkpoints, profiler windows."""

    def __init__(self, ranks: Iterable[int] = (0, 1), pid: int = 100) -> None:
        self.ranks = tuple(ranks)
        self.pid = pid
        self.events: list[schema.Event] = []
        self._seq = {r: itertools.count() for r in self.ranks}

    def _env(self, rank: int, step: int, ts_ns: int) -> dict[str, object]:
        return {
            "ts_ns": ts_ns,
            "host": f"node{rank // 8}",
            "rank": rank,
            "local_rank": rank % 8,
            "job_id": f"job{self.pid}",
            "source": f"node{rank // 8}/rank{rank}/{self.pid}",
            "seq": next(self._seq[rank]),
            "step": step,
        }

    def steps(
        self,
        steps: Iterable[int],
        loss: Callable[[int, int], float | None] = base_loss,
        *,
        phases: Callable[[int, int], dict[str, float]] | None = None,
        jitter: float = 0.01,
        seed: int = 0,
    ) -> RunBuilder:
        """One StepEvent per rank and step; ``loss(step, rank)``; ``phases(step, rank)`` overrides
        :data:`PHASES_MS` entries (and ``"wait"``, the collective wait inside backward, a fifth of
        it by default); every phase gets a multiplicative ``jitter`` (uniform)."""
        rng = np.random.default_rng(seed)
        for step in steps:
            for rank in self.ranks:
                ms = dict(PHASES_MS)
                if phases is not None:
                    ms.update(phases(step, rank))
                ms = {k: v * (1 + jitter * rng.uniform(-1, 1)) for k, v in ms.items()}
                ns = {k: int(v * MS) for k, v in ms.items()}
                wait = ns.pop("wait", ns["backward"] // 5)  # inside backward
                duration = sum(ns.values())
                start = T0 + step * 200 * MS
                self.events.append(
                    schema.StepEvent(
                        **self._env(rank, step, start + duration),  # type: ignore[arg-type]
                        start_ns=start,
                        end_ns=start + duration,
                        duration_ns=duration,
                        data_wait_ns=ns["data"],
                        forward_ns=ns["forward"],
                        backward_ns=ns["backward"],
                        optimizer_ns=ns["optimizer"],
                        compute_ns=duration - wait - ns["data"],
                        collective_wait_ns=wait,
                        loss=loss(step, rank),
                    )
                )
        return self

    def checkpoint(self, op: str, path: str, step: int, ranks: Iterable[int] = (0,)) -> RunBuilder:
        for rank in ranks:
            self.events.append(
                schema.CheckpointEvent(
                    **self._env(rank, step, T0 + step * 200 * MS),  # type: ignore[arg-type]
                    op=op,
                    api="torch.save" if op == "save" else "torch.load",
                    path=path,
                    num_bytes=1000,
                    start_ns=T0 + step * 200 * MS,
                    duration_ns=MS,
                )
            )
        return self

    def kernels(self, window: str, step: int, times_ms: dict[str, float]) -> RunBuilder:
        """One profiler window of one step on every rank with these kernel times."""
        for rank in self.ranks:
            ts = T0 + step * 200 * MS
            self.events.append(
                schema.ProfileWindow(
                    **self._env(rank, step, ts),  # type: ignore[arg-type]
                    window_id=window,
                    trigger="periodic",
                    start_ns=ts,
                    end_ns=ts + 100 * MS,
                    duration_ns=100 * MS,
                )
            )
            for name, ms in times_ms.items():
                self.events.append(
                    schema.KernelSummary(
                        **self._env(rank, step, ts),  # type: ignore[arg-type]
                        window_id=window,
                        name=name,
                        category="cpu_op",
                        num_calls=1,
                        total_ns=int(ms * MS),
                        median_ns=int(ms * MS),
                        max_ns=int(ms * MS),
                    )
                )
        return self

    def grad_norms(
        self, steps: Iterable[int], norm: Callable[[int], float] = lambda s: 1.0 + 0.5 / (s + 1)
    ) -> RunBuilder:
        """NumericsSample events: ``norm(step)``, the same on every rank (as under DDP)."""
        for step in steps:
            for rank in self.ranks:
                self.events.append(
                    schema.NumericsSample(
                        **self._env(rank, step, T0 + step * 200 * MS + 50 * MS),  # type: ignore[arg-type]
                        loss=base_loss(step, rank),
                        grad_norm=norm(step),
                        num_grads=4,
                        num_nonfinite_grads=0,
                    )
                )
        return self

    def fingerprints(self, steps: Iterable[int], checksum: Callable[[int], int]) -> RunBuilder:
        """ParamFingerprint events after each step, the same on every rank."""
        for step in steps:
            for rank in self.ranks:
                self.events.append(
                    schema.ParamFingerprint(
                        **self._env(rank, step, T0 + step * 200 * MS + 150 * MS),  # type: ignore[arg-type]
                        checksum=checksum(step),
                        dp_size=len(self.ranks),
                    )
                )
        return self

    def nonfinite(self, step: int, rank: int, where: str = "loss", module: str = "") -> RunBuilder:
        self.events.append(
            schema.NonFinite(
                **self._env(rank, step, T0 + step * 200 * MS + 60 * MS),  # type: ignore[arg-type]
                where=where,
                module=module,
                loss=float("nan"),
            )
        )
        return self

    def write(self, run_dir: Path) -> Path:
        store = RunStore.create(run_dir)
        store.append(self.events)
        store.flush()
        return run_dir
