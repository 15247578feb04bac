"""Confirmation of a baseline failure: the better of two measurements is judged."""

from __future__ import annotations

from diag.preflight.confirm import merge_best, slow_probes
from diag.preflight.rules import judge
from probes.base import ProbeResult


def res(value: float, probe: str = "gemm", **kw: object) -> ProbeResult:
    return ProbeResult(probe=probe, device="cpu", status="ok", metric="m", value=value, **kw)  # type: ignore[arg-type]


def test_transient_slowdown_is_not_confirmed_a_lasting_one_is() -> None:
    base = {"h": {"cpu": {"gemm/m": {"value": 100.0}, "launch/m": {"value": 2.0}}}}
    first = [("h", res(50.0)), ("h", res(2.0, probe="launch", lower_is_better=True))]
    judged = judge(first, base)
    assert slow_probes(judged) == ["gemm"]
    recovered = merge_best(first, [("h", res(99.0))])
    assert [j.verdict for j in judge(recovered, base)] == ["pass", "pass"]
    lasting = merge_best(first, [("h", res(55.0))])
    assert judge(lasting, base)[0].verdict == "fail" and lasting[0][1].value == 55.0


def test_lower_is_better_keeps_the_lower() -> None:
    a = [("h", res(3.0, probe="launch", lower_is_better=True))]
    b = [("h", res(2.5, probe="launch", lower_is_better=True))]
    assert merge_best(a, b)[0][1].value == 2.5
