"""A finding the live tests accept beside the injected fault: contention by a process outside the
job that ran on a CPU the culprit ran on. True, not made up: a CPU-bound neighbour on the test
machine does contend the ranks it shares a CPU with."""

from __future__ import annotations

from diag.findings import Finding


def foreign_process_contention(f: Finding) -> bool:
    """Whether ``f`` is contention naming a process outside the job on the culprit's CPU."""
    return f.id.startswith("contention-") and any(
        e.metric == "host_process_cpu_pct" and "a CPU the culprit ran on" in e.note
        for e in f.evidence
    )
