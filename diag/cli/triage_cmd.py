"""``diag triage PATH [--json] [--html FILE]``: which rank, host, link, kernel, data loader or
checkpoint is to blame for a slow run, and which rank(s) failed first in a failed one.

``PATH`` is, by what it is:

* a diag run directory: the detectors run on its store, merged with the remains inside it
  (``logs/job.log``, dumps); writes ``DIR/findings.jsonl`` (one finding per line);
* a timing table from another tool (``.parquet`` or ``.csv``, see
  :mod:`diag.diagnose.timing_table`): the same detectors run on it, and nothing is written;
* anything else, a directory or one file of what a failed run left (Flight Recorder dumps,
  torchelastic error files, worker logs, see :mod:`diag.postmortem`): nothing is written there.

Prints a table, or with ``--json`` one object ``{"run": {...}, "findings": [...]}`` (findings
ranked by severity, then share of the job lost x confidence; ``"problems"`` and ``"missing"`` too
when remains were read).
``--html FILE`` also writes one self-contained HTML report. ``--config FILE.toml`` sets detector
thresholds (:mod:`diag.diagnose.detector_config`).

Exit status: 0; with ``--fail-on warning`` (or ``critical``) 1 when a finding is at least that
severe, so that a CI step can gate on it; 2 (one line on stderr) for a path that is none of the
three (a script, an empty folder).

Examples::

    diag triage runs/20261203-1200-ab12cd                 # a diag run: table, evidence, verdict
    diag triage runs/x --json | jq '.findings[0].ranks'   # the top culprit's ranks
    diag triage /shared/job-42/ --html job42.html         # a failed job's dumps and logs
    diag triage timings.parquet --fail-on critical        # another tool's table, as a CI gate
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diag.findings import Finding


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN_DIR",
        help="a run directory written by diag run/analyzer, a timing table (.parquet/.csv), or "
        "a failed run's remains (Flight Recorder dumps, torchelastic error files, worker logs)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--html", type=Path, metavar="FILE", help="also write a self-contained HTML report"
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE.toml",
        help="detector thresholds: a table per detector, e.g. [node] min_ratio = 1.1",
    )
    parser.add_argument(
        "--fail-on",
        choices=("warning", "critical"),
        default=None,
        help="exit 1 when a finding is at least this severe (a CI gate)",
    )
    parser.epilog = "examples:\n" + __doc__.split("Examples::\n\n", 1)[1].rstrip('" \n') + "\n"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    from diag.api import triage_path
    from diag.diagnose.detector_config import load_detector_config
    from diag.diagnose.triage import write_findings
    from diag.postmortem.discover import is_run_dir

    detectors = load_detector_config(args.config) if args.config else None
    # A table or remains: read only, nothing written next to them; a run directory keeps its
    # findings (findings.jsonl).
    result, report = triage_path(args.run_dir, detectors)
    if is_run_dir(args.run_dir):
        write_findings(args.run_dir, result.findings)
    out = result.to_json()
    failed = _fails(result.findings, args.fail_on)
    if args.html:
        from diag.cli.render.triage_html import write_report

        write_report(args.html, args.run_dir, result, report)
    if args.json:
        json.dump(out, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return failed
    from diag.cli.render import tables
    from diag.cli.render.console import stdout_console

    console = stdout_console(highlight=False)
    if result.findings:
        console.print(tables.findings_table(result.findings, title="diag triage"))
    else:
        console.print(tables.plain(f"no findings in run {out['run'].get('id') or args.run_dir}"))
    # one line each, however long (soft_wrap: the terminal wraps it, rich does not)
    for line in out.get("problems", []):
        console.print(tables.plain(f"unreadable: {line}"), soft_wrap=True)
    for line in out.get("missing", []):
        console.print(tables.plain(f"missing: {line}"), soft_wrap=True)
    for line in tables.details(result.findings):
        console.print(line, soft_wrap=True)
    run = out.get("run") or {}
    steps, ranks = int(run.get("steps") or 0), int(run.get("world_size") or 0)
    if run.get("in_progress"):
        console.print(
            tables.plain(
                f"the run is still going (analyzer pid {run.get('writer_pid')} is writing it): "
                f"this is the run so far, {steps} steps"
            ),
            soft_wrap=True,
        )
    console.print(tables.verdict_line(result.findings, steps, ranks, run), soft_wrap=True)
    return failed


def _fails(findings: Sequence[Finding], floor: str | None) -> int:
    """1 when a finding is at least ``floor`` severe (``--fail-on``), else 0."""
    from diag.findings import SEVERITIES

    if floor is None:
        return 0
    least = SEVERITIES.index(floor)
    return 1 if any(SEVERITIES.index(f.severity) >= least for f in findings) else 0
