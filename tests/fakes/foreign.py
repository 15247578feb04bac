"""A finding the live tests accept beside the injected fault: contention by a process outside the
job, its ranks waiting for a CPU more than their peers. True, not made up: a CPU-bound neighbour
on the test machine does contend the ranks it shares a CPU with. Not only those it was seen on:
the daemon samples a process's CPU once a second, and an unpinned rank moves (CI beside a busy
loop: rank 3 waited 15.1 ms/step for a CPU against 0.4 on its peers, the loop last seen on CPU 0,
named as its competitor but not as on its CPU)."""

from __future__ import annotations

from diag.diagnose.coverage import names_competitor
from diag.findings import Finding


def foreign_process_contention(f: Finding) -> bool:
    """Whether ``f`` is contention naming a process outside the job (diag's ``foreign_processes``
    count above 0), its ranks waiting for a CPU more than their peers."""
    waits = [e for e in f.evidence if e.metric == "cpu_wait_ms"]
    return (
        f.id.startswith("contention-")
        and names_competitor(f)
        and bool(waits)
        and all(e.value > (e.reference or 0.0) for e in waits)
    )
