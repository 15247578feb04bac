"""``diag report DIR [--json]``: the per-rank summary of a run directory."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "per-rank summary of a run directory"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, help="a run directory written by diag run/analyzer")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from diag.analysis.store import RunStore
    from diag.analysis.summary import summarize

    summary = summarize(RunStore.open(args.run_dir)).to_json()
    if args.json:
        json.dump(summary, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console

    from diag.cli import render

    Console(width=None if sys.stdout.isatty() else 120).print(render.report(summary))
    return 0
