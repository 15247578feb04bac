"""Offline triage of what a failed run left behind (``diag triage PATH``).

Readers turn each kind of evidence into typed records (:mod:`diag.remains.records`), never
raising for one bad file (a one-line problem names it instead):

* :mod:`~diag.remains.fr_dumps` - Flight Recorder dumps (pickle or JSON, NCCL or gloo);
* :mod:`~diag.remains.elastic` - torchelastic error files (``TORCHELASTIC_ERROR_FILE``);
* :mod:`~diag.remains.logs` (+ :mod:`~diag.remains.torchrun`) - worker and torchrun logs;
* :mod:`~diag.remains.discover` - walks a path and sends each file to its reader by content.

The analysis (:mod:`~diag.remains.analyze`) finds the first failing ranks across all process
groups (:mod:`~diag.remains.groups`, :mod:`~diag.remains.fr_groups`,
:mod:`~diag.remains.culprits`), their cause (:mod:`~diag.remains.causes`) and what evidence was
missing; :mod:`~diag.remains.html` draws it as one self-contained page.
"""
