"""Fixtures for the integration tests: the two-node network lives in ``netns.py``."""

from netns import two_nodes

__all__ = ["two_nodes"]
