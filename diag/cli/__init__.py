"""The command line, ``diag <command>``: :mod:`.main` is the command table, one module per
command (``*_cmd``), :mod:`.runtime` starts the embedded analyzer, daemon and job for ``diag run``
and ``diag attach``, :mod:`.render` draws what a user reads.

The composition root: may import every package; nothing imports it.
"""
