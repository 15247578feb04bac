"""Triage a run: features -> every registered detector -> ranked findings, plus the run's facts.

The ``diag triage --json`` object is :meth:`TriageResult.to_json`: ``{"run": {...}, "findings":
[...]}`` where ``run`` is the run section of ``diag report --json`` (id, world_size, steps, hosts,
...) and ``findings`` are :meth:`Finding.to_json`, sorted by confidence, highest first. For a
timing table (:mod:`diag.analysis.timing_table`) ``run`` is ``{"id": the file's stem, "source":
"timing table", "world_size": ranks, "steps": ...}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diag.analysis.detectors.registry import run_all
from diag.analysis.features import Features
from diag.analysis.findings import Finding
from diag.analysis.store import RunStore, fsync_dir
from diag.analysis.summary import summarize
from diag.analysis.timing_table import features_from_table, read_timing_table, run_info

FINDINGS_FILE = "findings.jsonl"


@dataclass(frozen=True, slots=True)
class TriageResult:
    """The run's facts (``diag report``'s run section) and its findings, ranked."""

    run: dict[str, Any]
    findings: tuple[Finding, ...]

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "findings": [f.to_json() for f in self.findings]}


def triage(store: RunStore, detectors: Mapping[str, object] | None = None) -> TriageResult:
    """Run every registered detector on ``store`` (``detectors``: name -> config, e.g. from
    :func:`~diag.analysis.detector_config.load_detector_config`; defaults for the others);
    :class:`~diag.errors.InputError` on bad parts."""
    features = Features.from_store(store)
    run = summarize(store).to_json()["run"]
    return TriageResult(run=run, findings=tuple(run_all(features, detectors)))


def triage_table(path: Path, detectors: Mapping[str, object] | None = None) -> TriageResult:
    """Run every registered detector (configs as in :func:`triage`) on a timing table (Parquet or
    CSV) at ``path``; :class:`~diag.errors.InputError` (one line naming the file) when it is not
    one."""
    table = read_timing_table(path)
    features = features_from_table(table)
    return TriageResult(run=run_info(path, table), findings=tuple(run_all(features, detectors)))


def write_findings(run_dir: Path, findings: tuple[Finding, ...]) -> Path:
    """``RUN_DIR/findings.jsonl``, one JSON object per finding, replaced atomically."""
    path = Path(run_dir) / FINDINGS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for f in findings:
            fh.write(json.dumps(f.to_json(), allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path
