"""The fault-injection suite: cases with an expected diagnosis, ways to run them, and scoring.

- :mod:`diag.selftest.cases` — :class:`Case` (cause, culprit, onset, severity, seed) and the suite;
- :mod:`diag.selftest.score` — how a triage result is judged against a case;
- :mod:`diag.selftest.simulate` — cases replayed as synthetic event streams into the real detectors;
- :mod:`diag.selftest.live` — cases run as real torchrun jobs under ``diag run``.
"""
