"""``diag trace PATH [PATH ...] [--output FILE] [--step-range A:B] [--top N] [--json]``.

- One run directory: writes the merged Chrome/Perfetto trace of all ranks (steps, collectives,
  the profiler windows' kernels; :mod:`diag.traces.timeline`) to ``--output`` (default
  ``RUN_DIR/trace.json``; a name ending in ``.gz`` is gzipped).
- Kineto trace files, or folders of them (searched recursively for ``*.json``/``*.json.gz``):
  prints each rank's heaviest kernels and the cross-rank kernel table; with ``--output`` also
  writes one merged trace of the files, a process per rank.

``--out`` and ``--steps`` are the old names of ``--output`` and ``--step-range`` (still read):
everywhere else ``--out`` is a run directory and ``--steps N`` a count.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

PERFETTO = "https://ui.perfetto.dev"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="a run directory, or Kineto trace files / folders of them",
    )
    # --output is a file (``--out`` is a run directory in every other command: kept working
    # here, not shown); --step-range is a range (``--steps N`` is a count elsewhere: likewise)
    parser.add_argument(
        "-o", "--output", dest="out", type=Path, metavar="FILE",
        help="write the merged trace to FILE (.json or .json.gz; default RUN_DIR/trace.json)",
    )  # fmt: skip
    parser.add_argument("--out", dest="out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--step-range", dest="steps", metavar="A:B",
        help="run directory only: keep steps A..B-1 (Python slice: 10:, :50)",
    )  # fmt: skip
    parser.add_argument("--steps", dest="steps", help=argparse.SUPPRESS)
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="kernels per table (default 10)"
    )
    parser.add_argument("--json", action="store_true", help="print the tables as one JSON object")


def run(args: argparse.Namespace) -> int:
    from diag.errors import InputError

    paths: list[Path] = args.paths
    runs = [p for p in paths if (p / "store").is_dir()]
    if runs and len(paths) > 1:
        raise InputError(f"{runs[0]} is a run directory: give it alone, not with other paths")
    if runs:
        return _run_dir(runs[0], args)
    if args.steps:
        raise InputError("--step-range needs a run directory (Kineto files have no step records)")
    return _files(paths, args)


def _run_dir(run_dir: Path, args: argparse.Namespace) -> int:
    from diag.store.run_store import RunStore
    from diag.traces.timeline import merged_trace, parse_steps

    trace = merged_trace(RunStore.open(run_dir), steps=parse_steps(args.steps))
    out = args.out or run_dir / "trace.json"
    for note in trace["metadata"]["diag"]["notes"]:
        print(f"diag trace: {note}", file=sys.stderr)
    _write(trace, out)
    return 0


def _files(paths: list[Path], args: argparse.Namespace) -> int:
    from diag.errors import InputError
    from diag.traces import kernels, kineto, kineto_summary

    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.name.endswith((".json", ".json.gz")))
            if not found:
                raise InputError(f"{p}: no Kineto trace files (*.json, *.json.gz) in it")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise InputError(f"{p} does not exist")
    traces = [kineto.load_trace(f) for f in files]
    summaries = [kineto_summary.summarize(t, top=args.top) for t in traces]
    table = kernels.from_traces(summaries, top=args.top)
    per_trace = [kineto_summary.summary_json(s) for s in summaries]
    if args.json:
        doc = {"traces": per_trace, "kernels": table.to_json()}
        json.dump(doc, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        from diag.cli.render import tables
        from diag.cli.render.console import stdout_console

        console = stdout_console()
        for s in per_trace:
            console.print(tables.trace_table(s))
        if len(table.ranks) > 1:
            console.print(tables.kernel_table(table.to_json()))
    if args.out:
        from diag.traces.timeline import merged_kineto

        _write(merged_kineto(traces), args.out, stream=sys.stderr if args.json else sys.stdout)
    return 0


def _write(trace: dict[str, Any], out: Path, stream: Any = None) -> None:
    from diag.errors import InputError

    data = json.dumps(trace, allow_nan=False, separators=(",", ":")).encode()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(gzip.compress(data, 6) if out.name.endswith(".gz") else data)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    num = sum(1 for e in trace["traceEvents"] if e["ph"] != "M")
    ranks = trace["metadata"]["diag"]["num_ranks"]
    print(
        f"wrote {num} events for {ranks} ranks to {out} (open in {PERFETTO})",
        file=stream or sys.stdout,
    )
