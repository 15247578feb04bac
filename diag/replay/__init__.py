"""``diag replay``: turn a finding's suspects and the run's recorded shapes and sizes into probe
runs on the suspect and a healthy peer (:mod:`.plan` chooses, :mod:`.replay` runs and judges,
:mod:`.remote` has each target's own node daemon run them through the analyzer).

May import: the contracts, :mod:`diag.transport`, :mod:`diag.proto`, :mod:`diag.store`,
:mod:`diag.diagnose` and :mod:`probes`.
"""
