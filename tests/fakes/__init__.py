"""Shared test doubles and builders: fake hooks and analyzers, event and scenario builders,
fake Flight Recorder dumps, and the helpers that start real diag processes for integration tests.
Test modules import from here, never from each other."""
