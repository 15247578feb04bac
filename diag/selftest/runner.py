"""Run a fault case as a real job: on this node (:mod:`diag.selftest.live`) or, for a link fault,
on network-namespace nodes (two by default) joined by a bridge, one node's link rate-limited
(:mod:`diag.selftest.link`)."""

from __future__ import annotations

from pathlib import Path

from diag.findings import Finding
from diag.selftest import link, live
from diag.selftest.cases import Case


def prepare(case: Case, *, link_nodes: int = 2) -> Case:
    """The case as its runner injects it (the kernel it slows down, the link's hosts);
    :class:`~diag.selftest.cases.Unsupported` where it cannot be run here."""
    return link.prepare(case, nodes=link_nodes) if case.cause == "link" else live.prepare(case)


def run_case(
    case: Case,
    workdir: Path,
    *,
    timeout_s: float = 600.0,
    auto_capture: str | None = None,
    link_nodes: int = 2,
) -> tuple[Case, list[Finding]]:
    """Run ``case`` in ``workdir`` (its run directory is ``workdir/run``); the prepared case and
    ``diag triage``'s findings, ranked. ``auto_capture`` (on, observe, off; local cases): the
    closed loop's mode, with one profiler window at step 10 and none after (as in production,
    where the next periodic one is 1,000 steps on) and the live triage every second; ``None``:
    the suite's usual window every 10 steps, loop on. A link case runs on ``link_nodes`` nodes
    (the slow one drawn from its seed), its analyzer's loop in ``auto_capture`` (default on)."""
    if case.cause == "link":
        return link.run_link_case(
            case, workdir, nodes=link_nodes, timeout_s=timeout_s, auto_capture=auto_capture
        )
    if auto_capture is None:
        return live.run_local_case(case, workdir, timeout_s=timeout_s)
    return live.run_local_case(
        case,
        workdir,
        timeout_s=timeout_s,
        profile=(live.PROFILE_EVERY, 100_000),
        diag_args=("--auto-capture", auto_capture, "--triage-interval", "1"),
    )
