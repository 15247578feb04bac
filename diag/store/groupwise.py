"""Medians per group over long frames, without a pandas group-by.

A group-by median over 16k ranks x 50 steps took ~0.2 s per column (seven columns in the run
summary, five more in the work-class profiles). Here each column becomes one group x
row-of-the-group grid (NaN padded), sorted along its rows once; the median is one or two
entries of each row, with the same arithmetic as pandas' (the mean of the two middle values
for an even count; missing values skipped; NaN for a group with none). Where one group holds
far more rows than the others the grid would be mostly padding: one lexsort per column there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pandas as pd


def last_by(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(groups, positions)``: the sorted distinct integer ``keys`` and the position of each
    one's last row. Dense keys (ranks) in one pass with no sort or hash table (a group-by's
    keys and order were ~100 MB at 131,072 ranks x 50 steps); others by one sort."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo, hi = int(keys.min()), int(keys.max())
    if lo >= 0 and hi <= 4 * len(keys) + 4096:
        index = np.int32 if len(keys) < 2**31 else np.int64
        last: np.ndarray = np.full(hi + 1, -1, dtype=index)
        np.maximum.at(last, keys, np.arange(len(keys), dtype=index))
        groups = np.flatnonzero(last >= 0)
        return groups, last[groups].astype(np.int64)
    groups, first = np.unique(keys[::-1], return_index=True)  # a key's first, reversed: last
    return groups, len(keys) - 1 - first


def medians_by(keys: np.ndarray, columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict]:
    """``(groups, {name: medians})``: the sorted distinct ``keys`` and, per column (floats, NaN
    missing, as long as ``keys``), each group's median, aligned with ``groups``."""
    codes, groups = pd.factorize(np.asarray(keys), sort=True)
    num = len(groups)
    counts = np.bincount(codes, minlength=num)
    width = int(counts.max()) if num else 0
    grid_ok = num * width <= 4 * len(codes) + 4096
    if grid_ok:
        order = np.argsort(codes, kind="stable")
        row = codes[order]
        col = np.arange(len(order)) - np.repeat(np.cumsum(counts) - counts, counts)
    out: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        values = np.asarray(values, dtype=float)
        if grid_ok:
            grid = np.full((num, width), np.nan)
            grid[row, col] = values[order]
            grid.sort(axis=1)  # NaN last
            n = (~np.isnan(grid)).sum(axis=1)
            sorted_values, first = grid.ravel(), np.arange(num) * width
        else:
            valid = ~np.isnan(values)
            c, v = codes[valid], values[valid]
            sorted_values = v[np.lexsort((v, c))]
            n = np.bincount(c, minlength=num)
            first = np.cumsum(n) - n
        last = max(len(sorted_values) - 1, 0)
        lo = np.minimum(first + np.maximum(n - 1, 0) // 2, last)
        hi = np.minimum(first + n // 2, last)
        med = (sorted_values[lo] + sorted_values[hi]) / 2 if len(sorted_values) else np.zeros(num)
        out[name] = np.where(n > 0, med, np.nan)
    return groups, out


class _Floats(Mapping[str, np.ndarray]):
    """Columns of ``df`` (at ``rows``, when given) as floats (missing: NaN), each converted when
    read and let go of after: :func:`medians_by` reads them in turn (seven at once were ~0.4 GB
    of the run summary's at 131,072 ranks x 50 steps)."""

    def __init__(self, df: pd.DataFrame, names: list[str], rows: np.ndarray | None) -> None:
        self.df, self.names, self.rows = df, names, rows

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.names:
            raise KeyError(name)
        col = self.df[name].array
        col = col if self.rows is None else col.take(self.rows)
        return col.to_numpy(dtype=float, na_value=np.nan)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def medians_frame(
    df: pd.DataFrame, key: str, columns: list[str], rows: np.ndarray | None = None
) -> pd.DataFrame:
    """``df.groupby(key)[columns].median()`` as floats (index named ``key``), over the rows at
    positions ``rows`` only when given; one column converted at a time."""
    keys = df[key].to_numpy()
    groups, meds = medians_by(keys if rows is None else keys[rows], _Floats(df, columns, rows))
    return pd.DataFrame(meds, index=pd.Index(groups, name=key), columns=columns)
