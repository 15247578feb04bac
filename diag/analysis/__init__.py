"""The analyzer side: events in, a run directory out, summaries of it.

``ingest`` (the gRPC-free core: validate, dedupe by ``(source, seq)``, log to ``wal`` before the
reply) feeds ``store`` (the run directory's Parquet parts); ``frames`` is the one place events
become DataFrames; ``summary`` turns a store into per-run and per-rank numbers; ``service`` is the
thin gRPC adapter and ``serve()`` its composition.
"""
