"""Whether ``diag diff`` compared whole runs: each run's recorded steps against the other run's and
against how far its own job went.

Equivalence is a claim about every step both jobs made. It does not hold when the comparison
covers only part of them, however well those parts agree, so the verdict is then ``incomplete``
(:mod:`diag.compare.diff`) and says why:

- **Against the other run.** On run A's step numbers (after alignment), each run's last recorded
  step: a run that stops short of the other leaves the other's later steps without a counterpart
  (a resumed run that recorded steps 20..60 against a reference that ran to 99).
- **Against its own job** (:func:`job_progress`). The ranks of one job step together, so the job
  reached at least the highest step any rank recorded; a rank whose recorded steps stop short of
  it lost steps. And a job that ran on after its last recorded step kept issuing collectives,
  which the hook attributes to the step still in progress: at least :data:`MIN_LOST_STEPS` steps'
  worth of them (the rank's median collectives per recorded step) spread over at least as many
  median step times mean the job went on for about ``count / per step`` more steps than were
  recorded (a hook that stopped counting steps, e.g. one that followed only the first optimizer
  instance of a job that built a new one). A job's teardown (a final barrier, an evaluation, a
  last save) is less than that. Without collectives (one rank, no process group) only the first
  check applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

MIN_LOST_STEPS = 3  # steps' worth of collectives after the last recorded step (count and time)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobProgress:
    """How far one run's job went against what was recorded, on the run's own step numbers.

    ``last_step``: the highest step any rank recorded. ``job_last_step``: the last step the job
    reached as far as the run shows (>= ``last_step``). ``reasons``: one line per shortfall
    (empty when every rank recorded every step the job made).
    """

    last_step: int
    job_last_step: int
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"job_last_step": self.job_last_step, "lost_steps": list(self.reasons)}


def job_progress(steps: pd.DataFrame, collectives: pd.DataFrame | None) -> JobProgress:
    """From a run's step events (``rank``, ``step``, ``end_ns``, ``duration_ns``,
    ``num_collectives``; one row per rank and step) and collective events (``rank``, ``step``,
    ``enqueue_ns``, ``end_ns``; None without), see the module docstring."""
    last = int(steps["step"].max())
    job_last = last
    reasons: list[str] = []
    per_rank = steps.groupby("rank")
    short = {int(r): int(g["step"].max()) for r, g in per_rank if int(g["step"].max()) < last}
    if short:
        listed = ", ".join(f"rank {r} at {s}" for r, s in sorted(short.items())[:8])
        more = f" and {len(short) - 8} more" if len(short) > 8 else ""
        reasons.append(f"ranks stop short of the job's last recorded step {last}: {listed}{more}")
    if collectives is not None and len(collectives):
        colls = collectives[collectives["rank"] >= 0]
        after_by_rank = {int(r): g for r, g in colls.groupby("rank")}
        for rank, mine in per_rank:
            rank = int(rank)
            extra = _ran_on(mine, after_by_rank.get(rank))
            if extra is not None:
                steps_on, count, per_step, span_s = extra
                reached = int(mine["step"].max()) + steps_on
                if reached > job_last:
                    job_last = reached
                reasons.append(
                    f"rank {rank} ran on after its last recorded step {int(mine['step'].max())}: "
                    f"{count} collectives over {span_s:.1f} s (~{steps_on} steps at its "
                    f"{per_step:g} per step) were never part of a recorded step"
                )
    return JobProgress(last_step=last, job_last_step=job_last, reasons=tuple(_first(reasons)))


def _ran_on(
    steps: pd.DataFrame, colls: pd.DataFrame | None
) -> tuple[int, int, float, float] | None:
    """(steps the rank ran on, collectives after, collectives per step, their span in s), or
    None when what follows the rank's last recorded step is no more than a teardown."""
    if colls is None or colls.empty:
        return None
    last = steps.loc[steps["step"].idxmax()]
    after = colls[colls["step"] > int(last["step"])]
    if after.empty:
        return None
    per_step = float(steps["num_collectives"].median())
    if not per_step > 0:
        per_step = float(colls[colls["step"] <= int(last["step"])].groupby("step").size().median())
    step_ns = float(steps["duration_ns"].median())
    if not (per_step > 0 and step_ns > 0):
        return None
    ends = after["end_ns"].fillna(after["enqueue_ns"])
    span_ns = float(ends.max()) - float(last["end_ns"])
    count = len(after)
    if count < MIN_LOST_STEPS * per_step or span_ns < MIN_LOST_STEPS * step_ns:
        return None
    return int(count // per_step), count, per_step, span_ns / 1e9


def _first(reasons: list[str], keep: int = 4) -> list[str]:
    if len(reasons) <= keep:
        return reasons
    return [*reasons[:keep], f"and {len(reasons) - keep} more ranks like these"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Coverage:
    """What the comparison covered, on run A's step numbers: each run's last recorded step and
    the last step its job reached (B's shifted by the alignment offset); ``reasons`` says what
    was left out (empty: both runs recorded every step both jobs made, up to the same step)."""

    a_last_step: int
    b_last_step: int
    a_job_last_step: int
    b_job_last_step: int
    reasons: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "a_last_step": self.a_last_step,
            "b_last_step": self.b_last_step,
            "a_job_last_step": self.a_job_last_step,
            "b_job_last_step": self.b_job_last_step,
            "reasons": list(self.reasons),
        }


def coverage(a: JobProgress, b: JobProgress, offset: int) -> Coverage:
    """The two runs' coverage, B on A's step numbers (``offset``: see
    :class:`~diag.compare.series.Alignment`)."""
    b_last, b_job = b.last_step + offset, b.job_last_step + offset
    reasons = [f"run A: {r}" for r in a.reasons] + [f"run B: {r}" for r in b.reasons]
    if b_last < a.last_step:
        reasons.append(
            f"run B's recorded steps end at step {b_last} (on A's numbers), run A's at "
            f"{a.last_step}: A's steps {b_last + 1}..{a.last_step} were not compared"
        )
    elif a.last_step < b_last:
        reasons.append(
            f"run A's recorded steps end at step {a.last_step}, run B's at {b_last} (on A's "
            f"numbers): B's steps {a.last_step + 1}..{b_last} were not compared"
        )
    return Coverage(
        a_last_step=a.last_step,
        b_last_step=b_last,
        a_job_last_step=a.job_last_step,
        b_job_last_step=b_job,
        reasons=tuple(reasons),
    )
