"""events_to_frame: exact columns, stable dtypes, None kept apart from NaN, Parquet-stable."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pandas as pd
import pytest

from diag import schema
from diag.store import dataframes as frames
from tests.fakes.events import Source


@pytest.mark.parametrize("kind", list(schema.EVENT_TYPES))
def test_empty_frame_has_every_field_as_a_column(kind: str) -> None:
    df = frames.events_to_frame(kind, [])
    fields = [f.name for f in dataclasses.fields(schema.EVENT_TYPES[kind])]
    assert list(df.columns) == fields
    assert {c: str(t) for c, t in df.dtypes.items()} == frames.dtypes(kind)


def test_dtypes_follow_the_schema_types() -> None:
    d = frames.dtypes("gpu")
    assert d["ts_ns"] == "int64" and d["host"] == "category"  # a label column
    assert frames.dtypes("step")["source"] == "category"
    assert frames.dtypes("kernel")["name"] == "str"
    assert d["sm_clock_mhz"] == "Int64" and d["util_pct"] == "Float64"
    assert frames.dtypes("host")["cpu_busy_pct"] == "float64"
    assert frames.dtypes("checkpoint")["ok"] == "bool"


def test_optional_values_stay_missing_and_nan_stays_nan() -> None:
    src = Source(rank=0)
    evs = [src.step(0, loss=math.nan), src.step(1, loss=None), src.step(2, loss=math.inf)]
    df = frames.events_to_frame("step", evs)
    assert math.isnan(df["loss"][0]) and df["loss"][1] is pd.NA and df["loss"][2] == math.inf
    assert df["loss"].isna().tolist() == [False, True, False]
    colls = frames.events_to_frame("collective", [src.collective(0), src.collective(1)])
    assert str(colls["start_ns"].dtype) == "Int64"
    assert colls["start_ns"].isna().tolist() == [False, True]


def test_parquet_round_trip_keeps_values_and_dtypes() -> None:
    src = Source(rank=0)
    evs = [src.step(0, loss=math.nan), src.step(1, loss=None), src.step(2, loss=-math.inf)]
    df = frames.events_to_frame("step", evs)
    back = frames.table_to_frame("step", frames.frame_to_table("step", df))
    pd.testing.assert_frame_equal(back, df)
    assert back["loss"].isna().tolist() == [False, True, False]


def test_a_part_missing_a_newer_column_is_filled_with_the_default() -> None:
    df = frames.events_to_frame("step", [Source(rank=0).step(0)]).drop(columns=["num_backward"])
    back = frames.conform("step", df)
    assert list(back.columns) == list(frames.dtypes("step")) and back["num_backward"][0] == 0


def test_mixing_kinds_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        frames.events_to_frame("step", [Source().collective(0)])


def test_label_columns_are_categories_in_memory_and_strings_on_disk(tmp_path: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    evs = [Source(rank=r, host=f"h{r % 2}").step(s) for r in (3, 1, 2) for s in range(2)]
    df = frames.events_to_frame("step", evs)
    assert df["host"].dtype == "category"
    assert list(df["host"].cat.categories) == ["h0", "h1"]  # sorted: sorts follow the strings
    pq.write_table(frames.frame_to_table("step", df), tmp_path / "p.parquet")
    table = pq.read_table(tmp_path / "p.parquet")
    host = table.schema.field("host").type  # plain strings, as parts always held: any tool
    assert pa.types.is_large_string(host) or pa.types.is_string(host)
    back = frames.table_to_frame("step", table)
    assert back["host"].dtype == "category"
    pd.testing.assert_frame_equal(back, df)


def _parts(n_parts: int) -> list[pd.DataFrame]:
    """Step frames of different hosts, sources and optional values (each its own categories)."""
    out = []
    for p in range(n_parts):
        src = Source(rank=p, host=f"h{(p * 7) % 5}")
        evs = [src.step(s, loss=None if s % 3 == 0 else s * 0.5) for s in range(p + 1)]
        out.append(frames.events_to_frame("step", evs))
    return out


@pytest.mark.parametrize("n_parts", [1, 2, 5])
def test_concat_frames_is_pd_concat_on_the_union_of_categories(n_parts: int) -> None:
    parts = _parts(n_parts)
    labels = ("host", "source", "job_id")
    union = {c: sorted({v for p in parts for v in p[c].astype(str)}) for c in labels}
    want = pd.concat(
        [p.assign(**{c: p[c].cat.set_categories(union[c]) for c in labels}) for p in parts],
        ignore_index=True,
    )
    work = list(parts)
    got = frames.concat_frames(work)
    assert work == []  # consumed: the caller's list holds no part any more
    pd.testing.assert_frame_equal(got, want)
    assert list(got["host"].cat.categories) == union["host"]


def test_concat_frames_frees_each_part_column_by_column() -> None:
    import weakref

    parts = _parts(3)
    seen = [weakref.ref(p) for p in parts]
    frames.concat_frames(parts)
    assert all(ref() is None for ref in seen)  # no part outlives the call


def test_take_columns_is_take_with_a_fresh_index() -> None:
    df = pd.concat(_parts(3), ignore_index=True)
    order = pd.Series(range(len(df))).sample(frac=1.0, random_state=0).to_numpy()
    want = df.take(order).reset_index(drop=True)
    held = frames.column_arrays(df)
    pd.testing.assert_frame_equal(frames.take_columns(held, order), want)
    assert not held  # emptied: each column let go of as it was taken
