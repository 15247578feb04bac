"""``diag profile (RUN_DIR | --analyzer HOST:PORT) [--steps N] [--ranks 0,2] [--at-step S]``.

Asks a running job's analyzer for a profiler window: every rank (or those of ``--ranks``) records
``--steps`` steps from step ``--at-step`` (default: a few steps ahead of the newest step the
analyzer has seen, far enough that every rank gets the request in time). The daemons pull the
request from the analyzer and the hooks from their daemon; the windows arrive as ``ProfileWindow``
events tagged with the request id. ``RUN_DIR`` stands for the analyzer named in its ``run.json``
(written by ``diag run`` while the job runs). ``--json`` prints the request as issued.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from diag.cli.security_args import add_security_arguments, export_client_security
from diag.errors import ConfigError, InputError, TransportError

if TYPE_CHECKING:
    from diag.proto import diag_pb2 as pb


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """``RUN_DIR`` or ``--analyzer HOST:PORT``: the running job to ask (``diag profile``,
    ``diag fetch``)."""
    parser.add_argument(
        "run_dir",
        nargs="?",
        type=Path,
        metavar="RUN_DIR",
        help="the run directory of a running job",
    )
    parser.add_argument("--analyzer", metavar="HOST:PORT", help="the analyzer to ask instead")


def configure(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(parser)
    parser.add_argument(
        "--steps", type=int, default=1, metavar="N", help="steps in the window (default 1)"
    )
    parser.add_argument(
        "--ranks", default="", metavar="LIST", help="comma-separated ranks (default: all ranks)"
    )
    parser.add_argument(
        "--at-step", type=int, default=0, metavar="STEP",
        help="first step of the window (default: a few ahead)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the request as one JSON object")
    add_security_arguments(parser)


def parse_ranks(text: str) -> list[int]:
    """``"0,2"`` -> ``[0, 2]``; ``""`` -> ``[]`` (all ranks)."""
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(
            f"--ranks wants comma-separated rank numbers, e.g. 0,2; got {text!r}"
        ) from None
    if any(r < 0 for r in ranks):
        raise ConfigError(f"--ranks must be >= 0, got {text!r}")
    return ranks


def analyzer_of(run_dir: Path) -> str:
    """The ``analyzer`` address that ``diag run`` wrote into ``run_dir/run.json``."""
    path = run_dir / "run.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        from diag.store.run_store import RunStore

        raise RunStore.not_a_run(run_dir) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    target = data.get("analyzer") if isinstance(data, dict) else None
    if not target or not isinstance(target, str):
        raise InputError(
            f"{path} names no analyzer (the run had none, or was not started by diag run); "
            "use --analyzer HOST:PORT"
        )
    return target


def _ended(run_dir: Path) -> bool:
    """Whether ``diag run`` recorded the job's end in ``run_dir/run.json``."""
    try:
        data = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("exit_code") is not None


def describe(req: pb.ProfileRequest) -> str:
    """One line: ``profile request 1a2b3c4d: 1 step at step 57 on all ranks``."""
    steps = f"{req.num_steps} step{'s' if req.num_steps != 1 else ''}"
    if req.ranks:
        where = f"rank{'s' if len(req.ranks) > 1 else ''} {', '.join(map(str, req.ranks))}"
    else:
        where = "all ranks"
    return f"profile request {req.request_id}: {steps} at step {req.at_step} on {where}"


def run(args: argparse.Namespace) -> int:
    if (args.run_dir is None) == (args.analyzer is None):
        raise ConfigError("give either a run directory or --analyzer HOST:PORT")
    if args.at_step < 0:
        raise ConfigError(f"--at-step must be >= 0 (0 = a few steps ahead), got {args.at_step}")
    ranks = parse_ranks(args.ranks)
    export_client_security(args)
    target = args.analyzer or analyzer_of(args.run_dir)
    from diag.analyzer.control import request_to_json
    from diag.transport.client import AnalyzerClient  # grpc only for this command

    try:
        with AnalyzerClient(target, timeout_s=5.0) as client:
            req = client.request_profile(num_steps=args.steps, ranks=ranks, at_step=args.at_step)
    except TransportError as exc:
        if args.run_dir is None or "UNAVAILABLE" not in str(exc):
            raise
        ended = _ended(args.run_dir)
        raise InputError(
            f"{args.run_dir}: "
            + ("the run has ended" if ended else "the run's analyzer does not answer")
            + f" (nothing listens at {target}): a profiler window needs a running job"
        ) from None
    if args.json:
        json.dump(request_to_json(req), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(describe(req))
    return 0
