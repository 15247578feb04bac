"""The two-node network for the integration tests: :mod:`diag.selftest.netns` as a pytest fixture.

The network itself (namespaces, bridge, veth pairs, the stale sweep) lives in the package, where
the link fault (:mod:`diag.selftest.link`) uses it too; this module re-exports what the tests use
and adds :func:`two_nodes`, which skips a test with the reason when the machine cannot host the
network (not root, no ``ip netns``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from diag.selftest.netns import (
    NetnsUnavailable,
    Node,
    TwoNodes,
    stop,
    sweep_stale,
    two_node_network,
    unavailable_reason,
)

__all__ = [
    "NetnsUnavailable",
    "Node",
    "TwoNodes",
    "stop",
    "sweep_stale",
    "two_node_network",
    "two_nodes",
    "unavailable_reason",
]


@pytest.fixture
def two_nodes() -> Iterator[TwoNodes]:
    """The two-node network for one test; skips the test when the machine cannot host it."""
    with contextlib.ExitStack() as stack:
        try:
            nodes = stack.enter_context(two_node_network())
        except NetnsUnavailable as exc:
            pytest.skip(f"two-node network unavailable: {exc}")
        yield nodes
