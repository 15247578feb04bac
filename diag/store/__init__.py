"""A run's store: the events of a run as Parquet parts, one folder per event kind.

:mod:`~diag.store.run_store` appends and reads (:class:`~diag.store.run_store.RunStore`, parts
written whole through :mod:`diag.fsutil`, corrupt ones quarantined), :mod:`~diag.store.dataframes`
is the one place events become DataFrames (the schema's field names are the columns), and
:mod:`~diag.store.summary` computes the per-rank run summary ``diag report`` and the live view show.

May import: the contracts only (plus pandas and pyarrow).
"""
