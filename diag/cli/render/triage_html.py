"""Gather what ``diag triage --html`` draws from the path it was given, and write the page.

Step data (compute per rank and step) comes from a run directory's store or a timing table;
collectives from the remains' Flight Recorder dumps, else from the run store's own collective
events; stacks and culprits from the remains analysis (:class:`~diag.postmortem.analyze.
RemainsReport`). Rendering is :func:`diag.cli.render.html.render`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from diag.cli.render.html import ReportData, render
from diag.diagnose.triage import TriageResult
from diag.errors import InputError
from diag.fsutil import atomic_write
from diag.postmortem.analyze import RemainsReport
from diag.postmortem.discover import is_run_dir
from diag.untrusted import printable


def report_data(path: Path, result: TriageResult, report: RemainsReport | None) -> ReportData:
    """The page's data for ``diag triage PATH`` and its result."""
    steps = pd.DataFrame()
    dumps = report.remains.dumps if report is not None else ()
    if is_run_dir(path):
        from diag.diagnose.features import Features
        from diag.postmortem.from_store import dumps_from_collectives
        from diag.store.run_store import RunStore

        store = RunStore.open(path)
        steps = Features.from_store(store).steps
        if not dumps:
            dumps = dumps_from_collectives(store.frame("collective"), f"{path}/store")
    elif path.is_file():
        from diag.diagnose.timing_table import (
            features_from_table,
            is_timing_table,
            read_timing_table,
        )

        if is_timing_table(path):
            steps = features_from_table(read_timing_table(path)).steps
    run_id = result.run.get("id") or path.name
    return ReportData(
        title=f"diag triage: {run_id}",
        run=result.run,
        findings=result.findings,
        problems=result.problems or (),
        missing=result.missing,
        steps=steps,
        dumps=tuple(dumps),
        stacks=report.stacks if report is not None else {},
    )


def write_report(out: Path, path: Path, result: TriageResult, report: RemainsReport | None) -> Path:
    """Write the page for ``path`` to ``out`` (atomically); :class:`InputError` if it cannot."""
    page = render(report_data(Path(path), result, report))
    try:
        atomic_write(out, page)
    except OSError as exc:
        raise InputError(
            f"{printable(str(out))}: cannot write the HTML report ({exc.strerror or exc})"
        ) from None
    return out
