"""The injected code and the injector choice, without touching another process (asking a real
interpreter its version: tests/integration/test_attach_inject.py)."""

from __future__ import annotations

import ast
import json
import os
import sys

import pytest

from diag.attach import AttachError, inject


def test_payload_is_small_valid_python_that_calls_start() -> None:
    code = inject.payload({"hook": {"job_id": "x'y\\"}, "status": "/tmp/s.json"})
    compile(code, "<injected>", "exec")
    assert "diag.hook.attach.start(" in code and len(code) < 4096
    start = code.index("start(") + len("start(")
    spec = ast.literal_eval(code[start : code.index(")\n", start)])  # the literal given to start()
    assert json.loads(spec)["hook"]["job_id"] == "x'y\\"


def test_a_version_mismatch_is_one_line() -> None:
    with pytest.raises(AttachError, match=r"the job runs Python 2\.7, diag attach runs"):
        inject.choose((2, 7))


def test_gone_and_missing_processes() -> None:
    assert not inject.gone(os.getpid())
    assert inject.gone(2**22 + 7)
    with pytest.raises(AttachError, match="vanished"):
        inject.inject(inject.Injector("hypno", sys.version_info[:2]), 2**22 + 7, "pass")
