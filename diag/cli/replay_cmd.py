"""``diag replay RUN_DIR [--finding ID] [--json]``: run the probes that test a finding on its
suspect and on a healthy peer, with the shapes and sizes the run recorded; print confirmed,
refuted, inconclusive or no probe, and write ``RUN_DIR/replay.json`` (:mod:`diag.replay.replay`).

The probes run here, in this process, on this node's device (the daemon does not run probes on
request yet); under one process the link probes (p2p, collectives) are ``unsupported``. Exit 0
whatever the outcome (the outcome is the answer); 2 on a bad run directory or finding id.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "re-run the probes that match a finding on its suspect and a healthy peer"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a diag run directory")
    parser.add_argument("--finding", metavar="ID", help="finding id (default: the top finding)")
    parser.add_argument("--json", action="store_true", help="print replay.json's object")


def run(args: argparse.Namespace) -> int:
    from diag.errors import InputError
    from diag.preflight.runner import make_context
    from diag.replay.plan import ProbePlan
    from diag.replay.replay import Target, replay
    from probes import PROBES
    from probes.base import ProbeResult, run_guarded

    if not (args.run_dir / "store").is_dir():
        raise InputError(f"{args.run_dir}: not a diag run directory (no store/)")
    ctx = make_context()

    def local(plan: ProbePlan, target: Target) -> list[ProbeResult]:
        return run_guarded(PROBES[plan.probe](), plan.params, ctx, float(plan.params.timeout_s))

    result = replay(args.run_dir, args.finding, local)
    if args.json:
        print(json.dumps(result.to_json()))
        return 0
    f = result.finding
    print(f"finding {f['id']} ({f['cause']}, ranks {f.get('ranks')}): {result.outcome}")
    for ev in f["evidence"]:
        if str(ev["metric"]).startswith("replay "):
            print(
                f"  {ev['metric']}: suspect {ev['value']} vs peer {ev['reference']} {ev['unit']}"
                f" ({ev['note']})"
            )
    if result.note:
        print(f"  note: {result.note}")
    print(f"  written: {args.run_dir / 'replay.json'}")
    return 0
