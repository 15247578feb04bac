"""HighWater: each source's largest stored seq, looked up and raised for a batch at once."""

from __future__ import annotations

import numpy as np

from diag.analyzer.marks import HighWater


def _obj(*names: str) -> np.ndarray:
    return np.asarray(names, dtype=object)


def test_unseen_sources_are_minus_one_and_marks_only_rise() -> None:
    hw = HighWater()
    assert hw.lookup(_obj("a", "b")).tolist() == [-1, -1]
    hw.raise_to(_obj("a"), np.asarray([5]))
    hw.raise_to(_obj("b", "a"), np.asarray([2, 3]))  # a stays at 5
    assert hw.lookup(_obj("b", "c", "a")).tolist() == [2, -1, 5]
    hw.raise_pairs([("c", 1), ("c", 9), ("c", 4), ("a", 6)])
    assert hw.as_dict() == {"a": 6, "b": 2, "c": 9} and len(hw) == 3


def test_many_sources_agree_with_a_dict() -> None:
    rng = np.random.default_rng(0)
    hw, want = HighWater(), {}
    for _ in range(20):
        names = np.unique(rng.integers(0, 500, 200)).astype(str).astype(object)
        marks = rng.integers(0, 1000, len(names))
        hw.raise_to(names, marks)
        for n, m in zip(names.tolist(), marks.tolist(), strict=True):
            want[n] = max(m, want.get(n, -1))
        assert hw.lookup(names).tolist() == [want[n] for n in names.tolist()]
    assert hw.as_dict() == want
