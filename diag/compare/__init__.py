"""``diag diff``: the parity of two runs (a resumed or changed run against a reference).

:mod:`~diag.compare.series` aligns their steps (by the checkpoint a resumed run loaded) and reads
per-step series from each store; :mod:`~diag.compare.curves` compares loss and gradient norm
within tolerances and finds the divergent step; :mod:`~diag.compare.numerics` compares parameter
checksums and first non-finite values; :mod:`~diag.compare.perf` compares step time by phase and
kernels; :mod:`~diag.compare.coverage` says whether the runs were compared whole (each run's
recorded steps against the other's and against its own job); :mod:`~diag.compare.diff` composes
the verdict (equivalent, diverged, slower, incomplete).

May import: the contracts, :mod:`diag.store` and :mod:`diag.traces`. Never a service or the hook.
"""
