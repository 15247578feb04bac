"""``diag attach``: find the torchrun workers of a running job, inject the hook, detach.

:mod:`diag.attach.discover` reads ``/proc`` (the process tree under the torchrun agent and each
worker's ``RANK``/``LOCAL_RANK``/``TORCHELASTIC_RUN_ID``); :mod:`diag.attach.inject` runs a few
lines in each worker (``sys.remote_exec`` on Python >= 3.14, ``hypno`` before; never gdb) that call
:func:`diag.hook.attach.start`. Detaching is the hook's own business: it uninstalls itself when the
stop file appears, when ``diag attach`` is gone or at its deadline.

May import: the contracts only; the hook's side of an attach is :mod:`diag.hook.attach`, run in
the worker (named by string, never imported here). The CLI composes the rest (daemon, analyzer).
"""

from __future__ import annotations

from diag.errors import DiagError


class AttachError(DiagError):
    """The target cannot be attached to: not a torchrun job, gone, not ours to trace."""
