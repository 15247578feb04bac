"""deploy/'s shell script parses as bash (``bash -n``; a process, hence an integration test)."""

from __future__ import annotations

import subprocess

import pytest

from tests.fakes.paths import REPO

pytestmark = pytest.mark.integration


def test_the_slurm_script_is_valid_bash() -> None:
    script = REPO / "deploy" / "slurm" / "diag-train.sbatch"
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
