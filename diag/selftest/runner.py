"""Run a fault case as a real job: on this node (:mod:`diag.selftest.live`) or, for a link fault,
on two network-namespace nodes joined by a rate-limited link (:mod:`diag.selftest.link`)."""

from __future__ import annotations

from pathlib import Path

from diag.findings import Finding
from diag.selftest import link, live
from diag.selftest.cases import Case


def prepare(case: Case) -> Case:
    """The case as its runner injects it (the kernel it slows down, the link's hosts);
    :class:`~diag.selftest.cases.Unsupported` where it cannot be run here."""
    return link.prepare(case) if case.cause == "link" else live.prepare(case)


def run_case(case: Case, workdir: Path, *, timeout_s: float = 600.0) -> tuple[Case, list[Finding]]:
    """Run ``case`` in ``workdir`` (its run directory is ``workdir/run``); the prepared case and
    ``diag triage``'s findings, ranked."""
    if case.cause == "link":
        return link.run_link_case(case, workdir, timeout_s=timeout_s)
    return live.run_local_case(case, workdir, timeout_s=timeout_s)
