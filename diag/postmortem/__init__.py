"""Offline triage of what a failed run left behind (``diag triage PATH``).

Readers turn each kind of evidence into typed records (:mod:`diag.postmortem.records`), never
raising for one bad file (a one-line problem names it instead):

* :mod:`~diag.postmortem.fr_dumps` - Flight Recorder dumps (pickle or JSON, NCCL or gloo), the
  pickles read by :mod:`~diag.postmortem.fr_pickle` (plain data only, never ``pickle.load``);
* :mod:`~diag.postmortem.elastic` - torchelastic error files (``TORCHELASTIC_ERROR_FILE``);
* :mod:`~diag.postmortem.logs` (+ :mod:`~diag.postmortem.torchrun`) - worker and torchrun logs;
* :mod:`~diag.postmortem.discover` - walks a path and sends each file to its reader by content.

No file can hang, exhaust or crash the readers (:mod:`diag.untrusted`: regular files only, size,
depth and number bounds, capped inflation, printable names); a claimed world size is checked
against the ranks the files show (:data:`~diag.postmortem.records.MAX_WORLD_SIZE` at most).

The analysis (:mod:`~diag.postmortem.analyze`) finds the first failing ranks across all process
groups (:mod:`~diag.postmortem.groups`, :mod:`~diag.postmortem.fr_groups`,
:mod:`~diag.postmortem.culprits`), their cause (:mod:`~diag.postmortem.causes`) and what evidence
was missing; :mod:`~diag.cli.render.html` draws it as one self-contained page.

May import: the contracts (findings, the Flight Recorder format, :mod:`diag.untrusted`) only.
Never a service or the hook.
"""
