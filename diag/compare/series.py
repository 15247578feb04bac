"""What ``diag diff`` reads from each run, and how the two runs' steps are put on one axis.

Each run gives one row per (rank, step) from its :class:`~diag.schema.StepEvent`s (the latest
event wins): the loss the hook saw (a NaN loss stays NaN; a step without a loss is left out of
the loss curve) and the step's phases in milliseconds.
Gradient norms and parameter fingerprints come from the numerics events
(:mod:`diag.compare.numerics`) when the run has them.

**Alignment.** A hook numbers the steps of its process from 0, so a run resumed from a checkpoint
calls its first step 0 where the script (and the run it resumed from) calls it ``K``. The offset
``d`` puts run B's step ``s`` at run A's step ``s + d``; every comparison is on A's step numbers.
It is found from the checkpoint the two runs share: run B loaded (``torch.load`` and friends) the
file run A saved (same path, else the same file name when only one of A's saves has it). A save
that happens between steps is recorded at the step in progress, the number of steps done (``K``),
which is the step the resumed run repeats first; a load before the first step counts as step 0.
So ``d = K - L`` for a load at B's step ``L`` (and ``d = L - K`` when A is the resumed run).
Without a shared checkpoint ``d = 0``; ``--offset`` sets it by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diag.compare import numerics as diff_numerics
from diag.compare.coverage import JobProgress, job_progress
from diag.errors import InputError
from diag.store.run_store import RunStore
from diag.store.summary import summarize
from diag.traces import kernels

_NS_PER_MS = 1e6

#: Phase name -> StepEvent column (nanoseconds). The first six partition the step; collective wait
#: and compute split it a second way (compute = step - collective wait - data - checkpoint).
PHASE_COLUMNS: dict[str, str] = {
    "data": "data_wait_ns",
    "forward": "forward_ns",
    "backward": "backward_ns",
    "optimizer": "optimizer_ns",
    "checkpoint": "checkpoint_ns",
    "other": "other_ns",
    "collective wait": "collective_wait_ns",
    "compute": "compute_ns",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSide:
    """One run as ``diag diff`` sees it.

    ``steps``: one row per (rank, step), columns ``rank``, ``step``, ``loss`` (float, ``NaN`` for
    a NaN loss), ``has_loss`` (False where the hook recorded none), ``step_ms`` and one ``<phase>``
    column per :data:`PHASE_COLUMNS` entry (milliseconds). ``grad_norm``: columns ``rank``,
    ``step``, ``value`` (empty without numerics events). ``fingerprints``: ``rank``, ``step``,
    ``value`` (the parameter checksum after the step; empty without). ``ckpt``: the run's
    checkpoint events (``rank``, ``step``, ``op``, ``path``). ``kernels``: the cross-rank kernel
    table (``None`` without profiler windows) and ``window_steps`` the median number of steps
    per profiler window. ``first_nonfinite``: see :meth:`to_json`. ``progress``: how far the job
    went against what was recorded (:func:`~diag.compare.coverage.job_progress`).
    """

    path: str
    id: str
    world_size: int
    ranks: tuple[int, ...]
    exit_code: int | None
    steps: pd.DataFrame
    grad_norm: pd.DataFrame
    fingerprints: pd.DataFrame
    ckpt: pd.DataFrame
    kernels: kernels.KernelTable | None
    window_steps: float = 1.0
    first_nonfinite: dict[str, Any] | None = None
    progress: JobProgress | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"path", "id", "world_size", "ranks", "steps", "first_step", "last_step",
        "exit_code", "has_grad_norm", "has_fingerprints", "has_kernels", "first_nonfinite",
        "job_last_step", "lost_steps"}`` (``steps``: distinct step numbers; ``first_nonfinite``:
        the run's earliest NaN/Inf event, ``{"step", "rank", "where", "module"}`` on its own step
        numbers, or ``None``; ``job_last_step``: the last step the job reached as far as the run
        shows, ``lost_steps``: why that is beyond what was recorded, one line each)."""
        numbers = self.steps["step"]
        progress = self.progress.to_json() if self.progress else {}
        return {
            "path": self.path,
            "id": self.id,
            "world_size": self.world_size,
            "ranks": list(self.ranks),
            "steps": int(numbers.nunique()),
            "first_step": int(numbers.min()),
            "last_step": int(numbers.max()),
            "exit_code": self.exit_code,
            "has_grad_norm": bool(len(self.grad_norm)),
            "has_fingerprints": bool(len(self.fingerprints)),
            "has_kernels": self.kernels is not None,
            "first_nonfinite": self.first_nonfinite,
            "job_last_step": progress.get("job_last_step", int(numbers.max())),
            "lost_steps": progress.get("lost_steps", []),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Alignment:
    """Run B's step ``s`` is compared with run A's step ``s + offset``; ``how`` says why."""

    offset: int
    how: str

    def to_json(self) -> dict[str, Any]:
        return {"b_offset": self.offset, "how": self.how}


def load_run(path: str | Path) -> RunSide:
    """Read one run directory; :class:`InputError` (one line) if it is not one or has no steps."""
    store = RunStore.open(path)
    kinds = store.kinds()
    if "step" not in kinds:
        raise InputError(f"{path}: no step events in the run (nothing to compare)")
    raw = store.frame("step")
    raw = raw[raw["rank"] >= 0].sort_values(["ts_ns", "seq"], kind="stable")
    raw = raw.drop_duplicates(["rank", "step"], keep="last")
    if raw.empty:
        raise InputError(f"{path}: no step events in the run (nothing to compare)")
    steps = pd.DataFrame(
        {
            "rank": raw["rank"].astype("int64").to_numpy(),
            "step": raw["step"].astype("int64").to_numpy(),
            "has_loss": ~raw["loss"].isna().to_numpy(dtype=bool),
            "loss": raw["loss"].to_numpy(dtype="float64", na_value=np.nan),
            "step_ms": raw["duration_ns"].to_numpy(dtype="float64") / _NS_PER_MS,
        }
    )
    for phase, column in PHASE_COLUMNS.items():
        steps[phase] = raw[column].to_numpy(dtype="float64") / _NS_PER_MS
    steps = steps.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)
    run = summarize(store).run
    table, window_steps = _kernels(store, kinds)
    colls = store.frame("collective") if "collective" in kinds else None
    progress = job_progress(
        raw[["rank", "step", "end_ns", "duration_ns", "num_collectives"]],
        None if colls is None else colls[["rank", "step", "enqueue_ns", "end_ns"]],
    )
    ckpt = store.frame("checkpoint") if "checkpoint" in kinds else pd.DataFrame()
    if len(ckpt):
        ckpt = ckpt[ckpt["ok"] & (ckpt["rank"] >= 0)][["rank", "step", "op", "path"]]
    return RunSide(
        path=str(path),
        id=run.id or Path(path).name,
        world_size=run.world_size,
        ranks=tuple(sorted(int(r) for r in steps["rank"].unique())),
        exit_code=run.exit_code,
        steps=steps,
        grad_norm=diff_numerics.grad_norms(store, kinds),
        fingerprints=diff_numerics.fingerprints(store, kinds),
        ckpt=ckpt.reset_index(drop=True) if len(ckpt) else pd.DataFrame(),
        kernels=table,
        window_steps=window_steps,
        first_nonfinite=diff_numerics.first_nonfinite(store, kinds),
        progress=progress,
    )


def _kernels(store: RunStore, kinds: list[str]) -> tuple[kernels.KernelTable | None, float]:
    """The kernel table over the run's complete profiler windows only (a window cut short, e.g.
    by the end of the job, holds a fraction of a step), and their median number of steps."""
    if "kernel" not in kinds or "profile_window" not in kinds:
        return None, 1.0
    pw = store.frame("profile_window")
    pw = pw[(pw["rank"] >= 0) & pw["ok"]]
    ok = set(zip(pw["rank"].astype(int), pw["window_id"].astype(str), strict=True))
    kern = store.frame("kernel")
    keep = [(int(r), str(w)) in ok for r, w in zip(kern["rank"], kern["window_id"], strict=True)]
    kern = kern[keep]
    if kern.empty:
        return None, 1.0
    windows: dict[int, list[str]] = {}
    for rank, window in sorted(ok):
        windows.setdefault(rank, []).append(window)
    grouped = kern.groupby(["rank", "window_id", "name", "category"], sort=False)[
        ["total_ns", "num_calls"]
    ].sum()
    rows = (
        (int(r), str(w), str(n), str(c), float(v["total_ns"]), int(v["num_calls"]))
        for (r, w, n, c), v in grouped.iterrows()
    )
    table = kernels.kernel_table(rows, windows, source="store")
    return table, max(1.0, float(pw["num_steps"].median()))


def align(a: RunSide, b: RunSide, offset: int | None = None) -> Alignment:
    """The offset of B's steps on A's axis: ``offset`` when given, else from a shared checkpoint
    (see the module doc), else 0."""
    if offset is not None:
        return Alignment(offset=offset, how="given (--offset)")
    link = _loaded_from(loader=b, saver=a)
    if link is not None:
        load_step, save_step, name = link
        return Alignment(
            offset=save_step - load_step,
            how=f"run B loaded {name} that run A saved at step {save_step}",
        )
    link = _loaded_from(loader=a, saver=b)
    if link is not None:
        load_step, save_step, name = link
        return Alignment(
            offset=load_step - save_step,
            how=f"run A loaded {name} that run B saved at step {save_step}",
        )
    return Alignment(offset=0, how="same step numbers (no shared checkpoint)")


def _loaded_from(*, loader: RunSide, saver: RunSide) -> tuple[int, int, str] | None:
    """(load step, save step, file name) of the loader's first load of a file the saver saved."""
    if loader.ckpt.empty or saver.ckpt.empty:
        return None
    saves = saver.ckpt[saver.ckpt["op"] == "save"]
    loads = loader.ckpt[loader.ckpt["op"] == "load"].sort_values("step", kind="stable")
    by_path = {str(p): int(s) for p, s in zip(saves["path"], saves["step"], strict=True) if p}
    names: dict[str, list[int]] = {}
    for p, s in by_path.items():
        names.setdefault(os.path.basename(p), []).append(s)
    for path, step in zip(loads["path"], loads["step"], strict=True):
        path = str(path)
        if not path:
            continue
        saved = by_path.get(path)
        if saved is None and len(names.get(os.path.basename(path), [])) == 1:
            saved = names[os.path.basename(path)][0]
        if saved is not None:
            return max(int(step), 0), saved, os.path.basename(path)
    return None


def shifted(frame: pd.DataFrame, offset: int) -> pd.DataFrame:
    """``frame`` (with a ``step`` column) with its steps moved by ``offset``."""
    if not offset or frame.empty:
        return frame
    out = frame.copy()
    out["step"] = out["step"] + offset
    return out
