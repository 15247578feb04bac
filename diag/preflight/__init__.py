"""``diag preflight``: run the registered probes (:mod:`probes`), judge them with typed rules
against a per-host, per-device baseline, and report (:mod:`.rules`, :mod:`.baseline`,
:mod:`.runner`)."""
