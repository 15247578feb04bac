"""What every drift finding looks up: losses per rank, checkpoint loads, batch statistics, and
the causes they point at (see :mod:`~diag.diagnose.detectors.drift`).

Cause rules, in order, for drift that begins at step ``S`` on the culprit ranks (all ranks for
a job-wide drift):

1. ``checkpoint``: a checkpoint load at step ``L`` (``-1``, before the first step, counts as 0)
   with ``0 <= S - L <= after_load_steps``: the run resumed into it.
2. ``data``: a culprit's batch at ``S`` (a :class:`~diag.schema.BatchStats`, sampled or checked
   after a non-finite loss) held NaN/Inf values, or an outlier: its largest magnitude
   ``max(|min|, |max|)`` is ``>= outlier_factor`` x the median of that over every batch sampled in
   the run.
3. otherwise the detector's default for the symptom.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from diag.diagnose.features import Features, ranked_last_positions
from diag.findings import Evidence, Finding


def ranks_text(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def float_column(df: pd.DataFrame, column: str) -> np.ndarray:
    """A nullable float column as floats (missing -> NaN; NaN and Inf kept)."""
    return df[column].to_numpy(dtype=float, na_value=np.nan)


@dataclass(frozen=True, slots=True)
class Context:
    """The run's numerics, indexed once for the drift rules."""

    features: Features
    after_load_steps: int
    outlier_factor: float
    # one row per (rank, step) with a step event, sorted: ``loss`` (NaN where missing or NaN),
    # ``present`` (the hook recorded a loss); long, not a Series per rank (100k ranks)
    loss_table: pd.DataFrame
    loss_ranks: tuple[int, ...]  # the ranks with step events
    loads: list[tuple[int, str]]  # (step, path) of checkpoint loads
    batches: pd.DataFrame  # BatchStats with a "magnitude" column
    typical_magnitude: float
    hosts: dict[int, str] = field(default_factory=dict)

    @classmethod
    def build(cls, features: Features, after_load_steps: int, outlier_factor: float) -> Context:
        table = pd.DataFrame(
            {"rank": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64"),
             "loss": pd.Series(dtype=float), "present": pd.Series(dtype=bool)}
        )  # fmt: skip
        ev = features.step_events
        if not ev.empty and "loss" in ev:
            # the rows first (the last of each (rank, step), sorted by rank then step), then the
            # three columns at those rows: a filter, a de-duplication and a sort of the columns
            # held three copies of them (at 131,072 ranks x 50 steps, ~0.5 GB)
            rank = ev["rank"].to_numpy()  # as the store holds them (int32): no copy
            step = ev["step"].to_numpy()
            rows = ranked_last_positions((rank, step), rank)
            loss = ev["loss"].array.take(rows)
            present = ~np.asarray(loss.isna())
            values = loss.to_numpy(dtype=float, na_value=np.nan)
            del loss
            table = pd.DataFrame(
                {
                    "rank": rank[rows],  # as the store holds them (int32 where they fit)
                    "step": step[rows],
                    "loss": values,
                    "present": present,
                },
                copy=False,  # the arrays are the table's own: a block of them was a copy
            )
            del rows, values, present
        ranks = tuple(int(r) for r in pd.unique(table["rank"]))
        ck = features.ckpt
        loads: list[tuple[int, str]] = []
        if not ck.empty:
            loads = [
                (max(int(s), 0), str(p))
                for s, p, op in zip(ck["step"], ck["path"], ck["op"], strict=True)
                if op == "load"
            ]
        batches = features.batch_stats
        typical = float("nan")
        if not batches.empty:
            batches = batches[batches["rank"] >= 0].copy()
            low, high = float_column(batches, "min_value"), float_column(batches, "max_value")
            batches["magnitude"] = np.fmax(np.abs(low), np.abs(high))
            sampled = batches.loc[batches["reason"] == "sampled", "magnitude"].dropna()
            typical = float(sampled.median()) if len(sampled) else float("nan")
        hosts = features.hosts_of() if not features.steps.empty else {}
        return cls(features, after_load_steps, outlier_factor, table, ranks, loads, batches,
                   typical, hosts)  # fmt: skip

    # ------------------------------------------------------------------ causes
    def load_before(self, step: int) -> tuple[int, str] | None:
        """The last checkpoint load at most ``after_load_steps`` before ``step``."""
        near = [(s, p) for s, p in self.loads if 0 <= step - s <= self.after_load_steps]
        return near[-1] if near else None

    def bad_batches(self, step: int, ranks: Sequence[int]) -> list[tuple[int, str]]:
        """(rank, why) for the batches at ``step`` of ``ranks`` (all when empty) that held
        NaN/Inf or an outlier."""
        b = self.batches
        if b.empty:
            return []
        rows = b[b["step"] == step]
        if ranks:
            rows = rows[rows["rank"].isin(list(ranks))]
        out = []
        for row in rows.itertuples():
            if row.num_nonfinite > 0:
                out.append((int(row.rank), f"rank {row.rank}'s batch at step {step} held "
                            f"{row.num_nonfinite} NaN/Inf values"))  # fmt: skip
            elif np.isfinite(self.typical_magnitude) and self.typical_magnitude > 0:
                ratio = float(row.magnitude) / self.typical_magnitude
                if ratio >= self.outlier_factor:
                    out.append((int(row.rank), f"rank {row.rank}'s batch at step {step} had "
                                f"values up to {row.magnitude:.3g}, {ratio:.0f}x the run's "
                                "typical batch maximum"))  # fmt: skip
        return sorted(set(out))

    def blamed_ranks(self, step: int) -> tuple[int, ...]:
        return tuple(sorted({r for r, _ in self.bad_batches(step, ())}))

    def cause(self, step: int, ranks: Sequence[int], *, default: str) -> tuple[str, str | None]:
        """(cause, why) for drift beginning at ``step`` on ``ranks`` (module docstring)."""
        load = self.load_before(step)
        if load is not None:
            return "checkpoint", (
                f"it begins {step - load[0]} steps after a checkpoint load ({load[1]}, step "
                f"{load[0]})"
            )
        bad = self.bad_batches(step, ranks)
        if bad:
            return "data", "; ".join(why for _, why in bad[:3])
        return default, None

    # ------------------------------------------------------------------ output
    def grad_norms(self) -> pd.Series:
        """The sampled global gradient norm per step (median over ranks)."""
        num = self.features.numerics
        if num.empty:
            return pd.Series(dtype=float)
        rows = num[num["grad_norm"].notna() & (num["rank"] >= 0)]
        values = pd.Series(float_column(rows, "grad_norm"), index=rows["step"].astype("int64"))
        return values.groupby(level=0).median().sort_index()

    def finding(
        self,
        fid: str,
        cause: str,
        ranks: tuple[int, ...],
        onset: int,
        summary: str,
        why: str | None,
        evidence: list[Evidence],
        *,
        severity: str,
        confidence: float,
        detected: int | None = None,
    ) -> Finding:
        if why:
            summary = f"{summary}; cause {cause}: {why}"
        return Finding(
            id=fid,
            symptom="drift",
            cause=cause,
            severity=severity,
            ranks=ranks,
            hosts=tuple(sorted({self.hosts[r] for r in ranks if r in self.hosts})),
            onset_step=onset,
            detected_step=onset if detected is None else detected,
            confidence=confidence,
            summary=summary,
            evidence=tuple(evidence),
        )
