"""Kernel traces: reading Kineto/Chrome traces (:mod:`~diag.traces.kineto`, ours and other
tools'), per-kernel summaries (:mod:`~diag.traces.kineto_summary`), the kernel comparison across
ranks of a run (:mod:`~diag.traces.kernels`) and the merged Perfetto timeline of all ranks
(:mod:`~diag.traces.timeline`).

May import: the contracts and :mod:`diag.store`.
"""
