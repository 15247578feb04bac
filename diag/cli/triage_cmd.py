"""``diag triage DIR [--json]``: which rank, host, link, kernel, data loader or checkpoint is to
blame for a slow run.

Writes ``DIR/findings.jsonl`` (one finding per line) and prints a table, or with ``--json`` one
object ``{"run": {...}, "findings": [...]}`` (findings sorted by confidence, highest first).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

HELP = "diagnose a run: which rank, host, link, kernel, data loader or checkpoint is to blame"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, help="a run directory written by diag run/analyzer")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from diag.analysis.store import RunStore
    from diag.analysis.triage import triage, write_findings

    store = RunStore.open(args.run_dir)
    result = triage(store)
    write_findings(args.run_dir, result.findings)
    out = result.to_json()
    if args.json:
        json.dump(out, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 120)
    if out["findings"]:
        console.print(findings_table(out["findings"]))
    else:
        console.print(f"no findings in run {out['run'].get('id') or args.run_dir}")
    return 0


def findings_table(findings: list[dict[str, Any]]) -> Table:
    """The findings as a table: culprit, cause, severity, confidence, slowdown, summary."""
    table = Table(title="diag triage")
    for col in ("culprit", "cause", "severity", "conf", "slowdown", "summary"):
        table.add_column(col, overflow="fold")
    for f in findings:
        who = ", ".join(f["hosts"]) or ", ".join(f"r{r}" for r in f["ranks"]) or "-"
        slow = "-" if f["slowdown"] is None else f"{f['slowdown']:.1%}"
        table.add_row(who, f["cause"], f["severity"], f"{f['confidence']:.2f}", slow, f["summary"])
    return table
