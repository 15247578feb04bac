"""How the link faults are sized: the rate limit's and the flapping link's arithmetic."""

from __future__ import annotations

import pytest

from diag.selftest.link import (
    FLAP_COST_S,
    FLAP_MIN_PERIOD_S,
    corrected_period,
    corrected_rate,
    flap_period,
    link_rate,
)


def test_the_rate_keeps_the_link_busy_the_share_of_the_step_asked() -> None:
    # 30 ms steps carrying 3 MB each, 25% asked: the link busy 10 ms more a step
    assert link_rate(0.25, 0.030, 3e6) == pytest.approx(3e6 / 0.010)
    assert corrected_rate(100.0, 0.010, 0.011) == 100.0  # inside the dead band
    assert corrected_rate(100.0, 0.010, 0.020) == pytest.approx(200.0)  # twice the cost: faster
    assert corrected_rate(100.0, 0.010, 0.0) == pytest.approx(50.0)  # no cost: at most halved


def test_flaps_are_spaced_by_their_cost_over_the_share_never_closer_than_the_floor() -> None:
    assert flap_period(0.05) == pytest.approx(FLAP_COST_S / 0.05)
    assert flap_period(0.5) == FLAP_MIN_PERIOD_S  # closer flaps would catch each other's retries
    with pytest.raises(ValueError):
        flap_period(0.0)


def test_a_flap_period_is_corrected_once_by_what_the_flaps_cost() -> None:
    p = 10.0
    assert corrected_period(p, 0.010, 0.011) == p  # inside the dead band
    assert corrected_period(p, 0.010, 0.005) == pytest.approx(5.0)  # cheaper: flap more often
    assert corrected_period(p, 0.010, 0.040) == pytest.approx(20.0)  # dearer: at most doubled
    assert corrected_period(p, 0.010, 0.0) == pytest.approx(5.0)
    assert corrected_period(FLAP_MIN_PERIOD_S, 0.010, 0.0) == FLAP_MIN_PERIOD_S
