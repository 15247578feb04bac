"""Events -> pandas DataFrames: the only place that builds frames from events.

A frame of kind ``k`` has exactly the dataclass fields of ``schema.EVENT_TYPES[k]`` as columns, in
declaration order, with one stable dtype per schema type, so an empty frame, a frame built from
events and a frame read back from Parquet look the same:

=================  ===========  ==============================================================
schema type        dtype        notes
=================  ===========  ==============================================================
``int``            ``int64``
``int | None``     ``Int64``    nullable: ``<NA>`` where the source could not give the value
``float``          ``float64``
``float | None``   ``Float64``  nullable; ``<NA>`` is "not given", NaN/Inf stay NaN/Inf values
``str``            ``str``
``bool``           ``bool``
=================  ===========  ==============================================================

The label columns every kind repeats on each row (``source``, ``host``, ``job_id``: a few
distinct values over millions of rows) are ``category`` in memory (a code per row and each
distinct string once: at 16,384 ranks x 50 steps 49 of the step frame's 195 MiB were these
three columns as strings) and plain strings on disk, so a part reads the same to any tool.

Keeping NaN distinct from "missing" matters: a NaN loss is a finding, a missing loss is not. pandas
turns NaN into ``<NA>`` when it builds a ``Float64`` column from Arrow, so :func:`table_to_frame`
converts those columns itself.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Collection, Mapping, Sequence
from functools import cache
from typing import TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
from pandas.api.types import union_categoricals

from diag import schema
from diag.store.memory import release_free_memory

_DTYPES = {int: "int64", float: "float64", str: "str", bool: "bool"}
_NULLABLE = {int: "Int64", float: "Float64"}
#: String fields kept as ``category`` in memory: each repeats a handful of values on every row.
LABELS = schema.LABEL_FIELDS
#: The envelope's index columns, which a store's cache holds as 32-bit integers where every
#: value fits (:func:`narrow_ints`): half of int64's memory, 100 MB of the step cache at
#: 131,072 ranks x 50 steps. Frames handed out by ``RunStore.frame`` have them as int64 again.
INDEX_COLUMNS = ("rank", "local_rank", "step", "seq")
#: Per kind, the other int64 columns the cache holds as int32 where every value of a part, a
#: flush or a fold fits (:func:`narrow_ints`): a step's phase times in nanoseconds (under 2.1 s:
#: every phase of most steps and the whole step of most jobs; a column with one longer value
#: stays 64-bit) and its counts, 4 bytes a row each, 262 MB of the step cache at 131,072 ranks x
#: 50 steps. Whoever reads :meth:`RunStore.resident_frame` converts before adding or
#: multiplying them (int32 arithmetic wraps); a sum or a median of a column is int64 or float.
NARROW: Mapping[str, tuple[str, ...]] = {
    "step": (
        "duration_ns", "data_wait_ns", "forward_ns", "backward_ns", "optimizer_ns",
        "checkpoint_ns", "other_ns", "compute_ns", "collective_wait_ns", "num_backward",
        "num_collectives", "cpu_wait_ns", "cpu_wait_data_ns",
    ),
}  # fmt: skip
_INT32 = np.iinfo(np.int32)
#: Rows from which :func:`concat_frames` gives freed memory back column by column (~2-4 ms each).
_TRIM_ROWS = 1 << 20
#: A frame's column as an array: numpy's, or one of pandas' extension arrays.
Array: TypeAlias = np.ndarray | pd.api.extensions.ExtensionArray


@cache
def dtypes(kind: str) -> dict[str, str]:
    """Column name -> pandas dtype for the frames of ``kind`` (in dataclass field order)."""
    cls = schema.EVENT_TYPES[kind]
    out: dict[str, str] = {}
    for name, tp in typing.get_type_hints(cls).items():
        if typing.get_origin(tp) is typing.ClassVar:
            continue
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        out[name] = _NULLABLE[args[0]] if args else _DTYPES[tp]
        if name in LABELS and out[name] == "str":
            out[name] = "category"
    order = [f.name for f in dataclasses.fields(cls)]
    return {name: out[name] for name in order}


@cache
def _defaults(kind: str) -> dict[str, object]:
    """Field defaults (``None`` for optional fields): fill for a column an older part lacks."""
    return {
        f.name: f.default
        for f in dataclasses.fields(schema.EVENT_TYPES[kind])
        if f.default is not dataclasses.MISSING
    }


def _column(dtype: str, values: Sequence[object]) -> pd.api.extensions.ExtensionArray | np.ndarray:
    if isinstance(values, np.ndarray):  # a decoded column block's number column: no None in it
        if dtype == "Float64":
            return pd.arrays.FloatingArray(
                values.astype(np.float64), np.zeros(len(values), dtype=bool)
            )
        if dtype == "Int64":
            return pd.arrays.IntegerArray(
                values.astype(np.int64), np.zeros(len(values), dtype=bool)
            )
        return values.astype(dtype, copy=False)
    if dtype == "Float64":
        mask = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
        data = np.fromiter(
            (np.nan if v is None else v for v in values), dtype=np.float64, count=len(values)
        )
        return pd.arrays.FloatingArray(data, mask)
    if dtype == "Int64":
        return pd.array(values, dtype="Int64")
    if dtype == "str":
        return pd.array(values, dtype="str")
    if dtype == "category":
        return pd.Categorical(pd.array(values, dtype="str"))
    return np.asarray(values, dtype=dtype)


def events_to_frame(kind: str, events: Sequence[schema.Event]) -> pd.DataFrame:
    """One frame of ``kind`` from events of that kind (one row per event, input order).

    Raises ``TypeError`` if an event is of another kind: mixing kinds is a caller bug.
    """
    cls = schema.EVENT_TYPES[kind]
    for ev in events:
        if type(ev) is not cls:
            raise TypeError(f"events_to_frame({kind!r}) got a {type(ev).__name__}")
    cols = {
        name: _column(dtype, [getattr(ev, name) for ev in events])
        for name, dtype in dtypes(kind).items()
    }
    return pd.DataFrame(cols, copy=False)


def columns_to_frame(kind: str, columns: Mapping[str, Sequence[object]]) -> pd.DataFrame:
    """One frame of ``kind`` from its rows as columns (field -> values, every field present):
    the same frame :func:`events_to_frame` builds from the events those rows are."""
    return pd.DataFrame(
        {name: _column(dtype, columns[name]) for name, dtype in dtypes(kind).items()}, copy=False
    )


def concat_frames(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of ``parts`` (frames of one kind, in order) as one frame with a fresh index,
    built column by column. Consumes ``parts``: the list is emptied, and once the caller holds
    no other reference to a part, each of its columns is freed as soon as it is copied (a frame
    built here or by :func:`events_to_frame` keeps each column in its own block). ``pd.concat``
    held every part and the whole result at once: at 131,072 ranks x 50 steps, a second 1.2 GB
    step frame. A label column's categories become the sorted union of the parts' (a live run
    gains a category with every new rank or host; sorted, a sort on the column keeps the
    strings' order)."""
    if len(parts) == 1:
        return parts.pop().reset_index(drop=True)
    names = list(parts[0].columns)
    if any(list(p.columns) != names for p in parts[1:]):
        frames = list(parts)
        parts.clear()
        return pd.concat(frames, ignore_index=True)
    held = [column_arrays(p) for p in parts]
    parts.clear()
    # a big concatenation gives each column's freed pieces back as it goes: pieces under
    # glibc's mmap threshold (~32 MB) stay in its heap otherwise, while the new columns are
    # fresh mappings (opening a 131,072-rank run: +0.7 GB held through the concatenation)
    trim = sum(len(next(iter(cols.values()), ())) for cols in held) >= _TRIM_ROWS
    out: dict[str, Array] = {}
    for name in names:
        pieces = [cols.pop(name) for cols in held]
        out[name] = _concat_arrays(pieces)
        del pieces
        if trim:
            release_free_memory()
    return pd.DataFrame(out, copy=False)


def take_columns(held: dict[str, Array], positions: np.ndarray) -> pd.DataFrame:
    """``DataFrame(held).take(positions)`` with a fresh index, from the columns in ``held``
    (name -> array, :func:`column_arrays`), which it empties: each old column is let go of as
    it is taken. Columns, not a frame: a function's own reference to a frame it was given would
    keep every old column alive until the new ones were all taken (two copies of it)."""
    out = {}
    for name in list(held):
        out[name] = held.pop(name).take(positions)
    return pd.DataFrame(out, copy=False)


def column_arrays(df: pd.DataFrame) -> dict[str, Array]:
    """``df``'s columns as arrays (numpy, or pandas' extension arrays), sharing its memory."""
    out: dict[str, Array] = {}
    for name in df.columns:
        col = df[name]
        out[name] = (
            col.array
            if isinstance(col.dtype, pd.api.extensions.ExtensionDtype)
            else (col.to_numpy())
        )
    return out


def _concat_arrays(pieces: list[Array]) -> Array:
    arrays = [p for p in pieces if isinstance(p, np.ndarray)]
    if len(arrays) == len(pieces) and (
        len({a.dtype for a in arrays}) == 1 or all(a.dtype.kind == "i" for a in arrays)
    ):
        return np.concatenate(arrays)  # integers of two widths: the wider (a narrowed index)
    cats = [p for p in pieces if isinstance(p, pd.Categorical)]
    if len(cats) == len(pieces):
        try:
            return union_categoricals(cats, sort_categories=True)
        except TypeError:  # categories of different dtypes: on the union of them as strings
            names = [np.asarray(c.categories, dtype=object).astype(str) for c in cats]
            union = pd.Index(np.unique(np.concatenate(names)), dtype="str")
            return union_categoricals(
                [pd.Categorical(np.asarray(c, dtype=object).astype(str), categories=union)
                 for c in cats]
            )  # fmt: skip
    ext = [p for p in pieces if isinstance(p, pd.api.extensions.ExtensionArray)]
    if (
        len(ext) == len(pieces)
        and len({type(e) for e in ext}) == 1
        and len({e.dtype for e in ext}) == 1
    ):
        return type(ext[0])._concat_same_type(ext)
    return pd.concat([pd.Series(p) for p in pieces], ignore_index=True).array


def narrow_ints(kind: str, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its int64 :data:`INDEX_COLUMNS` and ``kind``'s :data:`NARROW` columns as
    int32 where every value fits (the others shared, copy-on-write); ``df`` itself when none
    changes."""
    narrow = {}
    for name in (*INDEX_COLUMNS, *NARROW.get(kind, ())):
        if name in df.columns and df[name].dtype == np.int64:
            values = df[name].to_numpy()
            if not len(values) or (values.min() >= _INT32.min and values.max() <= _INT32.max):
                narrow[name] = values.astype(np.int32)
    return df.assign(**narrow) if narrow else df


def widen_ints(kind: str, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the columns :func:`narrow_ints` narrows in the dtype of ``kind`` again
    (int64)."""
    wide = {
        name: dtypes(kind)[name]
        for name in (*INDEX_COLUMNS, *NARROW.get(kind, ()))
        if name in df.columns and str(df[name].dtype) != dtypes(kind)[name]
    }
    return df.astype(wide) if wide else df


def null_column(dtype: str, length: int) -> Array:
    """A nullable column of ``length`` values, every one ``<NA>`` (``Int64`` or ``Float64``)."""
    mask = np.ones(length, dtype=bool)
    if dtype == "Int64":
        return pd.arrays.IntegerArray(np.zeros(length, dtype=np.int64), mask)
    if dtype == "Float64":
        return pd.arrays.FloatingArray(np.zeros(length, dtype=np.float64), mask)
    raise ValueError(f"{dtype} is not a nullable dtype")


def empty_frame(kind: str) -> pd.DataFrame:
    """A frame of ``kind`` with no rows and every column."""
    return events_to_frame(kind, [])


def conform(kind: str, df: pd.DataFrame, columns: Collection[str] | None = None) -> pd.DataFrame:
    """``df`` with exactly the columns and dtypes of ``kind`` (only those in ``columns``, in the
    kind's order, when given).

    A column an older part lacks (a field added since, a minor schema bump) is filled with the
    field's default; a column the schema no longer has is dropped.
    """
    out = {}
    for name, dtype in dtypes(kind).items():
        if columns is not None and name not in columns:
            continue
        if name in df.columns:
            col = df[name]
            out[name] = col if str(col.dtype) == dtype else _cast(col, dtype)
        else:
            default = _defaults(kind).get(name)
            out[name] = _column(dtype, [default] * len(df))
    return pd.DataFrame(out, index=df.index, copy=False)


def _cast(col: pd.Series, dtype: str) -> pd.Series:
    if dtype == "category":  # categories are the values as strings, whatever the part held
        return col.astype("str").astype("category")
    return col.astype(dtype)


def table_to_frame(
    kind: str, table: pa.Table, columns: Collection[str] | None = None
) -> pd.DataFrame:
    """A frame of ``kind`` from an Arrow table (a Parquet part), keeping NaN apart from null;
    only the ``columns`` given (in the kind's order), when given."""
    floats = {}
    for name, dtype in dtypes(kind).items():
        if columns is not None and name not in columns:
            continue
        if dtype == "Float64" and name in table.column_names:
            col = table.column(name)
            mask = col.is_null().to_numpy(zero_copy_only=False)
            data = col.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
            floats[name] = pd.arrays.FloatingArray(np.asarray(data, dtype=np.float64), mask)
    df = table.to_pandas(split_blocks=True)  # a block per column, as every frame here
    del table
    for name, values in floats.items():
        df[name] = values
    return conform(kind, df, columns)


def frame_to_table(kind: str, df: pd.DataFrame) -> pa.Table:
    """The Arrow table written to a Parquet part for a frame of ``kind``: label columns as
    plain strings (Parquet dictionary-encodes them on its own), as every part was written."""
    df = conform(kind, df)
    labels = {name: df[name].astype("str") for name in df.columns if df[name].dtype == "category"}
    return pa.Table.from_pandas(df.assign(**labels) if labels else df, preserve_index=False)
