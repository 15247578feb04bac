"""Each source's high-water mark (the largest ``seq`` stored), looked up for a whole batch at once.

The analyzer drops an event whose ``(source, seq)`` it already holds; a source numbers its events
from 0 without reuse, so the largest ``seq`` stored per source is all it needs to remember. At
fleet scale a batch names thousands of sources: a batch's lookups and updates go through the
dict in C (``map(dict.get, ...)``, ``dict.update(zip(...))``) into numpy arrays, not a Python
step per source.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable

import numpy as np


class HighWater:
    """Key -> its largest mark (-1 for a key not seen): a source's stored ``seq``, or a rank's
    newest step."""

    def __init__(self) -> None:
        self._marks: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._marks)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """The marks of ``keys`` (an array), -1 where not seen."""
        got = map(self._marks.get, keys.tolist(), itertools.repeat(-1))
        return np.fromiter(got, dtype=np.int64, count=len(keys))

    def raise_to(self, keys: np.ndarray, marks: np.ndarray) -> None:
        """Raise each of ``keys`` (distinct) to its mark in ``marks`` where that is higher."""
        higher = marks > self.lookup(keys)
        self._marks.update(zip(keys[higher].tolist(), marks[higher].tolist(), strict=True))

    def raise_pairs(self, pairs: Iterable[tuple[Hashable, int]]) -> None:
        """Raise marks from ``(key, mark)`` pairs (any order, repeats allowed)."""
        marks = self._marks
        for key, mark in pairs:
            if mark > marks.get(key, -1):
                marks[key] = int(mark)

    def as_dict(self) -> dict[Hashable, int]:
        return dict(self._marks)
