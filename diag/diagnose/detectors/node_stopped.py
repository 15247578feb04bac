"""A rank process found stopped, again and again: while stopped it cannot train.

The daemon reads each rank process's state every ``DaemonConfig.state_interval_s`` (0.25 s) and
counts, per :class:`~diag.schema.ProcSample`, how often its main (training) thread was stopped
(``T``/``t``: SIGSTOP, a job-control or scheduler suspend, a tracer such as a debugger or a
blocking stack sampler). A rank frozen that way loses its time in bursts, and when the bursts
land inside the collectives (where every rank waits alike) no timing comparison singles it out:
its compute is its peers', its run-queue delay too. The state says it directly.

A rank is *stopped* when it was found stopped in at least ``min_stopped`` reads and in at least
``min_share`` of its reads from the first to the last time it was, while no other rank of its
work class was found stopped more than once (a suspend of the whole job stops every rank: that
is not one rank's fault). Onset: within the host interval of the first sample that found it
stopped (many short steps), the change point of the job's step time, else that interval's last
step; detected: the step running at the end of the sample that made ``min_stopped``.
Slowdown: the growth of the job's median step from before the onset to after it, as the other
node findings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.diagnose.features import change_point

#: steps of context on each side of the sample interval when dating the onset
CONTEXT = 10


@dataclass(frozen=True, slots=True)
class Stopped:
    rank: int
    num_stopped: int
    num_samples: int  # its state reads from its first stopped interval to its last
    peers_stopped: int  # the most any of its peers was found stopped
    onset: int  # step
    detected: int  # step
    slowdown: float
    anomaly: tuple[int, int]
    before: tuple[int, int] | None


def find_stopped(
    proc: pd.DataFrame,
    steps: pd.DataFrame,
    job_step: pd.Series,
    classes: Mapping[int, int] | None,
    *,
    min_stopped: int,
    min_share: float,
) -> list[Stopped]:
    """The stopped ranks (module docstring). ``proc``: ProcSample rows; ``steps``: StepEvent
    rows (``rank``, ``step``, ``end_ns``) to map sample times to steps; ``job_step``: the job's
    step time per step (ms)."""
    need = {"rank", "ts_ns", "num_state_samples", "num_stopped"}
    if proc.empty or not need <= set(proc.columns) or steps.empty or job_step.empty:
        return []
    p = proc[proc["num_state_samples"] > 0]
    totals = p.groupby("rank")["num_stopped"].sum()
    if totals.empty or int(totals.max()) < min_stopped:
        return []
    ends = steps.groupby("step")["end_ns"].median().sort_index()
    out = []
    for rank, total in totals.items():
        r = int(rank)
        if int(total) < min_stopped:
            continue
        cls = None if classes is None else classes.get(r)
        peers = [int(q) for q in totals.index if int(q) != r]
        if classes is not None:
            peers = [q for q in peers if classes.get(q) == cls]
        peers_stopped = max((int(totals[q]) for q in peers), default=0)
        if peers_stopped > 1:
            continue  # its peers are stopped too: the job, not this rank
        mine = p[p["rank"] == rank].sort_values("ts_ns")
        hit = mine[mine["num_stopped"] > 0]
        first, last = int(hit["ts_ns"].iloc[0]), int(hit["ts_ns"].iloc[-1])
        span = mine[mine["ts_ns"].between(first, last)]
        num_samples = int(span["num_state_samples"].sum())
        if num_samples <= 0 or int(total) < min_share * num_samples:
            continue
        counted = hit["num_stopped"].cumsum().to_numpy()
        interval = int(hit["interval_ns"].iloc[0]) if "interval_ns" in hit.columns else 0
        detected_ts = int(hit["ts_ns"].iloc[int(np.argmax(counted >= min_stopped))])
        onset = _onset(ends, job_step, first - interval, first)
        detected = max(onset, _step_at(ends, detected_ts))
        steps_index = job_step.index.to_numpy()
        before = job_step[job_step.index < onset]
        after = job_step[job_step.index >= onset]
        slowdown = 0.0
        if len(before) and len(after) and (a := float(after.median())) > 0:
            slowdown = max(0.0, (a - float(before.median())) / a)
        out.append(
            Stopped(
                rank=r,
                num_stopped=int(total),
                num_samples=num_samples,
                peers_stopped=peers_stopped,
                onset=onset,
                detected=detected,
                slowdown=slowdown,
                anomaly=(onset, int(steps_index[-1])),
                before=(int(steps_index[0]), int(before.index[-1])) if len(before) else None,
            )
        )
    return out


def _onset(ends: pd.Series, job_step: pd.Series, lo_ns: int, hi_ns: int) -> int:
    """The step the stops began: the first sample that found the rank stopped covers
    ``[lo_ns, hi_ns]`` (one host interval: many short steps); within it, the step at which the
    job's step time rises (robust change point, ``window`` steps of context each side), else
    the interval's last step."""
    last = _step_at(ends, hi_ns)
    inside = ends.index[(ends.to_numpy() >= lo_ns) & (ends.to_numpy() <= hi_ns)]
    x = job_step.to_numpy(dtype=float)
    pos = {int(st): i for i, st in enumerate(job_step.index)}
    cands = sorted(pos[int(st)] for st in inside if int(st) in pos and pos[int(st)] > 0)
    if not cands:
        return last
    found = change_point(
        np.nan_to_num(x), range(cands[0], cands[-1] + 1), max(0, cands[0] - CONTEXT),
        min(len(x), cands[-1] + CONTEXT),
    )  # fmt: skip
    return last if found is None else int(job_step.index[found])


def _step_at(ends: pd.Series, ts_ns: int) -> int:
    """The step running at ``ts_ns``: the first whose (median) end is at or after it."""
    pos = int(np.searchsorted(ends.to_numpy(), ts_ns, side="left"))
    return int(ends.index[min(pos, len(ends) - 1)])
