"""``diag report DIR [--json] [--kernels] [--kernels-top N] [--html FILE]``: the per-rank summary.

``--kernels`` adds the cross-rank kernel table of the run's profiler windows
(:func:`diag.traces.kernels.from_store`); with ``--json`` it is the ``"kernels"`` list.
``--html FILE`` also writes one self-contained page of plots (:mod:`diag.cli.render.report_html`:
rank x step heatmaps, step time with the findings' onsets, phases per rank, GPU telemetry) with
the run's findings (``findings.jsonl``, else triaged now, nothing written into the run).
Everything is read through the Python API (:func:`diag.open`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="a run directory written by diag run/analyzer"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--kernels",
        action="store_true",
        help="add the per-kernel table across ranks (profiler windows)",
    )
    parser.add_argument(
        "--kernels-top",
        type=int,
        default=20,
        metavar="N",
        help="kernels in that table, heaviest first (default 20; 0 = all)",
    )
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write a self-contained HTML page of plots (heatmaps, onsets, GPU telemetry)",
    )


def run(args: argparse.Namespace) -> int:
    from diag.api import open as open_run

    run = open_run(args.run_dir)
    summary = run.summary.to_json()
    if args.kernels:
        from diag.traces.kernels import from_store

        summary["kernels"] = from_store(run.store, top=args.kernels_top or None).to_json()
    if args.html:
        from diag.cli.render.report_html import write_report

        write_report(args.html, run, run.findings)
        print(f"diag report: wrote {args.html}", file=sys.stderr)
    if args.json:
        json.dump(summary, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    from diag.cli.render import tables
    from diag.cli.render.console import stdout_console

    console = stdout_console()
    console.print(tables.report(summary))
    if args.kernels:
        if summary["kernels"]:
            console.print(tables.kernel_table(summary["kernels"]))
        else:
            console.print("no kernel summaries in this run (no profiler window was taken)")
    return 0
