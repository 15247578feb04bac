"""The node daemon process: one per node, between the ranks' hooks and the analyzer.

:mod:`~diag.daemon.daemon` is the composition root: the Unix-socket
:mod:`~diag.daemon.listener` the local hooks write framed event batches to, the
:mod:`~diag.daemon.collectors` (GPU through :mod:`diag.gpu`, host and per-process ``/proc``,
the rank watch with py-spy stacks on a hang), the on-disk :mod:`~diag.daemon.spool` that keeps
batches while the analyzer is away, the :mod:`~diag.daemon.shipper` that sends them over gRPC, and
the :mod:`~diag.daemon.probe_runner` that runs probes the analyzer asks for.

May import: the contracts, :mod:`diag.transport`, :mod:`diag.proto`, :mod:`diag.gpu` and the
probe registry. Never the analysis side (store, diagnose, ...) nor the hook.
"""
