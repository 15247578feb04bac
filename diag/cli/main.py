"""``diag``: the command table and the one place errors become a single line.

Each command is a module with ``configure(parser)`` and ``run(args) -> int``; :data:`COMMANDS`
below is the explicit registry and the one place a command's one-line help is written (the
module's docstring says the rest). Command modules are imported only when chosen, so ``diag
report`` does not pay for grpc and ``diag daemon`` does not pay for pandas.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from diag.errors import DiagError

#: command name -> module implementing it (``configure``, ``run``).
COMMANDS: dict[str, str] = {
    "run": "diag.cli.run_cmd",
    "demo": "diag.cli.demo_cmd",
    "report": "diag.cli.report_cmd",
    "trace": "diag.cli.trace_cmd",
    "daemon": "diag.cli.daemon_cmd",
    "analyzer": "diag.cli.analyzer_cmd",
    "profile": "diag.cli.profile_cmd",
    "fetch": "diag.cli.fetch_cmd",
    "triage": "diag.cli.triage_cmd",
    "faults": "diag.cli.faults_cmd",
    "diff": "diag.cli.diff_cmd",
    "preflight": "diag.cli.preflight_cmd",
    "replay": "diag.cli.replay_cmd",
    "attach": "diag.cli.attach_cmd",
}

#: command name -> its one-line help (``diag --help``, ``diag COMMAND --help``).
HELP: dict[str, str] = {
    "run": "run a torchrun job under diag: hook every rank, watch it live, store the run",
    "demo": "run the built-in demo: a 4-rank CPU DDP job with one slow rank, diagnosed",
    "report": "per-rank summary of a run directory",
    "trace": "merged Perfetto timeline of a run, or kernel tables of Kineto trace files",
    "daemon": "the per-node daemon: collect from local ranks and GPUs, ship to the analyzer",
    "analyzer": "the analyzer service: ingest events over gRPC into a run directory",
    "profile": "ask a running job for a profiler window on every rank",
    "fetch": "ask a running job's node daemons for the raw collectives they summarized",
    "triage": (
        "diagnose a run: which rank, host, link, kernel, data loader or checkpoint is to blame"
    ),
    "faults": "inject a fault into a real CPU torchrun job and check that diag names it",
    "diff": "compare two runs: loss and gradient-norm parity, divergent step, time by phase",
    "preflight": "measure this node's devices and links with the probes, against a baseline",
    "replay": "re-run the probes that match a finding on its suspect and a healthy peer",
    "attach": (
        "attach to a running torchrun job: hook every rank of this node, watch it live, detach"
    ),
}


#: One to three real invocations per command, shown under its ``--help`` (a command module that
#: sets its own epilog, as ``triage`` does, keeps it).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": (
        "diag run -- torchrun --nproc_per_node 4 train.py --lr 0.1",
        "diag run --out runs/exp7 --live off -- torchrun --nnodes 2 --nproc_per_node 8 train.py",
        "diag run --analyzer 10.0.0.5:50051 --token-file ~/.diag/token -- torchrun ... train.py",
    ),
    "demo": (
        "diag demo                                  # rank 2 made slow from step 20",
        "diag demo --slow-rank 1 --slow-ms 20 --onset 30 --steps 80 --out runs/demo",
    ),
    "report": (
        "diag report runs/exp7",
        "diag report runs/exp7 --kernels --kernels-top 10",
        "diag report runs/exp7 --json | jq '.ranks[] | {rank, step_ms_median}'",
    ),
    "trace": (
        "diag trace runs/exp7                       # writes runs/exp7/trace.json",
        "diag trace runs/exp7 --step-range 100:120 --output slow.json.gz",
        "diag trace traces/rank*.json.gz --top 5    # kernel tables of Kineto traces",
    ),
    "daemon": (
        "diag daemon --listen /tmp/diag.sock --analyzer 10.0.0.5:50051 --spool /var/tmp/diag",
    ),
    "analyzer": (
        "diag analyzer --run-dir runs/exp7 --port-file runs/exp7.port",
        "diag analyzer --run-dir runs/exp7 --bind 0.0.0.0:50051 --token-file ~/.diag/token",
    ),
    "profile": (
        "diag profile runs/exp7                     # one step on every rank, a few steps ahead",
        "diag profile runs/exp7 --steps 3 --ranks 0,5 --at-step 1200",
    ),
    "fetch": (
        "diag fetch runs/exp7 --step-range 1200:1220  # every rank's collectives of 20 steps",
        "diag fetch runs/exp7 --step-range 1200:1210 --ranks 0,5 --host node-3 --json",
    ),
    "faults": (
        "diag faults list",
        "diag faults run node --severity 0.3 --rank 2 --onset 30",
        "diag faults run data --mechanism data.sleep_loader --json",
    ),
    "diff": (
        "diag diff runs/before runs/after           # exit 0 equivalent, 1 diverged, 3 slower",
        "diag diff runs/a runs/b --offset 500 --html diff.html",
    ),
    "preflight": (
        "diag preflight",
        "diag preflight --probes gemm,membw --save-baseline",
        "torchrun --nproc_per_node 8 -m diag.cli.main preflight --json",
    ),
    "replay": (
        "diag replay runs/exp7                      # the top finding",
        "diag replay runs/exp7 --finding node-rank2 --json",
    ),
    "attach": (
        "diag attach 12345                          # the torchrun agent's pid; Ctrl-C detaches",
        "diag attach --job my-run-id --duration 300 --out runs/attached",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="diag", description="Diagnose distributed training.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no log lines on stderr but errors"
    )
    parser.add_argument("--version", action="version", version=f"diag {_version()}")
    sub = parser.add_subparsers(dest="diag_command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        sub.add_parser(name, help=HELP[name], description=HELP[name])
    return parser


def _version() -> str:
    """The installed package's version (the source tree's pyproject when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("diag")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Only the chosen command's module is imported and allowed to add its arguments.
    name = next((a for a in argv if not a.startswith("-")), None)
    sub: argparse.ArgumentParser | None = None
    if name in COMMANDS:
        module = importlib.import_module(COMMANDS[name])
        sub_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub = sub_action.choices[name]
        module.configure(sub)
        if sub.epilog is None and name in EXAMPLES:
            sub.epilog = "examples:\n" + "".join(f"  {line}\n" for line in EXAMPLES[name])
            sub.formatter_class = argparse.RawDescriptionHelpFormatter
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own usage line, not the top level's
        (sub or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
    )
    if args.quiet:  # whatever level a diag logger was given, nothing below ERROR is shown
        for handler in logging.getLogger().handlers:
            handler.setLevel(logging.ERROR)
    module = importlib.import_module(COMMANDS[args.diag_command])
    try:
        return int(module.run(args))
    except DiagError as exc:
        print(f"diag {args.diag_command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (diag report --json | head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
