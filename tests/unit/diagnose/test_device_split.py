"""On a GPU the host-side split points at nobody (the CPU issued backward long before the device
finished it, so every rank "waits"); the device's split (schema 1.11) names the slow GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from diag.diagnose.features import Features
from diag.diagnose.triage import triage
from diag.store.run_store import RunStore
from tests.fakes.events import MS, Source


def _run(tmp_path: Path, *, device: bool) -> RunStore:
    store = RunStore.create(tmp_path / ("dev" if device else "host"))
    ranks = [Source(f"node{r // 2}", r) for r in range(4)]
    events = []
    for step in range(80):
        slow = step >= 30
        for r, src in enumerate(ranks):
            # the host: every rank issues its work in 10 ms and then blocks 50 ms in the sync
            ev = src.step(step, compute_ms=10.0, wait_ms=50.0 + (15.0 if slow else 0.0))
            if device:  # the device: rank 2's GPU takes 40% longer from step 30
                gpu = 40.0 * (1.4 if slow and r == 2 else 1.0) + (r * 0.3)
                total = ev.duration_ns
                ev = dataclasses.replace(
                    ev,
                    device_duration_ns=total,
                    device_compute_ns=int(gpu * MS),
                    device_wait_ns=max(0, total - int(gpu * MS) - 5 * MS),
                )
            events.append(ev)
    store.append(events)
    store.flush()
    return store


def test_the_device_split_names_the_slow_gpu(tmp_path: Path) -> None:
    host_only = triage(_run(tmp_path, device=False))
    assert not [f for f in host_only.findings if f.ranks == (2,) and f.severity != "info"]
    store = _run(tmp_path, device=True)
    steps = Features.from_store(store).steps
    late = steps[steps["step"] >= 40].groupby("rank")["compute_ms"].median()
    assert late.idxmax() == 2 and late[2] > 1.3 * late[0]
    found = [f for f in triage(store).findings if f.severity != "info"]
    assert found and found[0].ranks == (2,) and found[0].cause == "node", found
