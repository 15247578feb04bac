"""``diag triage DIR|TABLE [--json]``: which rank, host, link, kernel, data loader or checkpoint
is to blame for a slow run.

Writes ``DIR/findings.jsonl`` (one finding per line) and prints a table, or with ``--json`` one
object ``{"run": {...}, "findings": [...]}`` (findings sorted by confidence, highest first).
``TABLE`` is a timing table from another tool (``.parquet`` or ``.csv``, see
:mod:`diag.analysis.timing_table`): the same detectors run on it, and nothing is written.
``--config FILE.toml`` sets detector thresholds (:mod:`diag.analysis.detector_config`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "diagnose a run: which rank, host, link, kernel, data loader or checkpoint is to blame"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        type=Path,
        metavar="RUN",
        help="a run directory written by diag run/analyzer, or a timing table (.parquet/.csv)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE.toml",
        help="detector thresholds: a table per detector, e.g. [node] min_ratio = 1.1",
    )


def run(args: argparse.Namespace) -> int:
    from diag.analysis.detector_config import load_detector_config
    from diag.analysis.store import RunStore
    from diag.analysis.timing_table import is_timing_table
    from diag.analysis.triage import triage, triage_table, write_findings

    detectors = load_detector_config(args.config) if args.config else None
    if is_timing_table(args.run_dir):
        # A table: print only, write nothing next to it.
        result = triage_table(args.run_dir, detectors)
    else:
        result = triage(RunStore.open(args.run_dir), detectors)
        write_findings(args.run_dir, result.findings)
    out = result.to_json()
    if args.json:
        json.dump(out, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console

    from diag.cli import render

    console = Console(width=None if sys.stdout.isatty() else 120)
    if out["findings"]:
        console.print(render.findings_table(out["findings"], title="diag triage"))
    else:
        console.print(f"no findings in run {out['run'].get('id') or args.run_dir}")
    return 0
