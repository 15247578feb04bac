"""The fault-injection suite: cases with an expected diagnosis, ways to run them, and scoring.

- :mod:`diag.faults.cases` — :class:`Case` (cause, culprit, onset, severity, seed) and the suite;
- :mod:`diag.faults.score` — how a triage result is judged against a case;
- :mod:`diag.faults.simulate` — cases replayed as synthetic event streams into the real detectors;
- :mod:`diag.faults.live` — cases run as real torchrun jobs under ``diag run``.
"""
