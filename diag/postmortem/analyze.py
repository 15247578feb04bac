"""Remains -> ranked findings: which rank(s) failed first, why, and what evidence was missing.

Order of reasoning:

1. **Flight Recorder culprits** (:mod:`diag.postmortem.groups`, :mod:`diag.postmortem.culprits`):
   the first failing ranks of the wait-for graph over *all* process groups, reported as ONE finding
   for the whole set (not one per group). Without dumps, the watchdog's timeout lines stand in for
   them (:mod:`diag.postmortem.log_views`).
2. **Errors on ranks** (:mod:`diag.postmortem.causes`): each rank's own failure (the first primary
   clue: torchrun's root cause first, then by time), not the echoes of a peer's. An error on a
   culprit rank gives the culprit finding its cause; errors on other ranks make a crash finding.
   A rank that logged nothing but its exit (and faulthandler's report) failed on its own when
   it aborted (SIGABRT) with no collective timed out anywhere and torchrun names it first or it
   left a fatal report (:func:`~diag.postmortem.causes.lone_abort`); a failure told without a
   stack (a heap check's message) takes the stacks of the rank's fatal report.
3. **Mismatched collectives** at one sequence number: a program finding naming the odd ranks.
4. Without any of these: ranks named by monitoredBarrier; else, among the job's ranks, the ones
   that did *not* time out while others did (they were not in the collective the others wait
   in); else, when all timed out, the ones whose timed-out call was made elsewhere in the job's
   code than a strict majority's (they were in another collective: ``program``); else a hang
   with no culprit, saying so.

A hang needs evidence that progress stopped (:mod:`diag.postmortem.progress`: the job failed,
its watchdog timed a collective out, its steps stopped, or a rank's own failure): a running
job's dumps always hold collectives in flight. Without it no hang finding is made from the dumps
(a mismatch still is: a program error whether or not it hung yet) and a missing-evidence line
says so; with it, each hang finding carries that evidence (metric ``no_progress``).

Cause of a culprit set: the first culprit's own error when it logged one; else ``program`` for a
circular wait; ``node`` when every culprit is ``stalled`` or ``not_started`` (the peers completed
or started collectives the culprit's GPU never finished: a GPU fault pattern); else ``unknown``,
with what was missing. Symptom: ``crash`` when a culprit's process died with an error, else
``hang``.

Confidence (0..1, how sure the named ranks and cause are right):

* per culprit, by its strongest flag: stalled 0.8; absent, behind, not started 0.7; no record 0.4;
  +0.05 for each further group that flags it (at most +0.1); the set takes its weakest culprit;
* a circular wait: 0.75; a set of more than half the ranks with dumps: -0.15 (not specific);
* +0.05 when a culprit's own log error agrees, and at least that error's own confidence + 0.05
  (at most 0.95);
* errors alone: 0.85 for a Python exception, CUDA/Xid error or OOM; 0.55 for an exit with no
  message; a mismatch 0.85; monitoredBarrier 0.8; silent ranks 0.6 for one, 0.5 for more; ranks
  timed out at another call site 0.5; a hang without culprit 0.3.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from diag.findings import Evidence, Finding, ranked
from diag.postmortem import messages as msg
from diag.postmortem.causes import WAITING, Verdict, classify, lone_abort
from diag.postmortem.culprits import Culprits, find_culprits
from diag.postmortem.fr_groups import mismatches, p2p_waits, stuck_entries, views_from_dumps
from diag.postmortem.groups import REASONS, GroupView, fmt_ranks
from diag.postmortem.log_views import (
    odd_call_sites,
    silent_ranks,
    timeout_sites,
    views_from_clues,
)
from diag.postmortem.progress import in_flight_line, stop_evidence
from diag.postmortem.records import Clue, Remains, StackFrame, fatal_exitcode

#: Evidence metric of each flag: what ``value`` is (``reference``: the peers' side).
_METRIC = {
    "stalled": "last_completed_seq",
    "absent": "last_issued_seq",
    "behind": "last_completed_seq",
    "not_started": "not_started_seq",
    "no_record": "no_dump_seq",
}
_BASE = {"stalled": 0.8, "absent": 0.7, "behind": 0.7, "not_started": 0.7, "no_record": 0.4}


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainsReport:
    """The findings on a run's remains, the unreadable files, the missing kinds of evidence, and
    what the HTML report draws (the remains, the group views, the culprits, the culprits' stack)."""

    run: dict[str, Any]
    findings: tuple[Finding, ...]
    problems: tuple[str, ...]
    missing: tuple[str, ...]
    remains: Remains
    views: tuple[GroupView, ...] = ()
    culprits: Culprits = field(default_factory=Culprits)
    stacks: dict[int, tuple[StackFrame, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "findings": [f.to_json() for f in self.findings],
            "problems": list(self.problems),
            "missing": list(self.missing),
        }


def first_failures(clues: tuple[Clue, ...]) -> dict[int, tuple[Clue, Verdict]]:
    """Each rank's own failure: its first primary clue (torchrun's root cause first, then by
    time, then file order); an exit code counts only on a rank that logged nothing else."""
    xid_hosts = frozenset(c.host for c in clues if c.kind == "xid" and c.host)
    per_rank: dict[int, list[tuple[Clue, Verdict]]] = {}
    for c in clues:
        v = classify(c, xid_hosts=xid_hosts)
        if c.rank is not None and v is not None:
            per_rank.setdefault(c.rank, []).append((c, v))
    waited = any(c.kind in WAITING for c in clues)
    out = {}
    for rank, judged in sorted(per_rank.items()):
        primary = [cv for cv in judged if cv[1].primary and cv[0].kind != "exit"]
        if not primary and all(c.kind in _SAID_NOTHING for c, _ in judged):
            primary = [cv for cv in judged if cv[1].primary]
            if not primary and not waited:  # an abort nothing else explains
                primary = [(c, lone_abort(c)) for c, _ in judged if _lone_abort(c)]
        if primary:
            first = min(primary, key=lambda cv: (not cv[0].root, cv[0].ts_s or 1e18))
            # the same failure may be told several times (log, error file, torchrun's summary):
            # keep the telling with the fullest stack
            same = [cv for cv in primary if cv[1].label == first[1].label]
            clue, verdict = max(same, key=lambda cv: len(cv[0].stack))
            out[rank] = (_with_fatal_stack(clue, [c for c, _ in judged]), verdict)
    return out


def _with_fatal_stack(clue: Clue, own: list[Clue]) -> Clue:
    """A failure told without a stack (a heap check's message, an exit) takes the stacks of the
    rank's fatal report: its crashing thread's, and where its other threads were."""
    if clue.stack or clue.kind == "fatal":
        return clue
    report = next((c for c in own if c.kind == "fatal" and (c.stack or c.detail)), None)
    if report is None:
        return clue
    return replace(clue, stack=report.stack, detail=(clue.detail + "\n" + report.detail).strip())


#: What a rank that logged no error of its own leaves: its exit, faulthandler's report.
_SAID_NOTHING = ("exit", "fatal")


def _lone_abort(clue: Clue) -> bool:
    """A SIGABRT that is this rank's own failure when nothing else explains it: torchrun's first
    observed failure, or a fatal report (the process itself said it aborted)."""
    if clue.kind == "fatal":
        return fatal_exitcode(clue) == -6
    return clue.kind == "exit" and clue.exitcode == -6 and clue.root


def _order(failures: dict[int, tuple[Clue, Verdict]], ranks: tuple[int, ...]) -> list[int]:
    """Ranks with a failure, the first failure first."""
    have = [r for r in ranks if r in failures]
    return sorted(have, key=lambda r: (not failures[r][0].root, failures[r][0].ts_s or 1e18, r))


def analyze(
    remains: Remains, *, expect_failure: bool = True, stopped: Sequence[Evidence] = ()
) -> RemainsReport:
    """Findings on ``remains`` (rules in the module docstring), ranked. ``expect_failure``: the
    run is known to have failed, so missing evidence is worth saying even with no finding (a
    run that exited cleanly gets missing-evidence lines only alongside a finding), and its dumps'
    collectives in flight can be a hang. ``stopped``: the caller's own evidence that progress
    stopped (:func:`~diag.postmortem.progress.steps_stopped`)."""
    failures = first_failures(remains.clues)
    stop = stop_evidence(remains, failed=expect_failure, stopped=stopped)
    halted = bool(stop or failures)
    died = {c.rank for c in remains.clues if c.kind in ("exit", "exception") and c.rank is not None}
    if remains.dumps:
        views = views_from_dumps(remains.dumps)
        culprits = find_culprits(views, p2p_waits(remains.dumps))
    else:
        views = views_from_clues(remains.clues, remains.world_size)
        culprits = find_culprits(views)
    stacks = _stacks(remains, failures)
    missing = msg.missing_lines(remains, culprits.ranks or tuple(failures), stacks)
    findings: list[Finding] = []
    covered: set[int] = set()
    if culprits.ranks:
        found = _culprit_finding(remains, culprits, failures, died, missing)
        if found.symptom != "hang" or halted:
            findings.append(found)
            covered |= set(culprits.ranks)
    rest = {r: fv for r, fv in failures.items() if r not in covered}
    for cause in sorted({v.cause for _, v in rest.values()}):
        ranks = tuple(sorted(r for r, (_, v) in rest.items() if v.cause == cause))
        order = _order(failures, ranks)
        conf = _error_confidence(failures[order[0]][0])
        findings.append(msg.crash_finding(remains, ranks, failures, order, missing, conf))
    odd_ones = mismatches(remains.dumps)
    for odd in sorted({m.odd_ranks for m in odd_ones}):
        findings.append(msg.mismatch_finding(odd, [m for m in odd_ones if m.odd_ranks == odd]))
    if not findings and halted:
        findings.extend(_log_hang(remains, culprits, missing))
    findings = [_with(f, stop) if f.symptom == "hang" else f for f in findings]
    if not findings and not expect_failure:
        missing = ()
    if not halted and (pending := _pending_ranks(remains)):
        missing = (*missing, in_flight_line(pending))
    return RemainsReport(
        run=msg.run_section(remains),
        findings=tuple(ranked(findings)),
        problems=remains.problems,
        missing=missing,
        remains=remains,
        views=tuple(views),
        culprits=culprits,
        stacks=stacks,
    )


def _with(f: Finding, stop: tuple[Evidence, ...]) -> Finding:
    """A hang finding with the evidence that progress stopped."""
    return replace(f, evidence=(*f.evidence, *stop)) if stop else f


def _pending_ranks(remains: Remains) -> tuple[int, ...]:
    """Ranks whose dumps hold collectives in flight."""
    return tuple(sorted({d.rank for d in remains.dumps if any(e.pending for e in d.entries)}))


def _error_confidence(clue: Clue) -> float:
    """An error on its own: 0.85 with a message (exception, CUDA/Xid, OOM), 0.55 for a bare exit."""
    return 0.55 if clue.kind == "exit" else 0.85


def _culprit_confidence(culprits: Culprits, num_dumps: int, corroborated: bool) -> float:
    conf = 1.0
    for r in culprits.ranks:
        groups = len({f.group for f in culprits.flags if f.rank == r})
        conf = min(conf, _BASE[culprits.strongest(r)] + min(0.1, 0.05 * (groups - 1)))
    if culprits.cycle:
        conf = 0.75
    if num_dumps and len(culprits.ranks) > max(1, num_dumps // 2):
        conf -= 0.15
    if corroborated:
        conf += 0.05
    return round(max(0.05, min(conf, 0.95)), 4)


def _culprit_finding(
    remains: Remains,
    culprits: Culprits,
    failures: dict[int, tuple[Clue, Verdict]],
    died: set[int],
    missing: tuple[str, ...],
) -> Finding:
    ranks = culprits.ranks
    own = _order(failures, ranks)
    kinds = culprits.kinds
    if own:
        cause = failures[own[0]][1].cause
    elif culprits.cycle:
        cause = "program"
    elif kinds <= {"stalled", "not_started"}:
        cause = "node"
    else:
        cause = "unknown"
    symptom = "crash" if any(r in died and r in failures for r in ranks) else "hang"
    conf = _culprit_confidence(culprits, len(remains.dumps), bool(own))
    if own:  # the culprit's own error stands on its own too (rule 2's confidence)
        conf = max(conf, min(0.95, _error_confidence(failures[own[0]][0]) + 0.05))
    evidence: list[Evidence] = []
    by_rank = {d.rank: d for d in remains.dumps}
    for r in ranks:
        # strongest facts first, and among them the widest gap to the peers
        mine = sorted(
            (f for f in culprits.flags if f.rank == r),
            key=lambda f: (REASONS.index(f.kind), -abs((f.reference or 0) - f.value), f.group),
        )
        for f in mine[:4]:
            metric = _METRIC[f.kind]
            evidence.append(
                Evidence(
                    metric=metric,
                    subject=f"rank {r}: {f.group}",
                    value=f.value,
                    reference=f.reference,
                    unit="seq",
                    note=f.note,
                )
            )
        dump = by_rank.get(r)
        if dump is not None and (stuck := stuck_entries(dump)):
            e = min(stuck.values(), key=lambda e: (e.created_ns, e.seq_id))
            evidence.append(
                Evidence(
                    metric="stuck_collective",
                    subject=f"rank {r}: {e.pg_desc} (pg {e.pg_name})",
                    value=e.seq_id,
                    unit="seq",
                    note=f"oldest unfinished: {e.op} {e.shape()} ({e.state}) [{dump.file}]",
                )
            )
        if r in failures:
            evidence.append(msg.clue_evidence(r, *failures[r]))
    if culprits.waiting:
        evidence.append(
            Evidence(
                metric="waiting_ranks",
                subject="job",
                value=len(culprits.waiting),
                note=f"{fmt_ranks(culprits.waiting)} wait on {'them' if len(ranks) > 1 else 'it'},"
                " directly or through peers",
            )
        )
    evidence.extend(msg.missing_evidence(missing))
    summary = msg.culprit_summary(ranks, culprits, failures, own, cause)
    return Finding(
        id=f"{symptom}-r{'-'.join(str(r) for r in ranks)}",
        symptom=symptom,
        cause=cause,
        severity="critical",
        ranks=ranks,
        hosts=tuple(sorted({remains.hosts[r] for r in ranks if r in remains.hosts})),
        confidence=conf,
        summary=summary,
        evidence=tuple(evidence),
    )


def _log_hang(remains: Remains, culprits: Culprits, missing: tuple[str, ...]) -> list[Finding]:
    """Rule 4 of the module docstring: hangs that only logs (or uniform dumps) speak of."""
    barrier = sorted({p for c in remains.clues if c.kind == "barrier" for p in c.peers})
    if barrier:
        return [msg.barrier_finding(tuple(barrier), remains, missing)]
    world = set(range(remains.world_size)) if remains.world_size else set()
    world |= set(remains.ranks_seen)
    waiting, silent = silent_ranks(remains.clues, world)
    if waiting and silent and len(silent) < len(world):
        return [msg.silent_finding(waiting, silent, remains, missing)]
    if waiting and not silent:
        sites = timeout_sites(remains.clues, waiting)
        odd = odd_call_sites(sites)
        if odd is not None:
            return [msg.odd_site_finding(*odd, sites, remains, missing)]
    if waiting or culprits.stuck:
        return [msg.uniform_hang_finding(waiting or culprits.stuck, bool(remains.dumps), missing)]
    return []


def _stacks(
    remains: Remains, failures: dict[int, tuple[Clue, Verdict]]
) -> dict[int, tuple[StackFrame, ...]]:
    """A stack per rank where one is known: its failure's traceback, else the frames of its
    oldest unfinished FR entry, else the stack c10d logged for its timed-out collective."""
    out: dict[int, tuple[StackFrame, ...]] = {}
    for r, (clue, _) in failures.items():
        if clue.stack:
            out[r] = clue.stack
    for d in remains.dumps:
        stuck = [e for e in stuck_entries(d).values() if e.frames]
        if d.rank not in out and stuck:
            out[d.rank] = min(stuck, key=lambda e: e.created_ns).frames
    for c in remains.clues:
        if c.rank is not None and c.rank not in out and c.stack:
            out[c.rank] = c.stack
    return out
