"""Installs the diag hook in torchrun workers; ``diag run`` puts this directory on ``PYTHONPATH``.

Acts only when ``DIAG_HOOK=1`` and the process is a torchrun worker (``LOCAL_RANK`` and
``TORCHELASTIC_RUN_ID`` set), never in the launcher. A failure to install is one line on stderr:
the job runs anyway. Then runs the next ``sitecustomize.py`` on ``sys.path``, if any, since this
module shadows it.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _install() -> None:
    env = os.environ
    if env.get("DIAG_HOOK") != "1" or "LOCAL_RANK" not in env or "TORCHELASTIC_RUN_ID" not in env:
        return
    try:
        from diag.hook.core import install_from_env

        install_from_env()
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        sys.stderr.write(f"diag: hook not installed ({type(exc).__name__}: {first})\n")


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    entries = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    start = entries.index(here) + 1 if here in entries else 0
    for entry in entries[start:]:
        candidate = os.path.join(entry, "sitecustomize.py")
        if entry == here or not os.path.isfile(candidate):
            continue
        try:
            spec = importlib.util.spec_from_file_location("_diag_next_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                sys.modules["_diag_next_sitecustomize"] = module
                spec.loader.exec_module(module)
        except Exception as exc:
            sys.stderr.write(f"diag: {candidate} failed ({type(exc).__name__}: {exc})\n")
        return


_install()
_chain()
