"""Fail-slow detection accuracy: every fault cause at several severities and seeds, judged.

The suite (:func:`diag.selftest.cases.suite`) injects each cause — node, data, checkpoint, kernel,
link, structural — at each ``--severities`` value (the fraction of the job's step time the fault
costs) for each ``--seeds`` value, with the onset at step ``--onset`` of ``--steps`` on
``--world-size`` ranks (2 per host), plus clean runs (by default one per seed and severity, so
they weigh as much as one cause). Each case runs in one of two modes:

- ``simulate`` (default): :func:`diag.selftest.simulate.run_simulated` writes the case's synthetic
  event stream (a synchronous data-parallel job with realistic noise, warm-up, periodic checkpoints,
  eval steps, profiler windows and collectives: see that module) into a real run store and runs
  ``diag triage`` on it. About a second per case, no GPU.
- ``live``: :func:`diag.selftest.runner.run_case` runs a real torchrun job under ``diag run`` with
  the fault injected and returns its findings (minutes per case).

Each case is judged with :func:`diag.selftest.score.judge` against the prepared case (the runner
names the slow kernel and the slow link's hosts). Printed: the confusion matrix (injected cause
rows, the top finding's cause columns; a clean run's column is its top warning-or-above
finding's cause, else ``none``), top-1 culprit and cause accuracy (overall, per cause, per
severity), the median and p95 detection latency in steps after the onset per severity (right
diagnoses with an onset only), warning-or-above findings on clean runs, and one line per failed
case with its top finding. Each fault case's cost to the job is read back from its own step
events (:mod:`diag.selftest.realized`: mean step from the onset on against the steps before):
a fault that did not take (under a third of its share, or under 5%) is listed apart, right when
diag stayed quiet or named it, and the accuracies are printed again over the faults that took.
``--json`` prints :meth:`diag.selftest.score.Summary.to_json` instead.
Measured numbers only, no asserts. The goals: top-1 culprit >= 95%, top-1 cause >= 90%, no
warning-or-above finding on a clean run, median detection within 10 steps of the onset at
severities >= 20% and within 50 steps at 10%.

``--collectives summary`` ships each rank's collectives of steps >= 10 as a node daemon does at
fleet scale, one summary per rank, step and group (schema 1.17), to measure what the analysis
loses without the raw rows: in simulate mode by summing the simulated events, in live mode by
setting ``DIAG_DAEMON_COLLECTIVES=summary`` for the real daemons.

    .venv/bin/python bench/accuracy.py [--mode simulate|live] [--severities 0.1 0.2 0.5]
        [--seeds 0 1 2] [--causes node data ...] [--steps 80] [--collectives raw|summary] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag import schema
from diag.errors import DiagError
from diag.findings import Finding
from diag.selftest.cases import CLEAN, FAULT_CAUSES, Case, suite
from diag.selftest.realized import MIN_COST, achieved_cost
from diag.selftest.score import NONE, Outcome, Summary, judge

Runner = Callable[[Case, Path], tuple[Case, list[Finding]]]


def simulate_runner(
    case: Case, workdir: Path, collectives: str = "raw"
) -> tuple[Case, list[Finding]]:
    from diag.selftest.simulate import prepare, run_simulated

    shipped = daemon_summaries if collectives == "summary" else None
    return prepare(case), run_simulated(case, workdir / "run", shipped=shipped)


def daemon_summaries(events: list[schema.Event]) -> list[schema.Event]:
    """``events`` as node daemons ship them at fleet scale (schema 1.17): each rank's completed
    collectives of steps >= 10 replaced by one summary per (rank, step, group)."""
    from diag.daemon.collsum import as_shipped

    return as_shipped(events, raw_steps=10)


def live_runner(
    case: Case, workdir: Path, auto_capture: str | None = None, link_nodes: int = 2
) -> tuple[Case, list[Finding]]:
    from diag.selftest.runner import run_case  # lazily: it needs torch and starts real jobs

    return run_case(case, workdir, auto_capture=auto_capture, link_nodes=link_nodes)


def run_suite(
    cases: list[Case],
    runner: Runner,
    *,
    verbose: bool,
    skipped: list[str] | None = None,
    keep: Path | None = None,
    keep_all: bool = False,
) -> Summary:
    """Run and judge every case; a case the runner cannot run here (a link fault without root,
    a job that failed) is left out of the summary and listed in ``skipped`` with the reason.
    ``keep``: a wrong case's work directory (its run directory, logs) is copied under it (every
    case's with ``keep_all``: to replay the detectors on the same runs)."""
    outcomes: list[Outcome] = []
    for i, case in enumerate(cases, 1):
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="diag-accuracy-") as tmp:
            try:
                prepared, findings = runner(case, Path(tmp))
            except DiagError as exc:
                if skipped is not None:
                    skipped.append(f"{case.name}: {exc}")
                print(f"[{i}/{len(cases)}] skip {case.name}: {exc}", file=sys.stderr)
                continue
            cost = None
            if prepared.cause != CLEAN:  # what the fault cost the job, from its own steps
                cost = achieved_cost(Path(tmp) / "run", prepared.onset_step)
            outcome = judge(prepared, findings, cost)
            if keep is not None and (keep_all or not outcome.ok):
                shutil.copytree(tmp, keep / case.name.replace("/", "_"), dirs_exist_ok=True)
        outcomes.append(outcome)
        if verbose:
            mark = "ok  " if outcome.ok else "FAIL"
            paid = "" if outcome.cost is None else f", cost {100 * outcome.cost:.0f}%"
            print(
                f"[{i}/{len(cases)}] {mark} {case.name} ({time.perf_counter() - start:.1f} s"
                f"{paid}): {outcome.top}",
                file=sys.stderr,
            )
    return Summary(tuple(outcomes))


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{100 * x:5.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _acc(outcomes: list[Outcome]) -> tuple[float | None, float | None, float | None]:
    """Top-1 culprit, exact culprit set, cause."""
    if not outcomes:
        return None, None, None
    n = len(outcomes)
    return (
        sum(o.culprit_named for o in outcomes) / n,
        sum(o.culprit_ok for o in outcomes) / n,
        sum(o.cause_ok for o in outcomes) / n,
    )


def render(summary: Summary, causes: tuple[str, ...], severities: tuple[float, ...]) -> str:
    lines: list[str] = []
    confusion = summary.confusion()
    predicted = {p for row in confusion.values() for p in row}
    cols = [*causes, *sorted(predicted - {*causes, NONE}), NONE]
    width = max(10, *(len(c) + 1 for c in cols))
    lines.append("confusion (rows: injected cause; columns: the top finding's cause)")
    lines.append(" " * 12 + "".join(f"{c:>{width}}" for c in cols))
    for row in [*causes, CLEAN]:
        if row in confusion:
            counts = confusion[row]
            lines.append(f"{row:<12}" + "".join(f"{counts.get(c, 0):>{width}}" for c in cols))
    lines.append("")
    lines.append(f"{'top-1':<12}{'culprit':>9}{'exact':>9}{'cause':>9}{'n':>5}")
    faults = summary.faults
    groups: list[tuple[str, list[Outcome]]] = [("all faults", faults)]
    groups += [(c, [o for o in faults if o.case.cause == c]) for c in causes]
    groups += [
        (f"{round(s * 100)}%", [o for o in faults if o.case.severity == s]) for s in severities
    ]
    for label, group in groups:
        culprit, exact, cause = _acc(group)
        lines.append(
            f"{label:<12}{_pct(culprit):>9}{_pct(exact):>9}{_pct(cause):>9}{len(group):>5}"
        )
    lines.append("")
    lines.append("detection latency, steps after the onset (right diagnoses with an onset)")
    lat = summary.to_json()["latency_steps"]
    for s in severities:
        row = lat.get(f"{round(s * 100)}%", {"n": 0, "median": None, "p95": None})
        lines.append(
            f"  {round(s * 100):>3}%: n={row['n']:<4} median={_num(row['median'])}  "
            f"p95={_num(row['p95'])}"
        )
    extra = [o for o in faults if o.ok and o.warnings > 1]
    lines.append("")
    lines.append(
        f"right diagnoses with a second warning-or-above finding: {len(extra)} of "
        f"{sum(o.ok for o in faults)}"
    )
    cleans = summary.cleans
    loud = sum(1 for o in cleans if o.warnings)
    lines.append("")
    lines.append(
        f"clean runs: {loud} of {len(cleans)} with a warning-or-above finding "
        f"({summary.clean_warnings()} such findings in all)"
    )
    failed = [o for o in summary.outcomes if not o.ok]
    lines.append("")
    lines.append(f"failed cases: {len(failed)}")
    lines.extend(f"  {o.case.name}{_cost(o)}: {o.top}" for o in failed)
    untaken = summary.untaken()
    if untaken:
        lines.append("")
        lines.append(
            f"faults that did not take (cost the job under a third of their share, or under "
            f"{100 * MIN_COST:.0f}%): {len(untaken)}; right when diag stays quiet or names the "
            f"fault: {sum(o.quiet_or_right for o in untaken)} of {len(untaken)}"
        )
        lines.extend(
            f"  {o.case.name}{_cost(o)}: {'ok ' if o.quiet_or_right else 'WRONG '}{o.top}"
            for o in untaken
        )
        taken = summary.taken()
        culprit, exact, cause = _acc(taken.faults)
        lines.append(
            f"faults that took: {len(taken.faults)}: top-1 culprit {_pct(culprit)}, exact set "
            f"{_pct(exact)}, cause {_pct(cause)}"
        )
    return "\n".join(lines)


def _cost(o: Outcome) -> str:
    return "" if o.cost is None else f" (cost {100 * o.cost:.0f}%)"


def _mechanisms(args: argparse.Namespace) -> dict[str, str] | None:
    """mechanism -> cause for ``--mechanisms`` / ``--split`` (None: the causes' defaults)."""
    from diag.selftest.mechanisms import MECHANISMS

    if args.mechanisms:
        unknown = sorted(set(args.mechanisms) - set(MECHANISMS))
        if unknown:
            raise SystemExit(f"unknown mechanisms {unknown}; known: {', '.join(MECHANISMS)}")
        return {m: MECHANISMS[m].cause for m in args.mechanisms}
    if args.split is None:
        return None
    return {
        name: m.cause
        for name, m in MECHANISMS.items()
        if (args.split == "all" or m.split == args.split) and m.cause in args.causes
    }


def render_split(summary: Summary) -> str:
    """Top-1 culprit, exact culprit set and cause per mechanism, and the split's total."""
    rows = summary.to_json()["by_mechanism"]
    lines = [f"{'mechanism':<24}{'culprit':>9}{'exact':>9}{'cause':>9}{'n':>5}"]
    for name, acc in rows.items():
        lines.append(
            f"{name:<24}{_pct(acc['culprit']):>9}{_pct(acc['exact_set']):>9}"
            f"{_pct(acc['cause']):>9}{acc['n']:>5}"
        )
    lat = summary.latencies()
    med = statistics.median(lat) if lat else None
    lines.append(
        f"{'all':<24}{_pct(summary.culprit_accuracy()):>9}{_pct(summary.exact_set_accuracy()):>9}"
        f"{_pct(summary.cause_accuracy()):>9}{len(summary.faults):>5}   median detection "
        f"{_num(med)} steps after onset"
    )
    taken = summary.taken()
    if len(taken.faults) < len(summary.faults):
        lines.append(
            f"{'faults that took':<24}{_pct(taken.culprit_accuracy()):>9}"
            f"{_pct(taken.exact_set_accuracy()):>9}{_pct(taken.cause_accuracy()):>9}"
            f"{len(taken.faults):>5}   (the others: right when quiet or right, "
            f"{sum(o.quiet_or_right for o in summary.untaken())} of {len(summary.untaken())})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("simulate", "live"), default="simulate")
    p.add_argument("--severities", type=float, nargs="+", default=[0.1, 0.2, 0.5])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--causes", nargs="+", choices=FAULT_CAUSES, default=list(FAULT_CAUSES))
    p.add_argument(
        "--split", choices=("tune", "heldout", "all"), default=None,
        help="live mode: the injection mechanisms of this split (diag.selftest.mechanisms); "
        "default: each cause's tuning mechanism",
    )  # fmt: skip
    p.add_argument("--mechanisms", nargs="+", default=None, help="these mechanisms only")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--onset", type=int, default=30)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--clean-runs", type=int, default=None, help="default: seeds x severities")
    p.add_argument(
        "--auto-capture",
        choices=("on", "observe", "off"),
        default=None,
        help="live mode: one profiler window at step 10 and none after (as in production), the "
        "closed loop in this mode, live triage every second (default: a window every 10 steps)",
    )
    p.add_argument(
        "--link-nodes",
        type=int,
        default=2,
        help="live mode: link faults on this many emulated nodes (2-8; one rank per node when "
        "it equals --world-size; beyond two, the slow host alone must be named)",
    )
    p.add_argument(
        "--collectives",
        choices=("raw", "summary"),
        default="raw",
        help="the collectives as shipped: raw, or from step 10 on summed per rank, step and group "
        "as a node daemon does at fleet scale (schema 1.17)",
    )
    p.add_argument("--json", action="store_true", help="print Summary.to_json()")
    p.add_argument(
        "--keep-failed",
        type=Path,
        metavar="DIR",
        help="copy each wrongly diagnosed case's work directory (run directory, logs) under DIR",
    )
    p.add_argument(
        "--keep-all",
        action="store_true",
        help="with --keep-failed: keep every case's work directory, right or wrong",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="one line per case on stderr")
    args = p.parse_args(argv)
    if args.keep_all and args.keep_failed is None:
        p.error("--keep-all keeps under the --keep-failed DIR: give both")
    severities, causes = tuple(args.severities), tuple(args.causes)
    chosen = _mechanisms(args)
    if chosen is not None and args.mode != "live":
        p.error("--split and --mechanisms choose live injection mechanisms: use --mode live")
    cases = suite(
        severities,
        tuple(args.seeds),
        causes,
        world_size=args.world_size,
        steps=args.steps,
        onset_step=args.onset,
        clean_runs=args.clean_runs,
        mechanisms=chosen,
    )
    if args.auto_capture is not None and args.mode != "live":
        p.error("--auto-capture runs real jobs: use --mode live")
    if args.mode == "live" and args.collectives == "summary":
        # the real daemons of every live job: summaries whatever the job's size, from step 10
        os.environ["DIAG_DAEMON_COLLECTIVES"] = "summary"
    runner: Runner = functools.partial(simulate_runner, collectives=args.collectives)
    if args.mode == "live":
        runner = functools.partial(
            live_runner, auto_capture=args.auto_capture, link_nodes=args.link_nodes
        )
    start = time.perf_counter()
    skipped: list[str] = []
    summary = run_suite(
        cases,
        runner,
        verbose=args.verbose,
        skipped=skipped,
        keep=args.keep_failed,
        keep_all=args.keep_all,
    )
    elapsed = time.perf_counter() - start
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
        return 0
    print(
        f"{args.mode}: {len(cases)} cases ({len(summary.faults)} faults, {len(summary.cleans)} "
        f"clean), {args.world_size} ranks, {args.steps} steps, onset at step {args.onset}, "
        f"seeds {' '.join(map(str, args.seeds))}, {args.collectives} collectives; "
        f"{elapsed:.0f} s"
    )
    print()
    print(render(summary, causes, severities))
    for name in ("tune", "heldout"):
        part = summary.split(name)
        if part.faults and chosen is not None:
            print(f"\n== {name} mechanisms ==")
            print(render_split(part))
    if skipped:
        print(f"\nskipped {len(skipped)} cases:")
        for line in skipped:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
