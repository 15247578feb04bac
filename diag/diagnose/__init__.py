"""Diagnosis: from a run's store (or a timing table) to ranked findings.

:mod:`~diag.diagnose.features` computes the frames every detector shares (once);
:mod:`~diag.diagnose.detectors` holds the detectors (node, structural, data, checkpoint, link,
kernel, hang, drift), chosen by name in their registry with typed configs
(:mod:`~diag.diagnose.detector_config` reads them from TOML); :mod:`~diag.diagnose.reconcile`
settles overlaps between them; :mod:`~diag.diagnose.triage` runs it all, merges what a failed
run left (:mod:`diag.postmortem`) and reads and writes ``findings.jsonl``;
:mod:`~diag.diagnose.timing_table` reads other tools' op tables.

Pure analysis: may import the contracts, :mod:`diag.store`, :mod:`diag.postmortem` and
:mod:`diag.traces`. Never a service, a process or the hook.
"""
