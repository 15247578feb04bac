"""Probe requests that arrive as data: only registered names with exactly their typed parameters."""

from __future__ import annotations

import json

import pytest

from probes.gemm import GemmParams
from probes.numerics import NumericsParams
from probes.validate import MAX_PARAMS_CHARS, RequestRejected, validate


def test_a_valid_request_gives_the_typed_params() -> None:
    assert validate("numerics", '{"size": 8, "depth": 2}') == NumericsParams(size=8, depth=2)
    params = validate("gemm", json.dumps({"shapes": [[8, 8, 8]], "dtypes": ["float32"]}))
    assert params == GemmParams(shapes=((8, 8, 8),), dtypes=("float32",))
    assert validate("numerics", "") == NumericsParams()


@pytest.mark.parametrize(
    ("name", "params", "why"),
    [
        ("os.system", "{}", "unknown probe"),
        ("__import__('os')", "{}", "unknown probe"),
        ("numerics", "not json", "not JSON"),
        ("numerics", "[1, 2]", "JSON object"),
        ("numerics", '{"nope": 1}', "no parameter 'nope'"),
        ("numerics", '{"size": 1e9}', "'size' is not int"),
        ("numerics", '{"size": true}', "'size' is not int"),
        ("numerics", '{"size": 100000}', "size must be in"),
        ("gemm", '{"shapes": [[8, 8]]}', "'shapes'"),
        ("gemm", '{"dtypes": ["float32; rm -rf /"]}', "is not one of"),
        ("numerics", '{"timeout_s": 100000}', "timeout_s must be in"),
        # what a request without the token once got accepted: every daemon would have run it
        ("numerics", '{"timeout_s": NaN}', "NaN"),
        ("numerics", '{"timeout_s": -1}', "timeout_s must be in"),
        ("numerics", '{"timeout_s": 1e999}', "not finite"),
        ("membw", '{"size_mib": 65536}', "size_mib must be in"),
        ("hostcopy", '{"size_mib": 65536}', "size_mib must be in"),
        ("gemm", json.dumps({"shapes": [[65536] * 3] * 40}), "list longer than|1 to 16"),
        ("gemm", json.dumps({"shapes": [[65536] * 3]}), "costs more than"),
        ("gemm", json.dumps({"shapes": [[8, 8, 8]] * 17}), "1 to 16"),
        ("gemm", '{"threads": 100000}', "threads must be in"),
        ("gemm", '{"min_run_s": 1e300}', "min_run_s"),
        ("numerics", '{"size": 8192, "depth": 1000}', "costs more than"),
        ("numerics", '{"seed": 100000000000000000000000}', "integer beyond"),
        ("collective", '{"sizes_bytes": [17179869184]}', "not in \\[4, 4 GiB\\]"),
        ("numerics", json.dumps({"size": 1, "pad": "x" * MAX_PARAMS_CHARS}), "longer than"),
    ],
)
def test_anything_else_is_rejected_with_one_line(name: str, params: str, why: str) -> None:
    with pytest.raises(RequestRejected, match=why) as info:
        validate(name, params)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "smuggled",
    [
        {"size": "__import__('os').system('touch /tmp/pwned')"},
        {"seed": {"__class__": "os.system"}},
        {"__init__": 1},
        {"depth": ["$(id)"]},
    ],
)
def test_a_payload_smuggling_code_is_rejected(smuggled: dict[str, object]) -> None:
    with pytest.raises(RequestRejected):
        validate("numerics", json.dumps(smuggled))
