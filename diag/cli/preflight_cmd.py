"""``diag preflight [--probes ...] [--baseline FILE] [--save-baseline] [--json]``: measure this
node's devices (every node's, launched through torchrun) with the registered probes and judge them.

Prints a progress bar per probe, then a result table, or with ``--json`` one object ``{"host",
"results": [{"probe", "device", "metric", "status", "value", "unit", "baseline", "verdict",
"detail"}]}`` (``status``: ok | unsupported | timeout | failed; ``verdict``: pass | fail | skip;
``host`` this node's name, each result's own host prefixed to ``device`` when several reported).
Rules: :mod:`diag.preflight.rules`; a probe failing only its baseline is measured once more and the
better result judged (:mod:`diag.preflight.confirm`). ``--save-baseline`` merges the ``ok`` results
into the baseline file (default ``diag-baseline.json``). Exit 1 when any verdict is ``fail``. Under
torchrun only rank 0 prints and writes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

DEFAULT_BASELINE = Path("diag-baseline.json")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--probes", metavar="LIST", help="comma-separated probe names (default: all registered)"
    )
    parser.add_argument(
        "--baseline", type=Path, default=DEFAULT_BASELINE, metavar="FILE", help="baseline JSON"
    )
    parser.add_argument(
        "--save-baseline", action="store_true", help="merge this run's results into the baseline"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from diag.cli.render.console import stderr_console, stdout_console
    from diag.cli.render.preflight import results_table
    from diag.errors import CollectorUnavailable
    from diag.gpu import GpuBackend, open_backend
    from diag.preflight import baseline as bl
    from diag.preflight.confirm import PAUSE_S, merge_best, slow_probes
    from diag.preflight.rules import judge
    from diag.preflight.runner import check_names, gather, make_context, run_probes
    from probes import DEFAULT_PROBES

    names = [n.strip() for n in args.probes.split(",")] if args.probes else list(DEFAULT_PROBES)
    check_names(names)
    base = bl.load(args.baseline)
    backend: GpuBackend | None = None
    if "nvml" in names:
        try:
            backend = open_backend("nvml")
        except CollectorUnavailable:
            backend = None
    ctx = make_context(backend)
    console = stderr_console()
    show = ctx.rank == 0 and not args.json
    with Progress(console=console, disable=not show, transient=True) as progress:
        task = progress.add_task("preflight", total=len(names))

        def done(name: str, _results: object) -> None:
            progress.update(task, advance=1, description=f"preflight: {name} done")

        rows = run_probes(names, ctx, on_done=done)
    rows = gather(rows, ctx)
    if backend is not None:
        backend.close()
    if ctx.rank != 0:
        return 0
    judged = judge(rows, base)
    if not ctx.distributed and (again := slow_probes(judged)):
        time.sleep(PAUSE_S)
        rows = merge_best(rows, run_probes(again, ctx))
        judged = judge(rows, base)
    if args.save_baseline:
        bl.save(args.baseline, rows)
    if args.json:
        out = {"host": ctx.host, "results": [j.to_json() for j in judged]}
        print(json.dumps(out))
    else:
        stdout_console().print(results_table(judged, multi_host=len({j.host for j in judged}) > 1))
    return 1 if any(j.verdict == "fail" for j in judged) else 0
