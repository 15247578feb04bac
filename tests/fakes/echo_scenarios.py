"""A slow link with echoes: the ranks at its ends also read as computing longer.

4 ranks on 2 hosts (node-a: 0, 1; node-b: 2, 3), data-parallel groups dp0 = {0, 2} and dp1 =
{1, 3}, each with two timed all-reduces of 64 MiB per step (10 ms each), then a sync of every
rank at the step's end (so every step lasts as long as the slowest rank's). From ``onset`` the
link under dp0 is ``slow_factor`` x slower, and dp0's ranks' compute grows by ``echo_ms`` (on a
busy host the time spent waiting for the slow link partly reads as compute). Jitter is a fixed
pattern, not random.
"""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source
from tests.fakes.link_kernel_scenarios import _jitter

HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
GROUPS = {"dp0": (0, 2), "dp1": (1, 3)}
MB = 1 << 20


def echo_run(
    tmp: Path,
    *,
    num_steps: int = 80,
    onset: int = 40,
    slow_factor: float = 3.0,
    echo_ms: float = 25.0,
) -> RunStore:
    """The run described in the module docstring, written into a real store at ``tmp``."""
    store = RunStore.create(tmp)
    src = {r: Source(HOSTS[r], r, pid=100 + r) for r in HOSTS}
    events: list[schema.Event] = []
    t = T0
    for step in range(num_steps):
        late = step >= onset
        compute = {r: 100.0 * (1 + 0.01 * _jitter(step, r)) for r in HOSTS}
        if late:
            for r in GROUPS["dp0"]:
                compute[r] += echo_ms
        done: dict[int, float] = {}  # when each rank's collectives end (ms into the step)
        colls: dict[int, float] = dict.fromkeys(HOSTS, 0.0)
        for gi, (g, ranks) in enumerate(GROUPS.items()):
            clock = max(compute[r] for r in ranks)
            for k in range(2):
                transfer = 10.0 * (1 + 0.02 * _jitter(step, gi, k))
                if g == "dp0" and late:
                    transfer *= slow_factor
                arrive = {r: (compute[r] if k == 0 else clock) for r in ranks}
                last = max(arrive.values())
                for r in ranks:
                    dur = last - arrive[r] + transfer
                    colls[r] += dur
                    enq = t + int(arrive[r] * MS)
                    events.append(
                        schema.CollectiveEvent(
                            **src[r].env(enq, step),
                            op="allreduce",
                            pg_name=g,
                            pg_size=2,
                            seq_id=step * 2 + k,
                            num_bytes=64 * MB,
                            enqueue_ns=enq,
                            start_ns=enq,
                            end_ns=enq + int(dur * MS),
                            duration_ns=int(dur * MS),
                        )
                    )
                clock = last + transfer
            for r in ranks:
                done[r] = clock
        end = max(done.values())  # every rank meets the others at the step's end
        dur_ms = end + 5.0
        for r in HOSTS:
            wait = colls[r] + (end - done[r])
            dur = int(dur_ms * MS)
            events.append(
                schema.StepEvent(
                    **src[r].env(t + dur, step),
                    start_ns=t,
                    end_ns=t + dur,
                    duration_ns=dur,
                    data_wait_ns=5 * MS,
                    forward_ns=int(compute[r] * 0.3 * MS),
                    backward_ns=int((compute[r] * 0.6 + wait) * MS),
                    optimizer_ns=int(compute[r] * 0.1 * MS),
                    compute_ns=int(compute[r] * MS),
                    collective_wait_ns=int(wait * MS),
                    loss=1.0,
                    num_collectives=2,
                )
            )
        t += int(dur_ms * MS) + 2 * MS
    store.append(events)
    store.flush()
    return RunStore.open(tmp)
