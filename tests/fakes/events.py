"""Synthetic events for the analysis tests: one numbered source per emitter, as the hook does."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from diag import schema
from diag.proto import diag_pb2 as pb
from diag.transport import codec

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


class Source:
    """An emitter: numbers its events 0, 1, 2, ... like a hook or a daemon."""

    def __init__(self, host: str = "node0", rank: int = -1, pid: int = 100) -> None:
        self.host, self.rank = host, rank
        self.name = f"{host}/rank{rank}/{pid}" if rank >= 0 else f"{host}/daemon/{pid}"
        self._seq: Iterator[int] = itertools.count()

    def env(self, ts_ns: int, step: int = -1) -> dict[str, Any]:
        return {
            "ts_ns": ts_ns,
            "host": self.host,
            "rank": self.rank,
            "local_rank": max(self.rank, -1) % 8 if self.rank >= 0 else -1,
            "job_id": "job1",
            "source": self.name,
            "seq": next(self._seq),
            "step": step,
        }

    def step(self, step: int, *, compute_ms: float = 100, wait_ms: float = 20, loss=1.0):
        dur = int((compute_ms + wait_ms + 5) * MS)
        start = T0 + step * 200 * MS
        return schema.StepEvent(
            **self.env(start + dur, step),
            start_ns=start,
            end_ns=start + dur,
            duration_ns=dur,
            data_wait_ns=5 * MS,
            forward_ns=int(compute_ms * 0.3 * MS),
            backward_ns=int((compute_ms * 0.6 + wait_ms) * MS),
            optimizer_ns=int(compute_ms * 0.1 * MS),
            compute_ns=int(compute_ms * MS),
            collective_wait_ns=int(wait_ms * MS),
            loss=loss,
            num_collectives=3,
        )

    def collective(self, seq_id: int) -> schema.CollectiveEvent:
        return schema.CollectiveEvent(
            **self.env(T0 + seq_id * MS),
            op="allreduce",
            seq_id=seq_id,
            num_bytes=4096,
            start_ns=None if seq_id % 2 else T0,
        )

    def gpu(self, ts_ns: int, index: int, *, util: float | None = 90.0, **kw) -> schema.GpuSample:
        return schema.GpuSample(
            **self.env(ts_ns),
            gpu_index=index,
            uuid=f"GPU-{index}",
            name="H100",
            util_pct=util,
            sm_clock_mhz=1980,
            **kw,
        )


def batch(events: list[schema.Event], sender: str = "test") -> pb.EventBatch:
    return codec.batch_to_proto(events, sender=sender, sent_ns=T0)


def keys(df) -> list[tuple[str, int]]:
    return list(zip(df["source"].tolist(), df["seq"].tolist(), strict=True))
