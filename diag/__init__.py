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
