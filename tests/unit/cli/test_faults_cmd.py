"""``diag faults``: the causes it can inject, and one-line errors for cases it cannot run
(the runs themselves are real torchrun jobs: tests/integration/test_fault_causes.py)."""

from __future__ import annotations

import pytest

from diag.selftest.cases import CLEAN, FAULT_CAUSES
from diag.selftest.mechanisms import MECHANISMS
from tests.fakes.cli import run_cli


def test_list_names_every_cause_of_the_suite() -> None:
    res = run_cli("faults", "list")
    assert res.returncode == 0, res.stderr
    listed = {line.split()[0] for line in res.stdout.splitlines() if not line.startswith(" ")}
    assert listed == {*FAULT_CAUSES, CLEAN}
    mechanisms = [line.split()[1] for line in res.stdout.splitlines() if line.startswith(" ")]
    assert set(mechanisms) == set(MECHANISMS)
    assert "heldout" in res.stdout and "tune" in res.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("node", "--rank", "4"), "--rank must be a rank of the job (0..3)"),
        (("data", "--severity", "1.5"), "--severity must be in (0, 1)"),
        (("node", "--onset", "70", "--steps", "80"), "--onset must leave"),
        (("kernel", "--nproc", "1"), "--nproc must be between 2 and 64"),
        (("node", "--mechanism", "node.gremlins"), "unknown mechanism 'node.gremlins'"),
        (("data", "--mechanism", "node.cpu_hog"), "injects node, not data"),
    ],
)
def test_a_case_that_cannot_run_is_one_line(args: tuple[str, ...], says: str) -> None:
    res = run_cli("faults", "run", *args)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diag faults: error:") and says in lines[0]
