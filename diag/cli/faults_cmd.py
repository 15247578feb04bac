"""``diag faults``: the fault-injection suite against this machine's setup.

    diag faults list
    diag faults run CAUSE [--mechanism NAME] [--severity 0.2] [--rank R] [--onset 30]
                          [--steps 80] [--nproc 4] [--seed 0] [--out DIR] [--json]

``run`` injects one fault (:mod:`diag.selftest.cases`: ``node``, ``data``, ``checkpoint``,
``kernel``, ``structural``, ``link`` — which needs root for network namespaces — or ``clean``)
into a real torchrun job under ``diag run`` (:mod:`diag.selftest.live`), triages the run and says
whether diag named the injected culprit and cause (:mod:`diag.selftest.score`). ``--mechanism``
injects the cause another way (:mod:`diag.selftest.mechanisms`: a CPU hog, a cgroup quota, a
sleeping loader, skewed batches, another dtype or algorithm, slow writes behind a stream...);
``list`` names them with their split (``tune``: what diag was tuned on; ``heldout``). Exit status
0 when it did, 1 when it did not. ``bench/accuracy.py`` runs the whole suite over severities and
seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from diag.errors import ConfigError

_DESCRIPTIONS = {
    "node": "one rank does extra compute every step from the onset (a slow GPU or node)",
    "data": "one rank's data loader stalls every batch from the onset",
    "checkpoint": "rank 0's checkpoint saves stall (slow storage) from the onset",
    "kernel": "one operator (diagfault::scale_input) runs slower on one rank from the onset",
    "link": "the network link of one of two nodes is rate-limited (tc tbf; root only)",
    "structural": "an imbalance that follows the parallel layout (needs a pipeline job)",
    "clean": "no fault: warm-up, eval passes and checkpoints only; must give no warning",
}


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="faults_action", metavar="ACTION", required=True)
    sub.add_parser("list", help="the injectable causes")
    run = sub.add_parser("run", help="run one fault case and judge diag's diagnosis")
    run.add_argument("cause", choices=sorted(_DESCRIPTIONS))
    run.add_argument("--mechanism", default="", help="how to inject it (see diag faults list)")
    run.add_argument(
        "--severity", type=float, default=0.2, metavar="X", help="share of the step lost (0.2)"
    )
    run.add_argument(
        "--rank", type=int, default=1, metavar="RANK", help="the culprit rank (default 1)"
    )
    run.add_argument(
        "--onset", type=int, default=30, metavar="STEP", help="the step the fault starts at (30)"
    )
    run.add_argument("--steps", type=int, default=80, metavar="N", help="steps (default 80)")
    run.add_argument("--nproc", type=int, default=4, metavar="N", help="ranks (default 4)")
    run.add_argument("--seed", type=int, default=0, metavar="N", help="seed (default 0)")
    run.add_argument(
        "--out", type=Path, metavar="RUN_DIR", help="keep the run here (default: a temporary dir)"
    )
    run.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.faults_action == "list":
        from diag.selftest.mechanisms import DEFAULT_MECHANISM, MECHANISMS

        for cause, text in _DESCRIPTIONS.items():
            print(f"{cause:<11} {text}")
            for name, m in MECHANISMS.items():
                if m.cause == cause:
                    default = " (default)" if DEFAULT_MECHANISM.get(cause) == name else ""
                    print(f"  --mechanism {name:<22} {m.split:<8} {m.nature}{default}")
        return 0
    return _run_case(args)


def _run_case(args: argparse.Namespace) -> int:
    from diag.selftest.cases import CLEAN, Case
    from diag.selftest.runner import run_case
    from diag.selftest.score import judge

    if not 2 <= args.nproc <= 64:
        raise ConfigError("--nproc must be between 2 and 64")
    if args.cause != CLEAN and not 0 < args.severity < 1:
        raise ConfigError("--severity must be in (0, 1)")
    if not 0 <= args.rank < args.nproc:
        raise ConfigError(f"--rank must be a rank of the job (0..{args.nproc - 1})")
    if args.cause not in (CLEAN, "structural") and not 10 <= args.onset < args.steps - 20:
        raise ConfigError("--onset must leave 10 steps before it and 20 after it")
    ranks: tuple[int, ...] = (args.rank,)
    if args.cause == "checkpoint":
        ranks = (0,)
    elif args.cause in ("link", CLEAN):
        ranks = ()
    case = Case(
        cause=args.cause,
        severity=0.0 if args.cause == CLEAN else args.severity,
        ranks=ranks,
        onset_step=None if args.cause in (CLEAN, "structural") else args.onset,
        seed=args.seed,
        world_size=args.nproc,
        steps=args.steps,
        mechanism=args.mechanism,
    )
    from diag.selftest.mechanisms import mechanism_of

    mechanism_of(case)  # an unknown mechanism, or one of another cause: one line now
    if args.out is not None:
        case, findings = run_case(case, args.out)
        where = str(args.out / "run")
    else:
        with tempfile.TemporaryDirectory(prefix="diag-faults-") as tmp:
            case, findings = run_case(case, Path(tmp))
        where = ""
    outcome = judge(case, findings)
    if args.json:
        out = {
            "case": case.name,
            "ok": outcome.ok,
            "culprit_ok": outcome.culprit_ok,
            "cause_ok": outcome.cause_ok,
            "latency_steps": outcome.latency,
            "run_dir": where or None,
            "findings": [f.to_json() for f in findings],
        }
        json.dump(out, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0 if outcome.ok else 1
    from diag.cli.render import tables
    from diag.cli.render.console import stdout_console

    console = stdout_console()
    console.print(f"injected: {case.name} — {_DESCRIPTIONS[case.cause]}")
    if findings:
        console.print(tables.findings_table(findings, title="diag triage"))
    verdict = "named" if outcome.ok else "NOT named"
    extra = f", detected {outcome.latency} steps after onset" if outcome.latency is not None else ""
    console.print(f"{verdict}: top finding {outcome.top}{extra}")
    if where:
        console.print(f"run directory: {where}")
    return 0 if outcome.ok else 1
