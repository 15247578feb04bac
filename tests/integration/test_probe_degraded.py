"""A degraded device is flagged: the GEMM probe in a child process confined by a cgroup CPU quota to
half a core (a GPU throttled by 50%) fails its baseline every time, with the same confirmation
``diag preflight`` applies; the baseline is the best of two healthy runs. Skipped (with the
reason) without root or a cgroup CPU controller. The false-flag rate over 20 healthy runs is
``bench/probe_stability.py``'s job (numbers in the README).
"""

from __future__ import annotations

import pytest

from diag.preflight.confirm import merge_best, slow_probes
from diag.preflight.rules import judge
from diag.selftest.cpuquota import run_probe, unavailable_reason
from probes.base import ProbeResult

pytestmark = pytest.mark.integration

PARAMS: dict[str, object] = {"dtypes": ["float32"], "shapes": [[512, 512, 512]], "repeats": 6}
FRACTION = 0.5
RUNS = 2  # each run is a child process that imports torch (~5 s here)
HEALTHY_RUNS = 2


def _rows(fraction: float | None) -> list[tuple[str, ProbeResult]]:
    keep = ("probe", "device", "status", "metric", "value", "unit", "detail", "lower_is_better")
    raw = run_probe("gemm", PARAMS, fraction)
    return [("h", ProbeResult(**{k: r[k] for k in keep})) for r in raw]  # type: ignore[arg-type]


def test_a_quota_confined_gemm_is_flagged_every_time() -> None:
    if (why := unavailable_reason()) is not None:
        pytest.skip(why)
    healthy = [_rows(None)[0][1].value or 0.0 for _ in range(HEALTHY_RUNS)]
    flagged = []
    ratios = []
    for _ in range(RUNS):
        base = {"h": {"cpu": {"gemm/float32 512x512x512": {"value": max(healthy)}}}}
        rows = _rows(FRACTION)
        judged = judge(rows, base)
        if slow_probes(judged):
            rows = merge_best(rows, _rows(FRACTION))
            judged = judge(rows, base)
        ratios.append((rows[0][1].value or 0.0) / max(healthy))
        flagged.append(judged[0].verdict == "fail")
    assert all(flagged), f"confined/healthy ratios {ratios}, healthy {healthy}"
