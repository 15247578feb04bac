"""Offline triage of what a failed run left behind (``diag triage PATH``).

Readers turn each kind of evidence into typed records (:mod:`diag.postmortem.records`), never
raising for one bad file (a one-line problem names it instead):

* :mod:`~diag.postmortem.fr_dumps` - Flight Recorder dumps (pickle or JSON, NCCL or gloo);
* :mod:`~diag.postmortem.elastic` - torchelastic error files (``TORCHELASTIC_ERROR_FILE``);
* :mod:`~diag.postmortem.logs` (+ :mod:`~diag.postmortem.torchrun`) - worker and torchrun logs;
* :mod:`~diag.postmortem.discover` - walks a path and sends each file to its reader by content.

The analysis (:mod:`~diag.postmortem.analyze`) finds the first failing ranks across all process
groups (:mod:`~diag.postmortem.groups`, :mod:`~diag.postmortem.fr_groups`,
:mod:`~diag.postmortem.culprits`), their cause (:mod:`~diag.postmortem.causes`) and what evidence
was missing; :mod:`~diag.cli.render.html` draws it as one self-contained page.

May import: the contracts (findings, the Flight Recorder format) only. Never a service or the
hook.
"""
