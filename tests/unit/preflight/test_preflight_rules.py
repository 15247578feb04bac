"""Preflight rules: baseline deviation, thresholds, consistency across devices; baseline files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.errors import InputError
from diag.preflight import baseline as bl
from diag.preflight.rules import Rules, Threshold, judge
from probes.base import ProbeResult


def res(value: float, *, probe: str = "gemm", device: str = "cpu x", **kw: object) -> ProbeResult:
    kw.setdefault("metric", "float32 8x8x8")
    return ProbeResult(probe=probe, device=device, status="ok", value=value, unit="u", **kw)  # type: ignore[arg-type]


def test_baseline_deviation_beyond_the_tolerance_fails(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    bl.save(path, [("h", res(100.0))])
    base = bl.load(path)
    assert [j.verdict for j in judge([("h", res(95.0))], base)] == ["pass"]
    [j] = judge([("h", res(85.0))], base)
    assert j.verdict == "fail" and j.baseline == 100.0 and "-15.0% vs baseline" in j.reasons[0]
    # another host's baseline does not apply
    assert judge([("other", res(50.0))], base)[0].verdict == "pass"


def test_latency_fails_when_higher() -> None:
    base = {"h": {"cpu x": {"launch/op": {"value": 2.0}}}}
    lat = res(2.5, probe="launch", metric="op", lower_is_better=True)
    assert judge([("h", lat)], base)[0].verdict == "fail"


def test_numerics_digest_must_match_baseline_and_peers() -> None:
    base = {"h": {"cpu x": {"numerics/checksum": {"value": -1.0, "detail": "aaaa"}}}}
    ok = res(-1.0, probe="numerics", metric="checksum", detail="aaaa")
    bad = res(-1.0, probe="numerics", metric="checksum", detail="bbbb")
    assert judge([("h", ok)], base)[0].verdict == "pass"
    assert judge([("h", bad)], base)[0].verdict == "fail"
    rows = [("h1", ok), ("h2", ok), ("h3", bad)]
    assert [j.verdict for j in judge(rows, {})] == ["pass", "pass", "fail"]


def test_consistency_across_devices_and_thresholds() -> None:
    rows = [("h", res(v, device=f"GPU-{i}")) for i, v in enumerate([100, 101, 99, 60])]
    assert [j.verdict for j in judge(rows, {})] == ["pass", "pass", "pass", "fail"]
    nvml = res(1.0, probe="nvml", metric="problems", lower_is_better=True)
    assert judge([("h", nvml)], {})[0].verdict == "fail"
    rules = Rules(thresholds=(Threshold("gemm", ">=", 50.0),))
    assert judge([("h", res(40.0))], {}, rules)[0].verdict == "fail"
    with pytest.raises(ValueError):
        Threshold("gemm", "==", 1.0)


def test_p2p_pair_below_a_fifth_of_the_fastest_fails() -> None:
    rows = [
        ("a", res(2.0, probe="p2p", metric="pingpong 4 MiB", device="r0@a<->r1@a")),
        ("a", res(0.1, probe="p2p", metric="pingpong 4 MiB", device="r0@a<->r2@b")),
    ]
    assert [j.verdict for j in judge(rows, {})] == ["pass", "fail"]


def test_status_verdicts() -> None:
    rows = [
        ("h", ProbeResult(probe="nvml", device="d", status="unsupported")),
        ("h", ProbeResult(probe="gemm", device="d", status="timeout")),
        ("h", ProbeResult(probe="gemm", device="d", status="failed", detail="x")),
    ]
    assert [j.verdict for j in judge(rows, {})] == ["skip", "fail", "fail"]


def test_save_merges_and_bad_files_are_input_errors(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    bl.save(path, [("h", res(1.0)), ("h", ProbeResult(probe="p2p", device="d", status="timeout"))])
    bl.save(path, [("h", res(2.0, metric="bfloat16 8x8x8"))])
    assert set(bl.load(path)["h"]["cpu x"]) == {"gemm/float32 8x8x8", "gemm/bfloat16 8x8x8"}
    path.write_text(json.dumps({"version": 99, "hosts": {}}))
    with pytest.raises(InputError):
        bl.load(path)
    assert bl.load(tmp_path / "absent.json") == {}


@pytest.mark.parametrize(
    ("hosts", "words"),
    [
        ({"h": []}, "host 'h' is not a table of devices"),
        ({"h": {"cpu x": 3}}, "device 'cpu x' is not a table of metrics"),
        ({"h": {"cpu x": {"gemm/float32 8x8x8": {"value": "fast"}}}}, "has no numeric value"),
        ({"h": {"cpu x": {"gemm/float32 8x8x8": {"unit": "u"}}}}, "has no numeric value"),
        ({"h": {"cpu x": {"gemm/float32 8x8x8": 5.0}}}, "has no numeric value"),
        ({"h": {"cpu x": {"gemm/float32 8x8x8": {"value": True}}}}, "has no numeric value"),
    ],
)
def test_a_malformed_baseline_entry_is_one_line_not_a_traceback(
    tmp_path: Path, hosts: object, words: str
) -> None:
    """A hand-edited or foreign baseline whose entries are not what ``save`` writes: one line
    naming the entry at load, not a ``TypeError`` from the judge halfway through preflight."""
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"version": bl.VERSION, "hosts": hosts}))
    with pytest.raises(InputError, match=words) as err:
        judge([("h", res(1.0))], bl.load(path))
    assert "\n" not in str(err.value)
    for text in ("[1, 2]", '"hosts"', "nul"):  # not an object at all
        path.write_text(text)
        with pytest.raises(InputError, match="not a diag baseline file"):
            bl.load(path)
