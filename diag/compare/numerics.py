"""The numerics ``diag diff`` compares beyond the loss, when the runs recorded them (schema 1.4).

- :class:`~diag.schema.NumericsSample` ``grad_norm``: the global gradient norm before the
  optimizer step, every ``numerics_every`` steps (under DDP the same on every rank);
- :class:`~diag.schema.ParamFingerprint` ``checksum``: an exact checksum of the parameters after
  the optimizer step, every ``fingerprint_every`` steps;
- :class:`~diag.schema.NonFinite`: the first NaN/Inf of an episode.

A run recorded by an older hook, or with numerics sampling off, has none of them; the diff then
compares the loss only. The readers return frames with columns ``rank``, ``step``, ``value``
(one row per rank and step, the latest event wins), empty when the kind is absent from the
schema or the run.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from diag import schema
from diag.store.run_store import RunStore

#: (event kind, value column) of gradient-norm samples, and of parameter fingerprints.
GRAD_NORM = ("numerics", "grad_norm")
FINGERPRINT = ("fingerprint", "checksum")
NONFINITE = "nonfinite"

_COLUMNS = ["rank", "step", "value"]


def grad_norms(store: RunStore, kinds: list[str]) -> pd.DataFrame:
    """Per (rank, step): the global gradient norm (float; NaN/Inf kept, unsampled rows left out)."""
    frame = _read(store, kinds, *GRAD_NORM)
    if not frame.empty:
        frame["value"] = frame["value"].to_numpy(dtype="float64", na_value=float("nan"))
    return frame


def fingerprints(store: RunStore, kinds: list[str]) -> pd.DataFrame:
    """Per (rank, step): the parameter checksum (int)."""
    frame = _read(store, kinds, *FINGERPRINT)
    if not frame.empty:
        frame["value"] = frame["value"].astype("int64")
    return frame


def first_nonfinite(store: RunStore, kinds: list[str]) -> dict[str, Any] | None:
    """The run's earliest non-finite event: ``{"step", "rank", "where", "module"}``, or ``None``."""
    if NONFINITE not in schema.EVENT_TYPES or NONFINITE not in kinds:
        return None
    df = store.frame(NONFINITE)
    df = df[df["rank"] >= 0]
    if df.empty:
        return None
    first = df.sort_values(["step", "ts_ns", "rank"], kind="stable").iloc[0]
    return {
        "step": int(first["step"]),
        "rank": int(first["rank"]),
        "where": str(first["where"]),
        "module": str(first["module"]),
    }


def _read(store: RunStore, kinds: list[str], kind: str, column: str) -> pd.DataFrame:
    cls = schema.EVENT_TYPES.get(kind)
    if cls is None or kind not in kinds or column not in schema.payload_fields(cls):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in _COLUMNS})
    df = store.frame(kind)
    df = df[(df["rank"] >= 0) & (df["step"] >= 0) & df[column].notna()]
    df = df.sort_values(["ts_ns", "seq"], kind="stable")
    df = df.drop_duplicates(["rank", "step"], keep="last")
    out = pd.DataFrame(
        {
            "rank": df["rank"].astype("int64"),
            "step": df["step"].astype("int64"),
            "value": df[column],
        }
    )
    return out.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)
