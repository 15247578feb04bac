"""Step-aligned comparison of one numeric curve (loss, gradient norm) of two runs.

**Band.** Run A is the reference. At a step, B's value ``b`` is within the band around A's value
``a`` iff ``|b - a| <= atol + rtol * |a|`` (``numpy.isclose(b, a)``). Non-finite values: the same
non-finite value in both runs (NaN and NaN, +Inf and +Inf) is within the band; a non-finite value
in one run only is outside it.

**Divergence.** A single step outside the band is noise, not divergence: the curves diverge at
the first step ``S`` that is outside the band and from which at least ``persist_k`` of the
``persist_n`` compared steps ``S, S+1, ...`` (the next ``persist_n`` steps both runs have) are
outside it; the default is 3 of 5. Steps past the end of the shorter run do not count, so a
break in only the last ``persist_k - 1`` compared steps is never called a divergence.

**Ranks.** When both runs have the same ranks, each rank's curve is compared with the same rank's
(ranks see different data, so their losses differ); the divergence is the earliest over ranks.
Otherwise (1 vs N ranks, or a rank missing from one run) the job-level curve is compared: the
mean over ranks at each step, over the steps every rank of the run recorded.

Deviations: ``abs = |b - a|``, ``rel = |b - a| / |a|`` (steps with ``a == 0`` or a non-finite
value left out of ``rel``; non-finite values left out of both maxima).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True, slots=True, kw_only=True)
class Band:
    """The tolerance band of one metric: ``|b - a| <= atol + rtol * |a|``; divergence when
    ``persist_k`` of ``persist_n`` consecutive compared steps are outside it."""

    rtol: float
    atol: float
    persist_k: int = 3
    persist_n: int = 5

    def outside(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per step: True where ``b`` is outside the band around ``a``."""
        with np.errstate(invalid="ignore", over="ignore"):
            within = np.abs(b - a) <= self.atol + self.rtol * np.abs(a)
        same = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & (a == b))
        return ~(within | same)


@dataclass(frozen=True, slots=True, kw_only=True)
class CurveDiff:
    """One metric of the two runs compared step by step (run A's step numbers).

    ``mode``: "rank" (each rank against the same rank) or "job" (means over ranks).
    ``num_compared``: points compared ((rank, step) pairs, or steps in job mode); ``num_outside``
    of them outside the band, the first at ``first_outside_step``. ``divergent_step``: where the
    curves diverge (module doc), ``None`` if they do not; ``divergent_rank`` the rank (rank mode).
    ``max_abs_dev``/``max_rel_dev``: the largest deviations, at ``max_dev_step`` (the largest
    relative one). ``curve``: the job-level curves for plotting, columns ``step``, ``a``, ``b``
    (NaN where a run has no value).
    """

    metric: str
    mode: str
    band: Band
    num_compared: int
    num_outside: int
    first_outside_step: int | None
    divergent_step: int | None
    divergent_rank: int | None
    max_abs_dev: float
    max_rel_dev: float
    max_dev_step: int | None
    curve: pd.DataFrame = field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "mode": self.mode,
            "rtol": self.band.rtol,
            "atol": self.band.atol,
            "persist": f"{self.band.persist_k} of {self.band.persist_n}",
            "num_compared": self.num_compared,
            "num_outside": self.num_outside,
            "first_outside_step": self.first_outside_step,
            "divergent_step": self.divergent_step,
            "divergent_rank": self.divergent_rank,
            "max_abs_dev": self.max_abs_dev,
            "max_rel_dev": self.max_rel_dev,
            "max_dev_step": self.max_dev_step,
        }


def first_divergence(outside: np.ndarray, band: Band) -> int | None:
    """Index of the first point outside the band with ``persist_k`` of the ``persist_n`` points
    from it outside, or ``None``."""
    hits = np.flatnonzero(outside)
    for i in hits:
        if int(outside[i : i + band.persist_n].sum()) >= band.persist_k:
            return int(i)
    return None


def job_curve(frame: pd.DataFrame, ranks: int) -> pd.Series:
    """Mean over ranks per step (``frame``: ``rank``, ``step``, ``value``), at the steps all
    ``ranks`` ranks recorded; NaN stays NaN."""
    if frame.empty:
        return pd.Series(dtype="float64")
    grouped = frame.groupby("step")["value"]
    counts = grouped.size()
    means = grouped.agg(lambda v: float(np.mean(v.to_numpy(dtype="float64"))))
    return means[counts >= ranks].astype("float64")


def compare(metric: str, a: pd.DataFrame, b: pd.DataFrame, band: Band) -> CurveDiff | None:
    """Compare two curves (``rank``, ``step``, ``value``; B already on A's step numbers).

    ``None`` when they share no step (nothing compared)."""
    ranks_a, ranks_b = set(a["rank"]), set(b["rank"])
    job_a, job_b = job_curve(a, len(ranks_a)), job_curve(b, len(ranks_b))
    curve = pd.DataFrame({"a": job_a, "b": job_b}).rename_axis("step").reset_index()
    if ranks_a == ranks_b:
        mode = "rank"
        pairs = a.merge(b, on=["rank", "step"], suffixes=("_a", "_b"))
        pairs = pairs.rename(columns={"value_a": "a", "value_b": "b"})
    else:
        mode = "job"
        both = job_a.index.intersection(job_b.index)  # NaN values kept: a NaN loss compares
        pairs = pd.DataFrame({"step": both, "a": job_a[both].values, "b": job_b[both].values})
        pairs["rank"] = -1
    if pairs.empty:
        return None
    pairs = pairs.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    av = pairs["a"].to_numpy(dtype="float64")
    bv = pairs["b"].to_numpy(dtype="float64")
    out = band.outside(av, bv)
    div_step: int | None = None
    div_rank: int | None = None
    for rank, idx in pairs.groupby("rank", sort=True).indices.items():
        i = first_divergence(out[idx], band)
        if i is None:
            continue
        step = int(pairs["step"].iat[idx[i]])
        if div_step is None or step < div_step:
            div_step, div_rank = step, (int(rank) if mode == "rank" else None)
    steps = pairs["step"].to_numpy()
    outside_steps = steps[out]
    return CurveDiff(
        metric=metric,
        mode=mode,
        band=band,
        num_compared=len(pairs),
        num_outside=int(out.sum()),
        first_outside_step=int(outside_steps.min()) if len(outside_steps) else None,
        divergent_step=div_step,
        divergent_rank=div_rank,
        **_deviations(av, bv, steps),
        curve=curve,
    )


def _deviations(a: np.ndarray, b: np.ndarray, steps: np.ndarray) -> dict[str, Any]:
    finite = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):
        dev = np.where(finite, np.abs(b - a), 0.0)
    rel_ok = finite & (a != 0)
    rel = np.where(rel_ok, dev / np.where(rel_ok, np.abs(a), 1.0), 0.0)
    max_abs = float(dev.max()) if finite.any() else 0.0
    if rel_ok.any():
        i = int(np.argmax(np.where(rel_ok, rel, -1.0)))
        max_rel, at = float(rel[i]), int(steps[i])
    else:
        max_rel, at = 0.0, None
    if max_abs == 0.0 and max_rel == 0.0:
        at = None
    return {
        "max_abs_dev": max_abs if math.isfinite(max_abs) else 0.0,
        "max_rel_dev": max_rel if math.isfinite(max_rel) else 0.0,
        "max_dev_step": at,
    }
