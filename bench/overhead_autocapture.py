"""What the closed loop costs the job: idle, and under a persistent fault (issue 14).

Real 4-rank CPU jobs under ``diag run`` (the fault suite's job, :mod:`diag.selftest.live`), one
profiler window at step 10 and none after (as in production), the live triage every second:

- **idle**: clean jobs, ``--auto-capture off`` and ``on`` alternated (``--reps`` pairs): the
  median step after warm-up of each, and the automatic requests the loop made (none expected:
  nothing is undecided), so the always-on cost with the loop idle is the two medians' ratio;
- **persistent fault**: one operator slowed on one rank from step 30 (the kernel fault), loop on:
  each automatic window's cost from the job's own steps, the sum over the window's step and the
  ``AFTER`` steps after it (the hook thread summarizing on the same cores) of the median step
  over ranks minus the median of the ``BEFORE`` steps before the window, and that cost amortized
  over the loop's budget of one window per ``AnalyzerConfig.auto_capture_interval_s`` (120 s).

Measured numbers only, no asserts. On a shared 2-core machine the idle medians move with
whoever else runs; read them beside the load average printed with them.

    .venv/bin/python bench/overhead_autocapture.py [--reps 1] [--steps 400]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.config import AnalyzerConfig
from diag.selftest.cases import Case
from diag.selftest.runner import run_case
from diag.store import captures
from diag.store.run_store import RunStore

BEFORE = 50  # steps before a window: its reference
AFTER = 14  # steps after a window that may pay for it (the hook thread's summary)
WARMUP = 15


def step_medians(run_dir: Path) -> dict[int, float]:
    """Step -> the median over ranks of the step's duration (ms)."""
    steps = RunStore.open(run_dir).frame("step")
    if steps.empty:
        return {}
    med = steps.groupby("step")["duration_ns"].median() / 1e6
    return {int(s): float(v) for s, v in med.items()}


def requested_steps(run_dir: Path) -> list[int]:
    records, _bad = captures.read(run_dir)
    return sorted({c.at_step for c in records if c.status == "requested" and c.at_step >= 0})


def window_cost_ms(steps: dict[int, float], at: int) -> float | None:
    """The extra time of window step ``at`` and the ``AFTER`` steps after it (ms)."""
    before = [steps[s] for s in range(at - BEFORE, at) if s in steps and s > WARMUP]
    during = [steps[s] for s in range(at, at + AFTER + 1) if s in steps]
    if len(before) < 5 or not during:
        return None
    ref = statistics.median(before)
    return sum(d - ref for d in during)


def run(case: Case, mode: str, root: Path) -> Path:
    work = root / f"{case.name}-{mode}"
    run_case(case, work, auto_capture=mode)
    return work / "run"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=1, help="idle: off/on pairs")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--keep", default="", help="keep the runs here")
    args = p.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="diag-bench-loop-"))
    interval_s = AnalyzerConfig().auto_capture_interval_s

    print(f"idle: clean jobs, {args.steps} steps, auto capture off/on alternated")
    medians: dict[str, list[float]] = {"off": [], "on": []}
    for rep in range(args.reps):
        for mode in ("off", "on"):
            case = Case(cause="clean", seed=rep, steps=args.steps)
            run_dir = run(case, mode, root / f"idle{rep}")
            steps = step_medians(run_dir)
            med = statistics.median(v for s, v in steps.items() if s > WARMUP)
            medians[mode].append(med)
            load = os.getloadavg()[0]
            print(f"  rep {rep} {mode:3s}: median step {med:6.1f} ms, automatic requests "
                  f"{len(requested_steps(run_dir))}, load average {load:.1f}")  # fmt: skip
    off, on = statistics.median(medians["off"]), statistics.median(medians["on"])
    print(f"  median of medians: off {off:.1f} ms, on {on:.1f} ms, on/off {on / off:.3f}")

    print("persistent fault: kernel (one operator slower on rank 1 from step 30), loop on")
    case = Case(cause="kernel", severity=0.3, ranks=(1,), onset_step=30, steps=args.steps)
    run_dir = run(case, "on", root / "fault")
    steps = step_medians(run_dir)
    at = requested_steps(run_dir)
    if not at:
        print("  no automatic window was requested (nothing undecided in this run)")
        return
    base = statistics.median(v for s, v in steps.items() if s > WARMUP)
    for a in at:
        cost = window_cost_ms(steps, a)
        if cost is None:
            print(f"  window at step {a}: too few steps around it to measure")
            continue
        print(f"  window at step {a}: {cost:.0f} ms extra over it and the {AFTER} steps after "
              f"(median step {base:.1f} ms); amortized over one window per {interval_s:g} s: "
              f"{100 * cost / 1000 / interval_s:.3f}% of the job's time")  # fmt: skip
    print(f"runs kept in {root}" if args.keep else "")


if __name__ == "__main__":
    main()
