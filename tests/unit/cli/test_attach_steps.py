"""``diag attach --steps N``: the fewest steps any attached rank has recorded decides."""

from __future__ import annotations

from diag.cli.attach_cmd import fewest_steps


def _summary(*steps: int) -> dict:
    return {"run": {}, "ranks": [{"rank": r, "steps": n} for r, n in enumerate(steps)]}


def test_the_slowest_rank_decides_and_a_silent_rank_counts_as_zero() -> None:
    assert fewest_steps(_summary(80, 75, 90, 61), 4) == 61
    assert fewest_steps(_summary(80, 75, 90), 4) == 0  # rank 3 has reported nothing yet
    assert fewest_steps(None, 2) == 0 and fewest_steps({"ranks": None}, 1) == 0
    assert fewest_steps({"ranks": [{"steps": None}, "junk"]}, 1) == 0
