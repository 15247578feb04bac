"""Explicit installation of the in-job hook, for those who prefer it to ``diag run``'s injection.

    import diag.hook
    diag.hook.install()   # before init_process_group, so the Flight Recorder is sized

The hook sends to the node daemon at ``DIAG_HOOK_DAEMON_SOCK`` (start one with ``diag daemon``).
Importing this module is as cheap as importing :mod:`diag.hook.core`.
"""

from __future__ import annotations

from diag.hook.core import install, installed, uninstall

__all__ = ["install", "installed", "uninstall"]
