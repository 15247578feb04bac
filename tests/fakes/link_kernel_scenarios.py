"""Synthetic runs for the link and kernel detector tests (deterministic: jitter is a fixed
pattern, not random)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from diag import schema
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source

HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
GROUPS = {"dp0": (0, 2), "dp1": (1, 3)}  # DP pairs across the two hosts
MB = 1 << 20


def _jitter(*keys: int) -> float:
    """A fixed pseudo-noise in [-1, 1] (no random state)."""
    return (
        (sum((k + 3) * p for k, p in zip(keys, (7919, 104729, 1299709), strict=False)) % 201) - 100
    ) / 100


def link_run(
    tmp: Path,
    *,
    num_steps: int = 60,
    slow_group: str | None = None,
    slow_from: int = 30,
    slow_factor: float = 3.0,
    slow_rank: int | None = None,
    timed: bool = True,
    early: tuple[int, float] | None = None,
    cpu_wait_ms: Callable[[int, int], float] | None = None,
) -> RunStore:
    """4 ranks on 2 hosts, groups dp0={0,2}, dp1={1,3}; 2 all-reduces of 64 MiB per group per
    step taking 10 ms each. ``slow_group``: its transfers ``slow_factor`` x from ``slow_from``.
    ``slow_rank``: its compute 1.5x from ``slow_from`` (it enqueues late, its peers wait).
    ``timed=False``: no durations (gloo-like), only ``collective_wait_ns`` in the steps.
    ``early=(step, factor)``: the slow group's transfers already ``factor`` x from ``step`` to
    ``slow_from`` (noise on a busy host just before the fault). ``cpu_wait_ms(step, rank)``: the
    rank's wait for a CPU in the step (``cpu_wait_ns``; none recorded without it)."""
    store = RunStore.create(tmp)
    src = {r: Source(HOSTS[r], r, pid=100 + r) for r in HOSTS}
    events: list[schema.Event] = []
    for step in range(num_steps):
        compute = {r: 100.0 * (1 + 0.01 * _jitter(step, r)) for r in HOSTS}
        if slow_rank is not None and step >= slow_from:
            compute[slow_rank] *= 1.5
        wait = dict.fromkeys(HOSTS, 0.0)
        for gi, (g, ranks) in enumerate(GROUPS.items()):
            for k in range(2):
                transfer = 10.0 * (1 + 0.02 * _jitter(step, gi, k))
                if g == slow_group and step >= slow_from:
                    transfer *= slow_factor
                elif g == slow_group and early is not None and step >= early[0]:
                    transfer *= early[1]
                arrive = {r: compute[r] + 0.05 * _jitter(step, r, k) for r in ranks}
                last = max(arrive.values())
                for r in ranks:
                    dur = last - arrive[r] + transfer
                    wait[r] += dur
                    enq = T0 + step * 200 * MS + int(arrive[r] * MS)
                    events.append(
                        schema.CollectiveEvent(
                            **src[r].env(enq, step),
                            op="allreduce",
                            pg_name=g,
                            pg_size=2,
                            seq_id=step * 2 + k,
                            num_bytes=64 * MB,
                            enqueue_ns=enq,
                            start_ns=enq if timed else None,
                            end_ns=enq + int(dur * MS) if timed else None,
                            duration_ns=int(dur * MS) if timed else None,
                        )
                    )
        for r in HOSTS:
            ev = src[r].step(step, compute_ms=compute[r], wait_ms=wait[r])
            if cpu_wait_ms is not None:
                ev = replace(ev, cpu_wait_ns=int(cpu_wait_ms(step, r) * MS))
            events.append(ev)
    store.append(events)
    store.flush()
    return store


KernelTime = Callable[[str, int, int], float]  # (kernel, rank, window) -> ms


def kernel_run(
    tmp: Path, time_ms: KernelTime, *, num_ranks: int = 4, num_windows: int = 5
) -> RunStore:
    """``num_ranks`` x ``num_windows`` profiler windows of 100 ms (one every 50 steps); each rank
    and window has aten::matmul wrapping aten::mm, a GPU gemm, aten::add and a collective wait,
    with times from ``time_ms`` (aten::matmul = aten::mm + 1 ms)."""
    store = RunStore.create(tmp)
    events: list[schema.Event] = []
    for r in range(num_ranks):
        src = Source(f"node{r // 2}", r, pid=100 + r)
        for w in range(num_windows):
            step = 10 + 50 * w
            start = T0 + step * 200 * MS
            wid = f"p{step}"
            events.append(
                schema.ProfileWindow(
                    **src.env(start + 100 * MS, step),
                    window_id=wid,
                    trigger="periodic",
                    start_ns=start,
                    end_ns=start + 100 * MS,
                    duration_ns=100 * MS,
                )
            )
            mm = time_ms("aten::mm", r, w)
            kernels = [
                ("aten::mm", "cpu_op", mm),
                ("aten::matmul", "cpu_op", mm + 1.0),
                ("sm90_gemm", "kernel", time_ms("sm90_gemm", r, w)),
                ("aten::add", "cpu_op", time_ms("aten::add", r, w)),
                ("ncclDevKernel_AllReduce", "collective", time_ms("nccl", r, w)),
            ]
            for name, cat, ms in kernels:
                events.append(
                    schema.KernelSummary(
                        **src.env(start + 100 * MS, step),
                        window_id=wid,
                        name=name,
                        category=cat,
                        num_calls=10,
                        total_ns=int(ms * MS),
                        median_ns=int(ms * MS / 10),
                        max_ns=int(ms * MS / 5),
                    )
                )
    store.append(events)
    store.flush()
    return store


def noisy(base: dict[str, float]) -> KernelTime:
    """Times ``base[kernel]`` with +-5% fixed noise per (kernel, rank, window)."""

    def f(name: str, rank: int, window: int) -> float:
        return base.get(name, 5.0) * (1 + 0.05 * _jitter(len(name), rank, window))

    return f


BASE = {"aten::mm": 20.0, "sm90_gemm": 18.0, "aten::add": 5.0, "nccl": 15.0}
