"""Every reader of input diag does not control, fuzzed briefly (hypothesis: arbitrary bytes and
mutations of valid inputs): it returns or raises its documented one-line error, nothing else.
``bench/fuzz.py`` runs the same targets for longer."""

from __future__ import annotations

import contextlib
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diag.selftest.fuzz import EDGE_INPUTS, TARGETS, Target, mutate

SETTINGS = settings(
    max_examples=100,
    deadline=None,  # a busy machine must not fail a test on time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same inputs every run: a failure is reproducible
    database=None,
)


def _check(target: Target, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d, contextlib.suppress(*target.allowed):
        target.run(data, Path(d))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_arbitrary_and_mutated_input_gets_an_answer_or_a_documented_error(name: str) -> None:
    target = TARGETS[name]()
    for seed in target.seeds:  # the valid inputs themselves are read without error
        with tempfile.TemporaryDirectory() as d:
            target.run(seed, Path(d))
    for edge in EDGE_INPUTS:  # deep nesting, huge numbers, NaN, binary, a gzip bomb's start
        _check(target, edge)

    @SETTINGS
    @given(raw=st.binary(max_size=2048), seed_at=st.integers(0, 2**32 - 1), mutated=st.booleans())
    def fuzz(raw: bytes, seed_at: int, mutated: bool) -> None:
        rng = random.Random(seed_at)
        data = mutate(rng.choice(target.seeds), rng) if mutated else raw
        _check(target, data)

    fuzz()
