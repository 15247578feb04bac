"""Replay through the run's node daemons (``diag replay --via-analyzer HOST:PORT``).

Each probe of a replay becomes a ``ProbeRequest`` on the analyzer (``RequestProbe``): for the
target's host and, when the run recorded GPU samples, the target rank's local GPU (else the CPU).
That host's daemon pulls it with its next control poll (every 0.5 s), validates it, runs it in a
low-priority child process and ships ``probe_result`` events; the analyzer stores them and folds
them into Parquet parts every second, and this runner reads them back from ``RUN_DIR/store``
(matched by ``request_id``), waiting up to the probe's ``timeout_s`` plus :data:`WAIT_GRACE_S`.
A request with no result by then comes back as a ``timeout`` result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from diag.proto import diag_pb2 as pb
from diag.replay.plan import ProbePlan
from diag.replay.replay import Runner, Target
from diag.store.run_store import RunStore
from probes.base import ProbeResult, params_dict

WAIT_GRACE_S = 45.0
POLL_S = 0.5


def local_devices(run_dir: Path) -> tuple[dict[int, int], bool]:
    """``(rank -> local_rank, whether the run recorded GPU samples)`` from the run's store."""
    store = RunStore(run_dir)
    kinds = store.kinds()
    if "step" not in kinds:
        return {}, "gpu" in kinds
    steps = store.frame("step")
    local = {int(r): int(lr) for r, lr in zip(steps["rank"], steps["local_rank"], strict=True)}
    return local, "gpu" in kinds


def results_for(run_dir: Path, request_id: str) -> list[ProbeResult]:
    """The stored ``probe_result`` rows of one request, as probe results."""
    store = RunStore(run_dir)
    if "probe_result" not in store.kinds():
        return []
    df = store.frame("probe_result")
    rows = df[df["request_id"] == request_id]
    out = []
    for row in rows.itertuples(index=False):
        value = None if pd.isna(row.value) else float(row.value)  # a timeout has none (NA)
        out.append(
            ProbeResult(
                probe=str(row.probe),
                device=str(row.device),
                status=str(row.status) if row.status != "rejected" else "failed",
                metric=str(row.metric),
                value=value,
                unit=str(row.unit),
                detail=str(row.detail),
                params=json.loads(row.params_json or "{}"),
                lower_is_better=bool(row.lower_is_better),
            )
        )
    return out


def daemon_runner(
    run_dir: Path,
    request: Callable[[pb.ProbeRequest], pb.ProbeRequest],
    *,
    grace_s: float = WAIT_GRACE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Runner:
    """A replay runner that sends each probe through ``request`` (the analyzer's
    ``RequestProbe``) and waits for its results in ``run_dir``'s store (up to the probe's
    ``timeout_s`` plus ``grace_s``)."""
    local, gpus = local_devices(run_dir)

    def run(plan: ProbePlan, target: Target) -> list[ProbeResult]:
        lr = local.get(target.rank, -1)
        issued = request(
            pb.ProbeRequest(
                probe=plan.probe,
                params_json=json.dumps(params_dict(plan.params)),
                host=target.host or "*",
                device=str(lr) if gpus and lr >= 0 else "cpu",
                rank=target.rank,
            )
        )
        deadline = clock() + float(plan.params.timeout_s) + grace_s
        while clock() < deadline:
            found = results_for(run_dir, issued.request_id)
            if found:
                return found
            sleep(POLL_S)
        base: dict[str, Any] = {"probe": plan.probe, "device": f"rank {target.rank}"}
        detail = f"no result from {target.host or 'any'} daemon (request {issued.request_id})"
        return [ProbeResult(**base, status="timeout", detail=detail)]

    return run
