"""``diag attach``'s injector for this interpreter: chosen for its version, which a new process of
the target's own executable reports."""

from __future__ import annotations

import os
import sys

import pytest

from diag.attach import inject

pytestmark = pytest.mark.integration


def test_this_python_gets_an_injector() -> None:
    ours = sys.version_info[:2]
    expected = "remote_exec" if hasattr(sys, "remote_exec") else "hypno"
    if expected == "hypno":
        pytest.importorskip("hypno")
    assert inject.choose(ours).method == expected
    assert inject.target_version(os.getpid()) == ours
