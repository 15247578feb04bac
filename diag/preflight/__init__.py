"""``diag preflight``: run the registered probes (:mod:`probes`), judge them with typed rules
against a per-host, per-device baseline (:mod:`.rules`, :mod:`.baseline`, :mod:`.runner`,
:mod:`.confirm`). Renders through :mod:`diag.cli.render.preflight`.

May import: the contracts and :mod:`probes`.
"""
