"""``diag report DIR [--json] [--kernels] [--kernels-top N]``: the per-rank summary of a run.

``--kernels`` adds the cross-rank kernel table of the run's profiler windows
(:func:`diag.traces.kernels.from_store`); with ``--json`` it is the ``"kernels"`` list.
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


def run(args: argparse.Namespace) -> int:
    from diag.store.run_store import RunStore
    from diag.store.summary import summarize

    store = RunStore.open(args.run_dir)
    summary = summarize(store).to_json()
    if args.kernels:
        from diag.traces.kernels import from_store

        summary["kernels"] = from_store(store, top=args.kernels_top or None).to_json()
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
