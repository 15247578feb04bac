"""The vectorized spike rule (every rank's losses in one pass, the baseline computed only where a
spike is possible) finds exactly what the rule applied one series at a time finds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from diag.diagnose.detectors.drift_rules import MAD_SIGMA, Spike, spikes, spikes_table


def _reference(series: pd.Series, window: int, min_history: int, k: float, min_ratio: float,
               rel_floor: float) -> list[Spike]:  # fmt: skip
    """The rule as written in the module docstring, one position at a time."""
    s = series[np.isfinite(series.to_numpy(dtype=float))].astype(float)
    values, steps, out = s.to_numpy(), s.index.to_numpy(), []
    for i in range(len(values)):
        prev = values[max(0, i - window) : i]
        if len(prev) < max(min_history, 1):
            continue
        med = float(np.median(prev))
        mad = MAD_SIGMA * float(np.median(np.abs(prev - med)))
        scale = max(mad, rel_floor * abs(med))
        if values[i] > med + k * scale and values[i] > min_ratio * med:
            out.append(Spike(int(steps[i]), float(values[i]), med, mad))
    return out


def _series(rng: np.random.Generator, n: int) -> pd.Series:
    base = 3.0 * np.exp(-np.arange(n) / rng.uniform(20, 200)) + rng.normal(0, 0.02, n)
    if rng.random() < 0.3:
        base -= 2.5  # some series cross zero: the ratio screen must not cut them
    for i in rng.choice(n, size=min(n, int(rng.integers(0, 4))), replace=False):
        base[i] *= rng.choice([5.0, 50.0, np.nan, np.inf])
    steps = np.sort(rng.choice(np.arange(3 * n), size=n, replace=False))  # gaps
    return pd.Series(base, index=steps)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("min_ratio", [2.0, 0.0, -1.0])
def test_the_table_finds_what_one_series_at_a_time_finds(seed: int, min_ratio: float) -> None:
    rng = np.random.default_rng(seed)
    kw = dict(window=int(rng.integers(3, 30)), min_history=int(rng.integers(0, 8)), k=4.0,
              min_ratio=min_ratio, rel_floor=0.01)  # fmt: skip
    by_rank = {r: _series(rng, int(rng.integers(0, 120))) for r in range(40)}
    table = pd.concat(
        [pd.DataFrame({"group": r, "step": s.index, "value": s.to_numpy()})
         for r, s in by_rank.items()], ignore_index=True,
    )  # fmt: skip
    found = spikes_table(table, **kw)
    for rank, s in by_rank.items():
        want = _reference(s, **kw)
        got = found.get(rank, [])
        assert [(g.step, g.value) for g in got] == [(w.step, w.value) for w in want], rank
        assert np.allclose([g.median for g in got], [w.median for w in want])
        assert np.allclose([g.mad for g in got], [w.mad for w in want])
        assert spikes(s, **kw) == got  # the one-series form is the same rule
    assert sum(map(len, found.values())) > 0  # the cases hold spikes to find
