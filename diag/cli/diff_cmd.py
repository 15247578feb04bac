"""``diag diff RUN_A RUN_B [--json] [--html FILE]``: parity of two runs (see
:mod:`diag.compare.diff` for the rules).

Prints the verdict and tables (loss and gradient-norm comparison, step time by phase, kernel
changes), or with ``--json`` one object ``{"a", "b", "alignment", "verdict", "loss",
"grad_norm", "params", "phases", "kernels", "notes", "coverage"}`` (the verdict's ``kind`` is
"equivalent", "diverged", "slower" or "incomplete": steps left out of the comparison, see
:mod:`diag.compare.coverage`). ``--html FILE`` also writes a
self-contained page with both runs' curves.

Exit status, so that a CI step can gate on it (:data:`EXIT_CODES`): 0 equivalent, 1 diverged,
3 slower, 4 incomplete; 2 (one line on stderr) for a path that is not a run directory, a run
without steps, or runs without a common step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: verdict kind -> exit status (2 is every command's "error").
EXIT_CODES = {"equivalent": 0, "diverged": 1, "slower": 3, "incomplete": 4}


def configure(parser: argparse.ArgumentParser) -> None:
    from diag.compare.diff import GRAD_NORM_BAND, LOSS_BAND
    from diag.compare.perf import MIN_SLOWER_PCT

    parser.add_argument("run_a", type=Path, metavar="RUN_A", help="the reference run directory")
    parser.add_argument("run_b", type=Path, metavar="RUN_B", help="the run compared with it")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--html", type=Path, metavar="FILE", help="also write a self-contained HTML report"
    )
    parser.add_argument(
        "--rtol", type=float, default=LOSS_BAND.rtol,
        help=f"loss band: |b - a| <= atol + rtol x |a| (default {LOSS_BAND.rtol:g})",
    )  # fmt: skip
    parser.add_argument(
        "--atol", type=float, default=LOSS_BAND.atol,
        help=f"loss band, absolute part (default {LOSS_BAND.atol:g})",
    )  # fmt: skip
    parser.add_argument(
        "--grad-rtol", type=float, default=GRAD_NORM_BAND.rtol,
        help=f"gradient-norm band, relative part (default {GRAD_NORM_BAND.rtol:g})",
    )  # fmt: skip
    parser.add_argument(
        "--min-slower-pct", type=float, default=MIN_SLOWER_PCT,
        help=f"B is slower only from this %% of A's median step (default {MIN_SLOWER_PCT:g})",
    )  # fmt: skip
    parser.add_argument(
        "--offset", type=int, default=None,
        help="compare B's step s with A's step s + OFFSET (default: from a shared checkpoint)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from diag.compare.diff import DiffConfig, diff_runs
    from diag.errors import InputError

    for name, value in (
        ("--rtol", args.rtol),
        ("--atol", args.atol),
        ("--grad-rtol", args.grad_rtol),
    ):
        if not value >= 0:
            raise InputError(f"{name} must be >= 0, got {value}")
    base = DiffConfig()
    cfg = DiffConfig(
        loss=replace(base.loss, rtol=args.rtol, atol=args.atol),
        grad_norm=replace(base.grad_norm, rtol=args.grad_rtol),
        min_slower_pct=args.min_slower_pct,
        offset=args.offset,
    )
    result = diff_runs(args.run_a, args.run_b, cfg)
    if args.html:
        from diag.cli.render.diff_html import write_report

        write_report(args.html, result)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return EXIT_CODES[result.verdict.kind]
    from diag.cli.render.console import stdout_console
    from diag.cli.render.diff import diff_renderables

    console = stdout_console()
    for item in diff_renderables(result.to_json()):
        console.print(item)
    return EXIT_CODES[result.verdict.kind]
