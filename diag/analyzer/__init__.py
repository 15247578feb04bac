"""The analyzer process: the gRPC service every node daemon ships to, and its core.

:mod:`~diag.analyzer.service` is a thin gRPC adapter over :class:`~diag.analyzer.core.AnalyzerCore`,
which owns one run directory (locked against a second analyzer): deduplicated ingest through a
write-ahead log (:mod:`~diag.analyzer.wal`) into the :mod:`diag.store`, the board of on-demand
requests the daemons poll (:mod:`~diag.analyzer.control`: profiler windows, probes) and the live
triage (:mod:`diag.diagnose`) every few seconds.

May import: the contracts, :mod:`diag.transport`, :mod:`diag.proto`, :mod:`diag.store`,
:mod:`diag.diagnose` and the probe registry's validation. Never the hook or the daemon.
"""
