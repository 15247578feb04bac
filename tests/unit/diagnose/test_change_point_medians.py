"""change_point's incremental split medians give exactly what a median per candidate gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.diagnose.features import change_point


def reference(x: np.ndarray, candidates: list[int], start: int = 0, stop: int | None = None):
    """change_point as it was: two np.median calls per candidate."""
    stop = len(x) if stop is None else stop
    best, best_cost = None, np.inf
    for t in candidates:
        before, after = x[start:t], x[t:stop]
        if len(before) == 0 or len(after) == 0:
            continue
        mb, ma = float(np.median(before)), float(np.median(after))
        if ma <= mb:
            continue
        cost = float(np.abs(before - mb).sum() + np.abs(after - ma).sum())
        if cost < best_cost:
            best, best_cost = t, cost
    return best


values = st.one_of(
    st.lists(st.integers(0, 5), min_size=0, max_size=80),  # many ties
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=0, max_size=80),
    st.lists(st.sampled_from([0.1, 0.2, 0.3, 1e18, float("nan")]), max_size=40),
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(data=values, start=st.integers(0, 10), extra=st.integers(-5, 10), step=st.integers(1, 3))
def test_the_same_split_as_a_median_per_candidate(
    data: list[float], start: int, extra: int, step: int
) -> None:
    x = np.asarray(data, dtype=float if any(isinstance(v, float) for v in data) else np.int64)
    stop = max(0, len(x) - max(0, extra)) if extra >= 0 else None
    candidates = list(range(0, len(x) + 3, step))
    assert change_point(x, candidates, start, stop) == reference(x, candidates, start, stop)


def test_a_step_up_is_found() -> None:
    x = np.r_[np.full(30, 10.0), np.full(30, 20.0)]
    x[5] = 99.0  # a spike does not move a robust split
    assert change_point(x, range(1, 60)) == 30 == reference(x, list(range(1, 60)))
