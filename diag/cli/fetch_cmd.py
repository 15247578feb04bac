"""``diag fetch (RUN_DIR | --analyzer HOST:PORT) --step-range A:B [--ranks 0,2] [--host NAME]``.

At fleet scale the node daemons ship one summary per rank, step and process group instead of
every collective (``diag daemon --collectives``) and keep the raw rows on the node for a while
(10 minutes by default). This asks them, through the job's analyzer, for the raw collectives of
steps ``A`` up to ``B`` (``B`` left out, as ``diag trace --step-range A:B`` reads it; ``A``
alone: that step) of ``--ranks`` (default: every rank) on ``--host`` (default:
every node); they arrive in the run like any collective, for ``diag trace`` and the next triage.
Each rank-step comes back once; rows the node no longer holds are gone (its daemon counts them).
``--json`` prints the request as issued.
"""

from __future__ import annotations

import argparse
import json
import sys

from diag.cli.profile_cmd import add_job_arguments, analyzer_of, parse_ranks
from diag.cli.security_args import add_security_arguments, export_client_security
from diag.errors import ConfigError, InputError, TransportError


def configure(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(parser)
    parser.add_argument(
        "--step-range",
        required=True,
        metavar="A:B",
        help="the steps to fetch: A up to B, B left out",
    )
    parser.add_argument(
        "--ranks", default="", metavar="LIST", help="comma-separated ranks (default: all ranks)"
    )
    parser.add_argument("--host", default="*", metavar="NAME", help="one node (default: all)")
    parser.add_argument("--json", action="store_true", help="print the request as one JSON object")
    add_security_arguments(parser)


def parse_steps(text: str) -> tuple[int, int]:
    """The first and last step: ``"100:120"`` -> ``(100, 119)`` (a slice), ``"7"`` -> ``(7, 7)``."""
    first, sep, last = text.partition(":")
    try:
        a, b = int(first), int(last) if sep else int(first) + 1
    except ValueError:
        raise ConfigError(f"--step-range wants A:B (two step numbers), got {text!r}") from None
    if a < 0 or b <= a:
        raise ConfigError(f"--step-range wants 0 <= A < B, got {text!r}")
    return a, b - 1


def run(args: argparse.Namespace) -> int:
    if (args.run_dir is None) == (args.analyzer is None):
        raise ConfigError("give either a run directory or --analyzer HOST:PORT")
    first, last = parse_steps(args.step_range)
    ranks = parse_ranks(args.ranks)
    export_client_security(args)
    target = args.analyzer or analyzer_of(args.run_dir)
    from diag.analyzer.control import fetch_to_json
    from diag.transport.client import AnalyzerClient  # grpc only for this command

    try:
        with AnalyzerClient(target, timeout_s=5.0) as client:
            req = client.request_fetch(first, last, ranks=ranks, host=args.host)
    except TransportError as exc:
        if args.run_dir is None or "UNAVAILABLE" not in str(exc):
            raise
        raise InputError(
            f"{args.run_dir}: the run's analyzer does not answer (nothing listens at {target}): "
            "a fetch needs the job's daemons running"
        ) from None
    if args.json:
        json.dump(fetch_to_json(req), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        where = f"ranks {', '.join(map(str, req.ranks))}" if req.ranks else "all ranks"
        node = "every node" if req.host == "*" else req.host
        print(
            f"collective fetch {req.request_id}: steps {req.first_step}-{req.last_step} of "
            f"{where} on {node}"
        )
    return 0
