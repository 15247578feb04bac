"""Finding.from_json reads back what to_json wrote, for the findings every detector produces; a
malformed finding is a one-line SchemaError, a bad findings.jsonl a one-line InputError."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from diag.diagnose.triage import read_findings, write_findings
from diag.errors import InputError, SchemaError
from diag.findings import Evidence, Finding, LinkRef
from diag.selftest.cases import Case
from diag.selftest.simulate import prepare, run_simulated

FULL = Finding(
    id="link-n0-n1",
    symptom="slowdown",
    cause="link",
    severity="critical",
    ranks=(0, 1),
    hosts=("n0", "n1"),
    link=LinkRef(ranks=(0, 1), hosts=("n0", "n1"), group="0"),
    kernel=None,
    onset_step=40,
    detected_step=46,
    slowdown=0.2,
    confidence=0.9,
    summary="the link between n0 and n1 is slow",
    evidence=(Evidence(metric="wait_ms", subject="r1", value=3.5, reference=1.0, unit="ms"),),
)


def test_round_trip_of_a_full_finding() -> None:
    assert Finding.from_json(json.loads(json.dumps(FULL.to_json()))) == FULL


@pytest.mark.parametrize("cause", ["node", "data", "checkpoint", "kernel", "link", "structural"])
def test_every_detectors_findings_round_trip(tmp_path: Path, cause: str) -> None:
    case = prepare(Case(cause=cause, severity=0.2, ranks=(1,), onset_step=40, seed=1))
    findings = run_simulated(case, tmp_path / "run")
    assert findings
    for f in findings:
        again = Finding.from_json(json.loads(json.dumps(f.to_json(), allow_nan=False)))
        assert again.to_json() == f.to_json()


def test_non_finite_numbers_come_back_as_nan_or_none() -> None:
    f = Finding(
        id="x", symptom="slowdown", cause="node", severity="info", confidence=0.5, summary="s",
        slowdown=math.inf, evidence=(Evidence(metric="m", subject="s", value=math.nan),),
    )  # fmt: skip
    again = Finding.from_json(f.to_json())
    assert again.slowdown is None and math.isnan(again.evidence[0].value)


def test_unknown_keys_are_ignored() -> None:
    data = FULL.to_json() | {"added_in_a_later_version": 1}
    assert Finding.from_json(data) == FULL


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"symptom": None}, "symptom is not a string"),
        ({"cause": "gremlins"}, "unknown cause 'gremlins'"),
        ({"confidence": 1.5}, "confidence 1.5 is not in [0, 1]"),
        ({"ranks": [1, "2"]}, "ranks is not a list of integers"),
        ({"onset_step": 4.5}, "onset_step is not an integer"),
        ({"link": {"ranks": [0], "hosts": "n0"}}, "hosts is not a list of strings"),
        ({"evidence": [{"metric": "m"}]}, "evidence: missing 'subject'"),
        ({"evidence": {}}, "evidence is not a list"),
    ],
)
def test_malformed_findings_are_one_line_schema_errors(change: dict, words: str) -> None:
    with pytest.raises(SchemaError) as err:
        Finding.from_json(FULL.to_json() | change)
    assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SchemaError, match="missing 'summary'"):
        Finding.from_json({k: v for k, v in FULL.to_json().items() if k != "summary"})
    with pytest.raises(SchemaError, match="not a JSON object"):
        Finding.from_json([FULL.to_json()])


def test_findings_file_round_trip_and_errors(tmp_path: Path) -> None:
    assert read_findings(tmp_path) is None  # no file: nothing triaged yet
    write_findings(tmp_path, (FULL,))
    assert read_findings(tmp_path) == (FULL,)
    path = tmp_path / "findings.jsonl"
    path.write_text(json.dumps(FULL.to_json()) + "\n" + '{"id": "half"')
    with pytest.raises(InputError) as err:
        read_findings(tmp_path)
    assert f"{path}:2: not a finding" in str(err.value) and "\n" not in str(err.value)


def test_one_vocabulary_for_a_slowdown() -> None:
    """The job's cost is said as its step factor and the share of each step lost, never a
    "% slower" that is neither (steps 4.5 -> 42.8 ms were once "46% slower")."""
    from diag.findings import factor_text, job_cost_text

    share = (42.8 - 4.5) / 42.8
    assert job_cost_text(share) == "job steps 9.51x as long (89% of each step lost)"
    assert job_cost_text(0.0) == "job steps 1.00x as long (0% of each step lost)"
    assert job_cost_text(1.0).startswith("job steps inf x as long (100%")
    assert [factor_text(x) for x in (1.456, 12.34, 150.2)] == ["1.46x", "12.3x", "150x"]
