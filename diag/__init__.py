"""diag: diagnostics and fail-slow detection for distributed PyTorch training.

One data flow, one folder per process or stage (``docs/DESIGN.md`` walks it):

- contracts, imported by everything, importing no diag package: :mod:`diag.schema` (the events),
  :mod:`diag.findings`, :mod:`diag.config`, :mod:`diag.errors`, :mod:`diag.fsutil`,
  :mod:`diag.flight_recorder`, :mod:`diag.kernel_category`; wire formats in :mod:`diag.proto`
  and :mod:`diag.transport`;
- processes: :mod:`diag.hook` (inside each training rank), :mod:`diag.daemon` (one per node,
  with the :mod:`diag.gpu` seam), :mod:`diag.analyzer` (the gRPC service);
- stages: :mod:`diag.store` -> :mod:`diag.diagnose` (with :mod:`diag.postmortem` and
  :mod:`diag.traces`) -> findings; :mod:`diag.compare`, :mod:`diag.preflight`,
  :mod:`diag.replay`, :mod:`diag.attach`, :mod:`diag.selftest`;
- :mod:`diag.cli` on top; nothing imports it.

``make lint`` checks these arrows (import-linter contracts in ``pyproject.toml``).
"""

#: the Python API (:mod:`diag.api`), loaded on first use: the training job imports the hook
#: from this package and must not pay for pandas or Arrow.
_API = ("open", "triage", "Run")


def __getattr__(name: str) -> object:
    if name in _API:
        # by name: the package root is imported by every layer (the hook, the daemon), and the
        # import-linter contracts would read a plain import here as each of them importing the
        # analysis side; it happens only when someone asks for diag.open / diag.triage / diag.Run
        import importlib

        return getattr(importlib.import_module("diag.api"), name)
    raise AttributeError(f"module 'diag' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
