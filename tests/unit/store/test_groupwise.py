"""medians_by gives exactly pandas' group-by median, on the grid and on the lexsort path."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.diagnose.layout_infer import summarize
from diag.store.groupwise import medians_frame

cells = st.one_of(
    st.integers(-5, 5).map(float),  # many ties
    st.floats(-1e9, 1e9, allow_nan=False),
    st.just(float("nan")),
)
rows = st.lists(st.tuples(st.integers(0, 6), cells, cells), max_size=60)


def frame(data: list[tuple[int, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rank": pd.Series([r for r, _, _ in data], dtype="int64"),
            "a": pd.Series([a for _, a, _ in data], dtype=float),
            "b": pd.Series([b for _, _, b in data], dtype=float),
        }
    )


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(data=rows, skew=st.integers(0, 200))
def test_the_same_medians_as_a_group_by(data: list[tuple[int, float, float]], skew: int) -> None:
    # ``skew`` rows more on one rank: a grid mostly padding, so the lexsort path runs
    df = frame(data + [(9, float(i % 7), float(i)) for i in range(skew)])
    want = df.groupby("rank")[["a", "b"]].median().astype(float)
    pd.testing.assert_frame_equal(medians_frame(df, "rank", ["a", "b"]), want, check_exact=True)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(data=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 30), cells, cells), max_size=60))
def test_work_class_profiles_as_the_group_by_made_them(
    data: list[tuple[int, int, float, float]],
) -> None:
    per_step = pd.DataFrame(
        {"forward": [f for *_, f, _ in data], "backward": [b for *_, b in data]},
        index=pd.MultiIndex.from_arrays(
            [
                pd.Series([r for r, *_ in data], dtype="int64"),
                pd.Series([s for _, s, *_ in data], dtype="int64"),
            ],
            names=["rank", "step"],
        ),
        dtype=float,
    )
    by_rank = per_step.groupby(level="rank")
    med = by_rank.median()
    mad = (per_step - med.reindex(per_step.index.get_level_values("rank")).to_numpy()).abs()
    spread = mad.groupby(level="rank").median() * 1.4826
    se = 1.2533 * spread / np.sqrt(by_rank.size().to_numpy()[:, None])
    want = pd.concat([med, se.add_suffix("_se")], axis=1).astype(float)
    pd.testing.assert_frame_equal(summarize(per_step), want, check_exact=True)
