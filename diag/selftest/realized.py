"""What an injected fault cost the job, read back from the job's own step events.

A fault is sized to cost a share ``S`` of the step (``step x S / (1 - S)`` of extra time), but
whether it does depends on the machine: a CPU hog pinned beside two ranks of a job that leaves
the cores idle while it synchronizes, or a lossy link on a job whose messages fit in the queue,
can cost the job nothing. A fail-slow detector that stays silent there is right, and a suite that
counts those cases as misses measures the injector, not the detector. So the suite reads back
what each fault cost: the job's mean step time after the onset against the steps before it
(the median of the ranks' durations per step: in synchronous training every rank waits for the
slowest, and the median is not moved by one rank's own accounting). The mean, not the median,
because intermittent faults (a rank stopped in short bursts, long garbage collections in a share
of the steps) cost the job through their outliers.

A fault *took* when it cost at least a third of its target share (and at least
:data:`MIN_COST`); a case whose cost cannot be read (no onset, too few steps) counts as taken.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from diag.errors import DiagError
from diag.store.run_store import RunStore

#: Below this cost (a share of the job's step) a fault is within a shared VM's noise.
MIN_COST = 0.05
#: Steps left out at the start (warm-up) and the fewest steps each side must have.
WARMUP_STEPS = 3
MIN_STEPS = 5


def achieved_cost(run_dir: Path, onset_step: int | None) -> float | None:
    """``1 - mean step before the onset / mean step from the onset on`` (the share of the
    job's step the fault took), ``None`` where it cannot be read."""
    if onset_step is None:
        return None
    try:
        df = RunStore.open(run_dir).frame("step")
    except (DiagError, OSError):
        return None
    if df.empty:
        return None
    per_step = df.groupby("step")["duration_ns"].median()
    steps = per_step.index.to_numpy()
    values = per_step.to_numpy(dtype=np.float64)
    before = values[(steps >= WARMUP_STEPS) & (steps < onset_step)]
    after = values[steps >= onset_step]
    if len(before) < MIN_STEPS or len(after) < MIN_STEPS:
        return None
    return float(1.0 - before.mean() / after.mean())


def took(cost: float | None, severity: float) -> bool:
    """Did a fault of target share ``severity`` that cost ``cost`` take (see the module)?"""
    return cost is None or cost >= max(MIN_COST, severity / 3)
