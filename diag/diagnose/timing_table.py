"""Timing tables from other tools: one Parquet or CSV file of timed spans -> :class:`Features`.

A timing table has one row per timed span (a forward pass, an all-reduce, a data-loader wait...):

- required: ``rank``, ``step``, ``phase``, ``op``, ``start_ns``, ``duration_ns``;
- optional: ``host``, ``dp_rank``, ``pp_rank``, ``tp_rank`` (the parallel layout: the ranks
  with the same ``pp_rank`` and ``tp_rank`` do the same work, see :mod:`~diag.diagnose.layout`),
  ``microbatch`` (read, not needed);
- ``phase`` is one of :data:`PHASES`; ``start_ns`` is wall-clock (or any common clock) nanoseconds.

Other tools name the same things differently; what is unambiguous is read as the above
(:func:`normalize`): column names in any case; times in another unit by their suffix
(``start_us``, ``duration_ms``, ``start_s``...; ``ts``/``dur`` in microseconds, as in Chrome
traces) where the ``_ns`` column is absent; ``iteration``/``iter`` for ``step``,
``global_rank`` for ``rank``, ``name`` for ``op``; common phase names (``fwd``, ``bwd``,
``optim``, ``comm``/``allreduce``/``p2p``, ``dataloader``, ``ckpt``...; :data:`PHASE_ALIASES`)
in any case. A column named as here wins over the others (a table with ``step`` and
``iteration`` reads ``step``); two others that would both become one (``start_us`` and
``start_ms`` without ``start_ns``) are an error.

Per (rank, step) the ``steps`` frame gets ``duration_ms`` = last span end - first span start,
``data_ms`` / ``ckpt_ms`` = summed ``data`` / ``checkpoint`` spans, ``compute_ms`` = summed
compute spans (``forward``, ``backward``, ``optimizer``, ``other``; at most the step less data and
checkpoint) and ``wait_ms`` = the rest: ``collective`` spans and time no span covers (a pipeline
stage idle between its microbatches waits for its neighbours too, whether or not the tool wrote
the p2p wait as a span; a collective that overlaps compute costs only what it does not overlap).
A table with no compute span at all keeps the older split: ``wait_ms`` = summed ``collective``
spans, ``compute_ms`` = the rest (clamped at 0). ``checkpoint`` spans also make the ``ckpt``
frame (``path`` = the span's ``op``, ``num_bytes`` 0). There are no host, process, collective or
kernel events in a table: those frames are empty, so the link and kernel detectors find nothing.
The layout comes from the ``*_rank`` columns, else from the ranks' time profiles
(:func:`profiles`: per-phase medians and where in the step compute begins).
Any problem with the file is one :class:`~diag.errors.InputError` line that names it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diag.diagnose import layout as layouts
from diag.diagnose.features import (
    CKPT_COLUMNS,
    HOST_COLUMNS,
    PROC_COLUMNS,
    STEP_COLUMNS,
    Features,
)
from diag.diagnose.layout_infer import early_steps, infer, summarize
from diag.errors import InputError
from diag.untrusted import open_regular

_NS_PER_MS = 1e6

#: Columns every timing table must have.
REQUIRED_COLUMNS = ("rank", "step", "phase", "op", "start_ns", "duration_ns")
#: Columns a timing table may have (``host`` names the rank's host; the others are kept as read).
OPTIONAL_COLUMNS = ("host", "dp_rank", "pp_rank", "tp_rank", "microbatch")
#: The allowed ``phase`` values.
PHASES = ("data", "forward", "backward", "optimizer", "collective", "checkpoint", "other")
#: The phases that are a rank's own compute.
COMPUTE_PHASES = ("forward", "backward", "optimizer", "other")
#: File suffixes read as timing tables (case-insensitive).
SUFFIXES = (".parquet", ".csv")

#: Other tools' phase names -> :data:`PHASES` (matched after lower-casing and stripping).
PHASE_ALIASES = {
    **{a: "forward" for a in ("fwd", "fprop", "forward_pass")},
    **{a: "backward" for a in ("bwd", "bprop", "backward_pass")},
    **{a: "optimizer" for a in ("optim", "opt", "optimizer_step")},
    **{a: "collective" for a in ("comm", "communication", "allreduce", "all_reduce", "p2p",
                                 "nccl", "send", "recv")},
    **{a: "data" for a in ("dataloader", "data_loader", "data_load", "input")},
    **{a: "checkpoint" for a in ("ckpt", "save", "checkpointing")},
}  # fmt: skip
#: Column name -> the name it stands for (after lower-casing), besides the unit suffixes.
_COLUMN_ALIASES = {"iteration": "step", "iter": "step", "global_rank": "rank", "name": "op"}
#: A time column's unit suffix -> nanoseconds per unit.
_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_CHROME = {"ts": "start_us", "dur": "duration_us"}  # Chrome-trace names, in microseconds
_NUMERIC = ("rank", "step", "start_ns", "duration_ns")
_MAX_NAMED = 5  # unknown phase values / bad rows named in an error


def is_timing_table(path: Path) -> bool:
    """Whether ``path`` names a timing table (by suffix), rather than a run directory."""
    return Path(path).suffix.lower() in SUFFIXES and not Path(path).is_dir()


def read_timing_table(path: Path) -> pd.DataFrame:
    """The table at ``path``, checked and typed (ints for ranks, steps and times, str for
    ``phase``/``op``/``host``); :class:`~diag.errors.InputError` (one line) when it is not one."""
    path = Path(path)
    raw = normalize(path, _read_raw(path))
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if missing:
        also = [f"{c} (or {c[:-3]}_us, _ms, _s)" if c.endswith("_ns") else c for c in missing]
        raise InputError(f"{path}: timing table lacks column(s) {', '.join(also)}")
    if raw.empty:
        raise InputError(f"{path}: timing table has no rows")
    out = pd.DataFrame(index=raw.index)
    for col in _NUMERIC:
        out[col] = _integers(path, raw, col)
    if (out["duration_ns"] < 0).any():
        raise InputError(f"{path}: timing table has negative duration_ns values")
    phase = raw["phase"].astype(str).str.strip()
    lowered = phase.str.lower()
    known = lowered.isin([*PHASES, *PHASE_ALIASES])  # the others are named as written below
    phase = phase.where(~known, lowered.replace(PHASE_ALIASES))
    unknown = sorted(set(phase) - set(PHASES))
    if unknown:
        named = ", ".join(repr(p) for p in unknown[:_MAX_NAMED])
        more = f" (+{len(unknown) - _MAX_NAMED} more)" if len(unknown) > _MAX_NAMED else ""
        raise InputError(
            f"{path}: unknown phase value(s) {named}{more}; expected one of {', '.join(PHASES)}"
        )
    out["phase"] = phase
    out["op"] = raw["op"].fillna("").astype(str)
    host = raw["host"] if "host" in raw.columns else pd.Series("", index=raw.index)
    out["host"] = host.fillna("").astype(str)
    for col in OPTIONAL_COLUMNS[1:]:
        if col in raw.columns:
            out[col] = raw[col]
    return out.reset_index(drop=True)


def normalize(path: Path, raw: pd.DataFrame) -> pd.DataFrame:
    """``raw`` with other tools' column names and time units read as this format's (see the
    module docstring); an ambiguous table (two columns that would both become one) is an
    :class:`~diag.errors.InputError`."""
    # this format's name -> the columns that stand for it, each with its ns per unit (0: as is)
    sources: dict[str, list[tuple[Any, int]]] = {}
    for col in raw.columns:
        name = str(col).strip().lower()
        name = _CHROME.get(name, _COLUMN_ALIASES.get(name, name))
        base, _, unit = name.rpartition("_")
        if base in ("start", "duration") and unit in _UNITS:
            name, factor = f"{base}_ns", (0 if unit == "ns" else _UNITS[unit])
        else:
            factor = 0
        sources.setdefault(name, []).append((col, factor))
    out = {}
    for name, cols in sources.items():
        exact = [(c, f) for c, f in cols if str(c).strip().lower() == name]
        if len(cols) > 1 and len(exact) != 1:  # the column named as here wins, if it is one
            named = ", ".join(repr(c) for c, _ in cols)
            raise InputError(f"{path}: timing table columns {named} would all be {name}")
        col, factor = exact[0] if exact else cols[0]
        out[name] = pd.to_numeric(raw[col], errors="coerce") * factor if factor else raw[col]
    return pd.DataFrame(out, index=raw.index)


def features_from_table(table: pd.DataFrame) -> Features:
    """The detectors' :class:`Features` of a checked table (:func:`read_timing_table`)."""
    steps = _steps(table)
    return Features(
        steps=steps,
        ckpt=_ckpt(table[table["phase"] == "checkpoint"]),
        host=pd.DataFrame(columns=list(HOST_COLUMNS)),
        proc=pd.DataFrame(columns=list(PROC_COLUMNS)),
        layout=table_layout(table, steps),
    )


def table_layout(table: pd.DataFrame, steps: pd.DataFrame) -> layouts.Layout:
    """The table's layout: from its ``*_rank`` columns, else from its ranks' time profiles."""
    found = layouts.from_columns(table)
    if found is not None:
        return found
    ranks = sorted(int(r) for r in steps["rank"].unique())
    hosts = {int(r): str(h) for r, h in steps.groupby("rank")["host"].last().items()}
    return infer(ranks, hosts, profiles=profiles(table))


def profiles(table: pd.DataFrame, warmup_steps: int = 5) -> pd.DataFrame:
    """Per rank, over its early steps: each phase's summed spans per step (ms) and ``begin``,
    how long after the step's first span its first compute span begins, as
    :func:`~diag.diagnose.layout_infer.summarize` makes them (median and its standard error)."""
    rows = table[early_steps(table["step"], warmup_steps)]
    keys = ["rank", "step"]
    sums = rows.pivot_table(index=keys, columns="phase", values="duration_ns", aggfunc="sum")
    sums = sums.reindex(columns=[p for p in PHASES if p != "checkpoint"]).fillna(0.0)
    first = rows.groupby(keys)["start_ns"].min()
    compute = rows[rows["phase"].isin(COMPUTE_PHASES)]
    sums["begin"] = (compute.groupby(keys)["start_ns"].min() - first).reindex(sums.index)
    return summarize(sums.astype(float) / _NS_PER_MS)


def run_info(path: Path, table: pd.DataFrame) -> dict[str, Any]:
    """The ``run`` section of ``diag triage --json`` for a table: id (the file's stem), source,
    world_size (ranks seen) and steps (the most distinct steps any rank has)."""
    return {
        "id": Path(path).stem,
        "source": "timing table",
        "world_size": int(table["rank"].nunique()),
        "steps": int(table.groupby("rank")["step"].nunique().max()),
    }


def _read_raw(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise InputError(f"{path}: no such timing table")
    try:
        fh = open_regular(path)  # a FIFO or a device is refused, never waited on
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        with fh:
            if path.suffix.lower() == ".parquet":
                return pd.read_parquet(fh)
            return pd.read_csv(fh, skipinitialspace=True)
    except InputError:
        raise
    except Exception as exc:  # pyarrow / pandas raise many kinds; each means "not readable"
        kind = "Parquet" if path.suffix.lower() == ".parquet" else "CSV"
        raise InputError(f"{path}: unreadable {kind} timing table: {_one_line(exc)}") from exc


def _integers(path: Path, raw: pd.DataFrame, col: str) -> pd.Series:
    values = pd.to_numeric(raw[col], errors="coerce")
    bad = values.isna() | ~np.isfinite(values.astype(float))
    if bad.any():
        rows = [int(i) for i in np.flatnonzero(bad.to_numpy())[:_MAX_NAMED]]
        raise InputError(
            f"{path}: non-numeric or missing {col} in {int(bad.sum())} row(s) "
            f"(first at data row(s) {', '.join(str(r + 1) for r in rows)})"
        )
    if values.dtype.kind == "f":
        values = values.round()
    return values.astype("int64")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _steps(table: pd.DataFrame) -> pd.DataFrame:
    t = table.assign(end_ns=table["start_ns"] + table["duration_ns"])
    keys = ["rank", "step"]
    span = t.groupby(keys).agg(
        start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), host=("host", "last")
    )
    sums = (
        t.pivot_table(index=keys, columns="phase", values="duration_ns", aggfunc="sum")
        .reindex(index=span.index, columns=list(PHASES))
        .fillna(0)
        .astype(float)
        / _NS_PER_MS
    )
    duration = (span["end_ns"] - span["start_ns"]).astype(float) / _NS_PER_MS
    data, ckpt = sums["data"], sums["checkpoint"]
    if table["phase"].isin(COMPUTE_PHASES).any():
        own = (duration - data - ckpt).clip(lower=0.0)
        compute = np.minimum(sums[list(COMPUTE_PHASES)].sum(axis=1), own)
        wait = own - compute
    else:  # no compute span: what is not waiting is compute
        wait = sums["collective"]
        compute = (duration - wait - data - ckpt).clip(lower=0.0)
    out = pd.DataFrame(
        {
            "host": span["host"].astype(str),
            "duration_ms": duration,
            "compute_ms": compute,
            "cpu_wait_ms": 0.0,  # a timing table does not know run-queue delays
            "wait_ms": wait,
            "data_ms": data,
            "ckpt_ms": ckpt,
            "start_ns": span["start_ns"].astype("int64"),
            "end_ns": span["end_ns"].astype("int64"),
        }
    ).reset_index()
    out["rank"] = out["rank"].astype("int64")
    out["step"] = out["step"].astype("int64")
    out = out.loc[:, list(STEP_COLUMNS)]
    return out.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)


def _ckpt(rows: pd.DataFrame) -> pd.DataFrame:
    op = rows["op"].astype(str)
    out = pd.DataFrame(
        {
            "rank": rows["rank"].astype("int64"),
            "host": rows["host"].astype(str),
            "step": rows["step"].astype("int64"),
            "op": np.where(op.str.lower().str.contains("load"), "load", "save"),
            "path": op,
            "num_bytes": np.zeros(len(rows), dtype="int64"),
            "start_ns": rows["start_ns"].astype("int64"),
            "duration_ms": rows["duration_ns"].astype(float) / _NS_PER_MS,
            "throughput_mb_s": np.full(len(rows), np.nan),
        },
        columns=list(CKPT_COLUMNS),
    )
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)
