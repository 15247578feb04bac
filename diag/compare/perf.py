"""Step time by phase and kernel time of two runs, and when run B counts as slower than run A.

**Phases.** For each phase (:data:`~diag.compare.series.PHASE_COLUMNS`) and the whole step,
each run's value is the median over its (rank, step) rows after its first :data:`WARMUP_STEPS`
steps (its process's start-up: allocator and caches warming, DDP's bucket rebuild), over all of
the run's steps rather than the common ones: step time is a property of a run's steady state,
and a resumed run's steps are its process's first while the run it resumed from was long warm
at the same step numbers. The delta is ``B - A`` in milliseconds and as a share of A's median
step (``pct_of_step``).

**Noise.** A run's own spread bounds what a delta can mean: ``noise_ms`` is the largest of
(1) each run's drift, ``|median of its first half of steps - median of its second half|``, and
(2) three standard errors of the difference of the medians, ``3 * sqrt(se_a^2 + se_b^2)`` with
``se = 1.2533 * (IQR / 1.349) / sqrt(number of steps)`` (the median's standard error for a
normal sample whose sigma is estimated from the interquartile range).

**Slower.** B is slower iff its median step is at least ``min_pct`` (default
:data:`MIN_SLOWER_PCT`, 5%) longer than A's and the step delta is above ``noise_ms``. The phase
named is the one with the largest increase; among phases within 10% of that increase the more
specific one is named (:data:`SPECIFIC_FIRST`: a slower forward also makes compute slower, a
longer collective wait also makes backward longer). A faster B is never a verdict.

**Kernels.** From each run's profiler windows (:func:`diag.traces.kernels.from_store`): a
kernel's time per step is the median over ranks of its time per window, divided by the median
number of steps per window, over complete windows only; the top changes by ``|B - A|`` are
listed, the heavier first on ties (a kernel only one run ran counts as 0 in the other).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from diag.compare.series import PHASE_COLUMNS
from diag.traces.kernels import KernelTable

#: A median step longer by less than this share (%) of run A's is never called slower.
MIN_SLOWER_PCT = 5.0
#: Each run's first steps, left out of the step-time comparison (see the module doc).
WARMUP_STEPS = 5
#: Phase named for a slowdown, among those within :data:`_NEAR` of the largest increase.
SPECIFIC_FIRST = (
    "data",
    "checkpoint",
    "optimizer",
    "forward",
    "collective wait",
    "backward",
    "compute",
    "other",
)
_NEAR = 0.9
_NS_PER_MS = 1e6


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseDelta:
    """One phase (or ``"step"``): medians in ms, ``delta_ms = b_ms - a_ms``, ``pct_of_step`` =
    ``delta_ms`` / A's median step x 100, ``noise_ms`` (module doc)."""

    phase: str
    a_ms: float
    b_ms: float
    delta_ms: float
    pct_of_step: float
    noise_ms: float

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "a_ms": round(self.a_ms, 4),
            "b_ms": round(self.b_ms, 4),
            "delta_ms": round(self.delta_ms, 4),
            "pct_of_step": round(self.pct_of_step, 2),
            "noise_ms": round(self.noise_ms, 4),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Slowdown:
    """B's median step against A's: ``pct`` longer (negative: faster), ``phase`` with the largest
    increase (its ``phase_delta_ms``), ``slower`` per the rule in the module doc."""

    pct: float
    delta_ms: float
    noise_ms: float
    phase: str | None
    phase_delta_ms: float
    slower: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelDelta:
    """One kernel's time per step in each run (ms), ``delta_ms = b_ms - a_ms`` and ``ratio`` =
    ``b_ms / a_ms`` (``None`` when A never ran it)."""

    name: str
    category: str
    a_ms: float
    b_ms: float
    delta_ms: float
    ratio: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "category": self.category,
            "a_ms": round(self.a_ms, 4),
            "b_ms": round(self.b_ms, 4),
            "delta_ms": round(self.delta_ms, 4),
            "ratio": None if self.ratio is None else round(self.ratio, 4),
        }


def phase_deltas(a: pd.DataFrame, b: pd.DataFrame) -> tuple[PhaseDelta, ...]:
    """The step and every phase, from two step frames (``step``, ``step_ms`` and one column per
    phase), each over all of its rows (the caller leaves out the warm-up)."""
    base = float(a["step_ms"].median())
    out = []
    for phase, column in [("step", "step_ms"), *((p, p) for p in PHASE_COLUMNS)]:
        a_ms, b_ms = float(a[column].median()), float(b[column].median())
        out.append(
            PhaseDelta(
                phase=phase,
                a_ms=a_ms,
                b_ms=b_ms,
                delta_ms=b_ms - a_ms,
                pct_of_step=(b_ms - a_ms) / base * 100 if base > 0 else 0.0,
                noise_ms=_noise(a, b, column),
            )
        )
    return tuple(out)


def _noise(a: pd.DataFrame, b: pd.DataFrame, column: str) -> float:
    return max(_drift(a, column), _drift(b, column), 3 * math.hypot(_se(a, column), _se(b, column)))


def _se(frame: pd.DataFrame, column: str) -> float:
    values = frame[column].to_numpy(dtype="float64")
    n = frame["step"].nunique()
    if n < 2:
        return 0.0
    q1, q3 = np.percentile(values, [25, 75])
    return 1.2533 * (float(q3 - q1) / 1.349) / math.sqrt(n)


def _drift(frame: pd.DataFrame, column: str) -> float:
    steps = np.sort(frame["step"].unique())
    if len(steps) < 4:
        return 0.0
    first = frame["step"] <= steps[len(steps) // 2 - 1]
    return abs(float(frame.loc[first, column].median()) - float(frame.loc[~first, column].median()))


def slowdown(phases: tuple[PhaseDelta, ...], min_pct: float = MIN_SLOWER_PCT) -> Slowdown:
    """Whether B is slower than A, by how much, and in which phase (module doc)."""
    step = next(p for p in phases if p.phase == "step")
    pct = step.delta_ms / step.a_ms * 100 if step.a_ms > 0 else 0.0
    grown = [p for p in phases if p.phase != "step" and p.delta_ms > 0]
    phase, phase_delta = None, 0.0
    if grown:
        top = max(p.delta_ms for p in grown)
        near = {p.phase: p for p in grown if p.delta_ms >= _NEAR * top}
        name = next(n for n in SPECIFIC_FIRST if n in near)
        phase, phase_delta = name, near[name].delta_ms
    return Slowdown(
        pct=pct,
        delta_ms=step.delta_ms,
        noise_ms=step.noise_ms,
        phase=phase,
        phase_delta_ms=phase_delta,
        slower=pct >= min_pct and step.delta_ms > step.noise_ms,
    )


def kernel_deltas(
    a: KernelTable | None,
    a_window_steps: float,
    b: KernelTable | None,
    b_window_steps: float,
    *,
    top: int = 10,
) -> tuple[KernelDelta, ...]:
    """The ``top`` kernels whose time per step changed most; empty unless both runs have kernel
    tables."""
    if a is None or b is None:
        return ()
    per_a = {(r.name, r.category): r.median_ns / a_window_steps / _NS_PER_MS for r in a.rows}
    per_b = {(r.name, r.category): r.median_ns / b_window_steps / _NS_PER_MS for r in b.rows}
    rows = []
    for key in per_a.keys() | per_b.keys():
        a_ms, b_ms = per_a.get(key, 0.0), per_b.get(key, 0.0)
        rows.append(
            KernelDelta(
                name=key[0],
                category=key[1],
                a_ms=a_ms,
                b_ms=b_ms,
                delta_ms=b_ms - a_ms,
                ratio=b_ms / a_ms if a_ms > 0 else None,
            )
        )
    rows.sort(key=lambda k: (-abs(k.delta_ms), -max(k.a_ms, k.b_ms), k.name, k.category))
    return tuple(rows[:top])
