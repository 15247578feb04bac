"""Probe stability: does the baseline rule flag a degraded device every time and a healthy one
never? Prints measured numbers.

A baseline is saved from one healthy GEMM probe run (a child process, as ``diag preflight
--save-baseline`` would); then ``--healthy`` (default 20) healthy runs and ``--degraded`` (default
5) runs confined to ``--fraction`` of a core by a cgroup CPU quota (:mod:`diag.selftest.cpuquota`,
standing in for a GPU throttled by ``1 - fraction``) are judged by
:func:`diag.preflight.rules.judge`, interleaved; a run flagged is measured once more and the better
result judged, as ``diag preflight`` does (:mod:`diag.preflight.confirm`). Prints the load average
too: on a shared machine other people's load slows healthy runs exactly as a quota does. Reports
false flags (healthy runs failing) and misses (degraded runs passing).

    .venv/bin/python bench/probe_stability.py [--healthy 20] [--degraded 5] [--fraction 0.5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from diag.preflight.confirm import PAUSE_S, merge_best, slow_probes
from diag.preflight.rules import Rules, judge
from diag.selftest.cpuquota import run_probe, unavailable_reason
from probes.base import ProbeResult

HOST = "bench"
DEVICE = "cpu"


def _results(raw: list[dict[str, object]]) -> list[tuple[str, ProbeResult]]:
    keep = ("probe", "device", "status", "metric", "value", "unit", "detail", "lower_is_better")
    return [(HOST, ProbeResult(**{k: r[k] for k in keep})) for r in raw]  # type: ignore[arg-type]


def one(params: dict[str, object], fraction: float | None) -> list[tuple[str, ProbeResult]]:
    return _results(run_probe("gemm", params, fraction))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--healthy", type=int, default=20)
    parser.add_argument("--degraded", type=int, default=5)
    parser.add_argument("--fraction", type=float, default=0.5)
    args = parser.parse_args()
    if (why := unavailable_reason()) is not None:
        print(f"cannot confine a probe: {why}")
        return 1
    params: dict[str, object] = {"dtypes": ["float32", "bfloat16"]}
    rules = Rules()
    base_rows = one(params, None)
    base: dict[str, dict[str, dict[str, dict[str, object]]]] = {HOST: {}}
    for _, r in base_rows:
        base[HOST].setdefault(r.device, {})[f"{r.probe}/{r.metric}"] = {"value": r.value}
    print("baseline:", {f"{r.metric}": round(r.value or 0, 1) for _, r in base_rows})
    print(f"tolerance {rules.baseline.tolerance:.0%}, confined to {args.fraction:.0%} of a core")
    false_flags = misses = 0
    plan = ["healthy"] * args.healthy
    step = max(1, args.healthy // max(1, args.degraded))
    for k in range(args.degraded):
        plan.insert(min(len(plan), k * (step + 1) + step), "degraded")
    for i, kind in enumerate(plan):
        fraction = args.fraction if kind == "degraded" else None
        rows = one(params, fraction)
        judged = judge(rows, base, rules)
        if slow_probes(judged):  # as diag preflight does: measure again, judge the better
            time.sleep(PAUSE_S)
            rows = merge_best(rows, one(params, fraction))
            judged = judge(rows, base, rules)
        failed = any(j.verdict == "fail" for j in judged)
        ratios = ", ".join(
            f"{j.result.metric.split()[0]} {(j.result.value or 0) / (j.baseline or 1):.2f}"
            for j in judged
        )
        print(
            f"{i + 1:2d} {kind:8s} {'FLAGGED' if failed else 'pass   '} ratio to baseline: {ratios}"
            f"  (load average {os.getloadavg()[0]:.2f})"
        )
        false_flags += kind == "healthy" and failed
        misses += kind == "degraded" and not failed
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"false flags: {false_flags}/{args.healthy} healthy")
    print(f"degraded flagged: {args.degraded - misses}/{args.degraded}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
