"""diag's own fault-injection suite (``diag faults``, ``bench/accuracy.py``, ``diag demo``).

- :mod:`~diag.selftest.cases`: :class:`~diag.selftest.cases.Case` (cause, culprit, onset,
  severity, seed) and the suite;
- :mod:`~diag.selftest.score`: how a triage's findings are judged against a case;
- :mod:`~diag.selftest.simulate`: cases replayed as synthetic event streams into the real store
  and detectors;
- :mod:`~diag.selftest.runner`: cases run as real jobs, on this node (:mod:`~.live`) or on two
  network-namespace nodes joined by a rate-limited link (:mod:`~.link`, :mod:`~.netns`);
- :mod:`~diag.selftest.workloads`: the training jobs themselves (run by path under torchrun).

May import: the contracts, :mod:`diag.store` and :mod:`diag.diagnose`; it starts ``diag run`` as a
process rather than importing the CLI.
"""
