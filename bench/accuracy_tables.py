"""Diagnosis accuracy on generated op tables (PP x DP x TP jobs), tuning set vs held-out set.

Each table of :func:`diag.selftest.optables.specs` (``tuning``: 64 ranks PP4 x DP16, seeds 0-4;
``held-out``: 64-1,024 ranks, other shapes, rank orders, tables without p2p spans, other
severities, seeds 100-104; the split is written down in :mod:`diag.selftest.optables`) is
generated, written as Parquet and triaged with ``diag triage``'s own path
(:func:`~diag.diagnose.triage.triage_table`), then judged (:func:`~diag.selftest.optables.judge`).

Printed per set: top-1 culprit (the top finding names only culprit ranks), cause, exact culprit
set (where the scenario has one), clean tables with a warning-or-above finding, the same per
scenario, the triage time per world size (median, max; generation and writing not counted), and
one line per failed table. Measured numbers only, no asserts. The goal on the held-out set:
top-1 culprit >= 95%, cause >= 90%, exact culprit set >= 90%, no warning on a clean table.

    .venv/bin/python bench/accuracy_tables.py [--set tuning held-out] [--max-world 1024]
        [--scenarios clean stage ...] [-v]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.diagnose.triage import triage_table
from diag.selftest.optables import SCENARIOS, Verdict, generate, judge, specs


def _pct(hits: list[bool]) -> str:
    return "    -" if not hits else f"{100 * sum(hits) / len(hits):5.1f}%"


def report(name: str, verdicts: list[Verdict], times: dict[int, list[float]]) -> str:
    lines = [f"== {name}: {len(verdicts)} tables"]
    lines.append(f"{'':<12}{'culprit':>9}{'cause':>9}{'set':>9}{'n':>5}")
    groups = [("all", verdicts)] + [
        (s, [v for v in verdicts if v.spec.scenario == s]) for s in SCENARIOS
    ]
    for label, vs in groups:
        if not vs:
            continue
        sets = [bool(v.culprit_set) for v in vs if v.culprit_set is not None]
        lines.append(
            f"{label:<12}{_pct([v.culprit for v in vs]):>9}{_pct([v.cause for v in vs]):>9}"
            f"{_pct(sets):>9}{len(vs):>5}"
        )
    cleans = [v for v in verdicts if v.spec.scenario == "clean"]
    loud = sum(1 for v in cleans if v.warnings)
    lines.append(f"clean tables with a warning-or-above finding: {loud} of {len(cleans)}")
    for world, ts in sorted(times.items()):
        lines.append(
            f"triage time, {world} ranks: median {statistics.median(ts):.2f} s, "
            f"max {max(ts):.2f} s (n={len(ts)})"
        )
    failed = [v for v in verdicts if not (v.culprit and v.cause and v.culprit_set is not False)]
    lines.append(f"failed: {len(failed)}")
    lines.extend(f"  {v.spec.name}: {v.top}" for v in failed)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--set",
        nargs="+",
        default=["tuning", "held-out"],
        dest="sets",
        choices=["tuning", "held-out"],
    )
    p.add_argument("--max-world", type=int, default=1024, help="skip larger layouts")
    p.add_argument("--worlds", type=int, nargs="+", help="only these world sizes")
    p.add_argument(
        "--seeds", type=int, nargs="+", help="these seeds instead of the set's (a fresh draw)"
    )
    p.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    p.add_argument("-v", "--verbose", action="store_true", help="one line per table on stderr")
    args = p.parse_args(argv)
    for which in args.sets:
        chosen = specs(which)
        if args.seeds:
            first = chosen[0].seed
            chosen = [
                replace(s, seed=seed) for seed in args.seeds for s in chosen if s.seed == first
            ]
        todo = [
            s
            for s in chosen
            if s.world <= args.max_world
            and s.scenario in args.scenarios
            and (not args.worlds or s.world in args.worlds)
        ]
        verdicts: list[Verdict] = []
        times: dict[int, list[float]] = defaultdict(list)
        for i, spec in enumerate(todo, 1):
            with tempfile.TemporaryDirectory(prefix="diag-optable-") as tmp:
                path = Path(tmp) / "ops.parquet"
                generate(spec).to_parquet(path, index=False)
                start = time.perf_counter()
                findings = list(triage_table(path).findings)
                times[spec.world].append(time.perf_counter() - start)
            verdict = judge(spec, findings)
            verdicts.append(verdict)
            if args.verbose:
                ok = verdict.culprit and verdict.cause and verdict.culprit_set is not False
                print(
                    f"[{i}/{len(todo)}] {'ok  ' if ok else 'FAIL'} {spec.name}: {verdict.top}",
                    file=sys.stderr,
                )
        print(report(which, verdicts, times))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
