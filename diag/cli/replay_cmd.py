"""``diag replay RUN_DIR [--finding ID] [--json]``: run the probes that test a finding on its
suspect and on a healthy peer, with the shapes and sizes the run recorded; print confirmed,
refuted, inconclusive or no probe, and write ``RUN_DIR/replay.json`` (:mod:`diag.replay.replay`).

By default the probes run here, in this process, on this node's device; under one process the link
probes (p2p, collectives) are ``unsupported``. With ``--via-analyzer HOST:PORT`` (the run's live
analyzer) each probe is sent to the suspect's and the peer's own node daemon instead, which runs it
on that rank's device in a low-priority child process (:mod:`diag.replay.remote`); the results are
read back from the run directory the analyzer writes (``RUN_DIR`` must be that directory). Exit 0
whatever the outcome (the outcome is the answer); 2 on a bad run directory or finding id.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from diag.cli.security_args import add_security_arguments, export_client_security


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a diag run directory")
    parser.add_argument("--finding", metavar="ID", help="finding id (default: the top finding)")
    parser.add_argument("--json", action="store_true", help="print replay.json's object")
    parser.add_argument(
        "--via-analyzer",
        metavar="HOST:PORT",
        help="run the probes on the ranks' own nodes through the run's live analyzer and daemons",
    )
    add_security_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from diag.preflight.runner import make_context
    from diag.replay.plan import ProbePlan
    from diag.replay.replay import Target, replay
    from probes import PROBES
    from probes.base import ProbeResult, run_guarded

    export_client_security(args)
    if not (args.run_dir / "store").is_dir():
        from diag.store.run_store import RunStore

        raise RunStore.not_a_run(args.run_dir)
    if args.via_analyzer:
        from diag.replay.remote import daemon_runner
        from diag.transport.client import AnalyzerClient

        with AnalyzerClient(args.via_analyzer) as client:
            runner = daemon_runner(args.run_dir, client.request_probe)
            result = replay(args.run_dir, args.finding, runner)
    else:
        ctx = make_context()

        def local(plan: ProbePlan, target: Target) -> list[ProbeResult]:
            params = plan.params
            return run_guarded(PROBES[plan.probe](), params, ctx, float(params.timeout_s))

        result = replay(args.run_dir, args.finding, local)
    if args.json:
        print(json.dumps(result.to_json()))
        return 0
    f = result.finding
    print(f"finding {f.id} ({f.cause}, ranks {list(f.ranks)}): {result.outcome}")
    for ev in f.evidence:
        if ev.metric.startswith("replay "):
            print(
                f"  {ev.metric}: suspect {ev.value:g} vs peer {ev.reference:g} {ev.unit}"
                f" ({ev.note})"
            )
    if result.note:
        print(f"  note: {result.note}")
    print(f"  written: {args.run_dir / 'replay.json'}")
    return 0
