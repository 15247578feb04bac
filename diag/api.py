"""diag's Python API for notebooks and scripts; the CLI reads runs and triages through it too.

    import diag

    run = diag.open("runs/20261203-1200-ab12")
    run.steps                 # pandas: one row per rank and step (StepEvent columns, ns)
    run.steps.groupby("rank")["compute_ns"].median() / 1e6
    run.findings              # tuple[diag.findings.Finding], as triage wrote them
    run.summary.ranks         # per-rank medians (diag report)
    diag.triage("runs/20261203-1200-ab12")            # the findings, the detectors run now

A run directory (written by ``diag run``, ``diag attach`` or ``diag analyzer``) opens as a
:class:`Run`; its frames have exactly the columns of the event schema (:mod:`diag.schema`; times
in nanoseconds, ``<NA>`` where a source could not give a value), sorted by time. :func:`triage`
also takes a timing table (Parquet or CSV, one row per rank and step) or what a failed run left
behind (Flight Recorder dumps, torchelastic error files, worker logs), as ``diag triage`` does.

Errors are :class:`~diag.errors.InputError` with one line naming the path: not a run, a
corrupt part, an unreadable table. Importing :mod:`diag` alone loads none of this (the training
job imports the hook from the same package).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from diag.diagnose.triage import TriageResult
from diag.errors import InputError
from diag.findings import Finding
from diag.store.run_store import RunStore
from diag.store.summary import RunSummary

if TYPE_CHECKING:
    from diag.postmortem.analyze import RemainsReport

__all__ = ["FRAMES", "Run", "open", "triage", "triage_path"]

#: the :class:`Run` attributes that are frames -> the event kind they hold
FRAMES: dict[str, str] = {
    "steps": "step",
    "collectives": "collective",
    "checkpoints": "checkpoint",
    "kernels": "kernel",
    "windows": "profile_window",
    "gpu": "gpu",
    "host": "host",
    "processes": "proc",
    "numerics": "numerics",
    "hook_health": "hook_health",
}


@dataclass(frozen=True, slots=True)
class Run:
    """One run directory. Frames are read on first use and kept (the run as it was then: a
    run still being written is read again by a new :func:`open`)."""

    path: Path
    store: RunStore
    _cache: dict[str, object] = field(default_factory=dict, repr=False, compare=False)

    def frame(self, kind: str) -> pd.DataFrame:
        """The events of ``kind`` (a :data:`diag.schema.EVENT_TYPES` key) as one frame, oldest
        first; every column of the schema, also when there are no rows."""
        from diag import schema

        if kind not in schema.EVENT_TYPES:
            raise InputError(
                f"no event kind {kind!r}; the kinds: {', '.join(sorted(schema.EVENT_TYPES))}"
            )
        key = f"frame:{kind}"
        if key not in self._cache:
            df = self.store.frame(kind)
            if "ts_ns" in df.columns and len(df):
                df = df.sort_values(["ts_ns"], kind="stable").reset_index(drop=True)
            self._cache[key] = df
        return self._cache[key].copy()  # type: ignore[attr-defined]

    @property
    def steps(self) -> pd.DataFrame:
        """One row per rank and optimizer step (:class:`~diag.schema.StepEvent`)."""
        return self.frame(FRAMES["steps"])

    @property
    def collectives(self) -> pd.DataFrame:
        """One row per collective the hook recorded (:class:`~diag.schema.CollectiveEvent`)."""
        return self.frame(FRAMES["collectives"])

    @property
    def checkpoints(self) -> pd.DataFrame:
        return self.frame(FRAMES["checkpoints"])

    @property
    def kernels(self) -> pd.DataFrame:
        """Per-kernel summaries of the profiler windows (:class:`~diag.schema.KernelSummary`)."""
        return self.frame(FRAMES["kernels"])

    @property
    def windows(self) -> pd.DataFrame:
        return self.frame(FRAMES["windows"])

    @property
    def gpu(self) -> pd.DataFrame:
        """NVML samples per device (:class:`~diag.schema.GpuSample`)."""
        return self.frame(FRAMES["gpu"])

    @property
    def host(self) -> pd.DataFrame:
        """CPU, memory, disk and network samples per node (:class:`~diag.schema.HostSample`)."""
        return self.frame(FRAMES["host"])

    @property
    def processes(self) -> pd.DataFrame:
        return self.frame(FRAMES["processes"])

    @property
    def numerics(self) -> pd.DataFrame:
        """Loss and gradient statistics per rank and step (:class:`~diag.schema.NumericsSample`)."""
        return self.frame(FRAMES["numerics"])

    @property
    def hook_health(self) -> pd.DataFrame:
        return self.frame(FRAMES["hook_health"])

    @property
    def kinds(self) -> list[str]:
        """The event kinds stored for this run."""
        return self.store.kinds()

    @property
    def summary(self) -> RunSummary:
        """Per-run and per-rank figures (``diag report``)."""
        if "summary" not in self._cache:
            from diag.store.summary import summarize

            self._cache["summary"] = summarize(self.store)
        return self._cache["summary"]  # type: ignore[return-value]

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The findings triage wrote for this run (``findings.jsonl``), else the detectors' now
        (nothing is written)."""
        if "findings" not in self._cache:
            from diag.diagnose.triage import read_findings

            done = read_findings(self.path)
            self._cache["findings"] = done if done is not None else self.triage().findings
        return self._cache["findings"]  # type: ignore[return-value]

    def triage(self, detectors: Mapping[str, object] | None = None) -> TriageResult:
        """Run the detectors on this run now (``detectors``: name -> config)."""
        result, _ = triage_path(self.path, detectors)
        return result


def open(run_dir: str | Path) -> Run:
    """The run in ``run_dir``; :class:`~diag.errors.InputError` when it is not one."""
    path = Path(run_dir)
    return Run(path, RunStore.open(path))


def triage_path(
    path: str | Path, detectors: Mapping[str, object] | None = None
) -> tuple[TriageResult, RemainsReport | None]:
    """What ``diag triage PATH`` runs: a run directory (its remains report too), a timing table
    (no report) or a failed run's remains; :class:`~diag.errors.InputError` when ``path`` is
    none of them. Writes nothing."""
    from diag.diagnose.timing_table import is_timing_table
    from diag.diagnose.triage import triage_remains, triage_run_dir, triage_table
    from diag.postmortem.discover import is_run_dir

    path = Path(path)
    if is_timing_table(path):
        return triage_table(path, detectors), None
    if is_run_dir(path):
        return triage_run_dir(path, detectors)
    result, report = triage_remains(path)
    if _nothing_recognized(report):
        raise InputError(
            f"{path}: not a diag run directory, a timing table (.parquet/.csv) or a failed "
            "run's remains (no Flight Recorder dump, torchelastic error file or worker log line "
            "found)"
        )
    return result, report


def triage(path: str | Path, detectors: Mapping[str, object] | None = None) -> tuple[Finding, ...]:
    """The findings for ``path`` (a run directory, a timing table or remains), computed now,
    most important first; :func:`triage_path` gives the whole result (run section, unreadable
    files, missing evidence)."""
    return triage_path(path, detectors)[0].findings


def _nothing_recognized(report: RemainsReport | None) -> bool:
    """Whether the remains reader found nothing it knows in the path (a script, a photo)."""
    if report is None:
        return False
    r = report.remains
    return not (r.dumps or r.num_error_files or r.clues or r.ranks_seen or r.problems)
