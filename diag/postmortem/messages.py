"""The words of remains findings: summaries, evidence items, missing-evidence lines.

Kept apart from the reasoning (:mod:`diag.postmortem.analyze`) so that module reads as rules. Each
builder returns a :class:`~diag.findings.Finding` or its parts; confidences are the
ones :mod:`diag.postmortem.analyze` documents.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from diag.findings import Evidence, Finding
from diag.postmortem.causes import Verdict
from diag.postmortem.culprits import Culprits
from diag.postmortem.fr_groups import Mismatch
from diag.postmortem.groups import REASONS, fmt_ranks
from diag.postmortem.logs import NATIVE_THREAD
from diag.postmortem.records import Clue, Remains, StackFrame
from diag.untrusted import printable

NO_DUMPS = "no Flight Recorder dumps: cannot tell which collective hung or which rank stopped first"
NO_LOGS = (
    "no worker logs or torchelastic error files: nothing says what a rank's own error was "
    "(exception, CUDA or Xid error, out of memory)"
)


def run_section(remains: Remains) -> dict[str, Any]:
    """The ``run`` object of ``diag triage --json`` for remains."""
    return {
        "id": printable(remains.root.name or str(remains.root)),
        "source": "remains",
        "world_size": remains.world_size,
        "num_dumps": len(remains.dumps),
        "num_logs": remains.num_logs,
        "num_error_files": remains.num_error_files,
        "dump_ranks": [d.rank for d in remains.dumps],
    }


def missing_lines(
    remains: Remains, culprits: Sequence[int], stacks: dict[int, tuple[StackFrame, ...]]
) -> tuple[str, ...]:
    """Plain lines naming each kind of evidence that was missing and what it would have told."""
    out = []
    if not remains.dumps:
        out.append(NO_DUMPS)
    elif remains.world_size:
        absent = sorted(set(range(remains.world_size)) - {d.rank for d in remains.dumps})
        if absent:
            out.append(
                f"no Flight Recorder dump from {fmt_ranks(absent)} (of {remains.world_size}): "
                "their side of the collectives is unknown"
            )
    if not remains.num_logs and not remains.num_error_files:
        out.append(NO_LOGS)
    else:
        said = {c.rank for c in remains.clues}
        quiet = [r for r in culprits if r not in said]
        if quiet:
            out.append(
                f"no log line or error file from {fmt_ranks(quiet)}: "
                f"{'their' if len(quiet) > 1 else 'its'} own error (exception, CUDA or Xid "
                "error, out of memory) is unknown"
            )
    no_stack = [r for r in culprits if r not in stacks]
    # a rank whose error names its file and line has that much of a traceback: say so, not
    # "no log holds their traceback" beside a finding that quotes the line
    located = {
        c.rank for c in remains.clues if c.rank is not None and _LOCATION.search(c.text + c.detail)
    }
    partial = [r for r in no_stack if r in located]
    none = [r for r in no_stack if r not in located]
    if partial:
        name = "their errors name" if len(partial) > 1 else "its error names"
        out.append(
            f"no whole stack for {fmt_ranks(partial)}: {name} only the line that raised; no "
            "dump holds their frames"
        )
    if none:
        out.append(
            f"no stack for {fmt_ranks(none)}: no dump holds stack frames for them and no "
            "log holds their traceback"
        )
    return tuple(out)


#: A Python traceback's location in an error's text.
_LOCATION = re.compile(r'File "[^"]+", line \d+')


def missing_evidence(lines: Iterable[str]) -> list[Evidence]:
    return [
        Evidence(metric="missing_evidence", subject="remains", value=0.0, note=s) for s in lines
    ]


def clue_evidence(rank: int, clue: Clue, verdict: Verdict) -> Evidence:
    """A rank's own error as an evidence item: label, line, where, last frame."""
    last = f"; last frame {clue.stack[-1].text()}" if clue.stack else ""
    text = clue.text[:200]
    if not text.startswith(verdict.label) and verdict.label not in text[:80]:
        text = f"{verdict.label}: {text}"
    return Evidence(
        metric="error",
        subject=f"rank {rank}",
        value=float(clue.line_no),
        unit="line",
        note=f"{text} [{clue.where()}]{last} ({verdict.why})",
    )


def fatal_stacks_evidence(rank: int, clue: Clue) -> Evidence:
    """Where a rank's threads were when it died (faulthandler's report): the crashing thread's
    innermost frames, then each other thread's innermost frame."""
    frames = " <- ".join(f.text() for f in reversed(clue.stack[-6:])) or NATIVE_THREAD
    others = "; ".join(line for line in clue.detail.splitlines() if line.startswith("thread "))
    return Evidence(
        metric="stack",
        subject=f"rank {rank} crashing thread (faulthandler)",
        value=float(len(clue.stack)),
        note=f"{frames}" + (f"; Python threads: {others}" if others else ""),
    )


def culprit_summary(
    ranks: Sequence[int],
    culprits: Culprits,
    failures: dict[int, tuple[Clue, Verdict]],
    own: Sequence[int],
    cause: str,
) -> str:
    who = fmt_ranks(ranks)
    kinds = culprits.kinds
    groups = len({f.group for f in culprits.flags})
    plural = len(ranks) > 1
    if culprits.cycle:
        what = "wait on each other in different groups (collectives issued in different orders)"
    elif kinds <= {"stalled", "not_started"}:
        what = (
            f"stopped completing collectives {'their' if plural else 'its'} peers finished "
            f"(in {groups} group{'s' if groups > 1 else ''}"
            + ("; a GPU fault pattern)" if cause == "node" and not own else ")")
        )
    else:
        kind = min(kinds, key=REASONS.index)
        f = next(f for f in culprits.flags if culprits.strongest(f.rank) == kind)
        what = {
            "absent": f"never issued {f.op} seq {f.seq} that peers wait in ({f.group})",
            "behind": f"completed less than peers waiting in {f.op} seq {f.seq} ({f.group})",
            "no_record": f"left no dump while peers wait in {f.op} seq {f.seq} ({f.group})",
        }.get(kind, f"hold up {f.op} seq {f.seq} in {f.group}")
    if own:
        clue, verdict = failures[own[0]]
        at = f" at {clue.stack[-1].text()}" if clue.stack else ""
        on = f" on rank {own[0]}" if plural else ""
        line = f"{who} failed first: {verdict.label}{at}{on}; {'they' if plural else 'it'} {what}"
    else:
        line = f"{who} failed first: {'they' if plural else 'it'} {what}"
    if culprits.waiting:
        n = len(culprits.waiting)
        line += f"; {n} other rank{'s' if n > 1 else ''} wait on {'them' if plural else 'it'}"
    return line


def crash_finding(
    remains: Remains,
    ranks: tuple[int, ...],
    failures: dict[int, tuple[Clue, Verdict]],
    order: Sequence[int],
    missing: Sequence[str],
    confidence: float,
) -> Finding:
    """Ranks whose own error (no hang evidence against them) ended the job."""
    first = order[0]
    clue, verdict = failures[first]
    last = f" at {clue.stack[-1].text()}" if clue.stack else ""
    others = f" (also {fmt_ranks([r for r in order if r != first])})" if len(order) > 1 else ""
    summary = f"rank {first} failed first: {verdict.label}{last}{others}"
    evidence = [clue_evidence(r, *failures[r]) for r in order[:8]]
    threads = "thread " in clue.detail or NATIVE_THREAD in clue.detail
    if clue.kind in ("abort", "fatal", "exit") and (clue.stack or threads):  # a fatal report's
        evidence.append(fatal_stacks_evidence(first, clue))
    evidence.extend(missing_evidence(s for s in missing if s != NO_DUMPS or clue.kind == "exit"))
    return Finding(
        id=f"crash-r{'-'.join(str(r) for r in ranks)}",
        symptom="crash",
        cause=verdict.cause,
        severity="critical",
        ranks=ranks,
        hosts=tuple(sorted({remains.hosts[r] for r in ranks if r in remains.hosts})),
        confidence=confidence,
        summary=summary,
        evidence=tuple(evidence),
    )


def mismatch_finding(odd: tuple[int, ...], found: Sequence[Mismatch]) -> Finding:
    first = found[0]
    variants = "; ".join(f"{what} on {fmt_ranks(rs)}" for what, rs in first.variants)
    return Finding(
        id=f"mismatch-r{'-'.join(str(r) for r in odd)}",
        symptom="hang",
        cause="program",
        severity="critical",
        ranks=odd,
        confidence=0.85,
        summary=f"{fmt_ranks(odd)} issued a different collective at seq {first.seq} in "
        f"{first.group}: {variants}",
        evidence=tuple(
            Evidence(
                metric="mismatch_seq",
                subject=m.group,
                value=m.seq,
                unit="seq",
                note="; ".join(f"{what}: {fmt_ranks(rs)}" for what, rs in m.variants),
            )
            for m in found[:8]
        ),
    )


def barrier_finding(ranks: tuple[int, ...], remains: Remains, missing: Sequence[str]) -> Finding:
    clue = next(c for c in remains.clues if c.kind == "barrier")
    return Finding(
        id=f"hang-r{'-'.join(str(r) for r in ranks)}",
        symptom="hang",
        cause="unknown",
        severity="critical",
        ranks=ranks,
        confidence=0.8,
        summary=f"{fmt_ranks(ranks)} did not reach monitoredBarrier",
        evidence=(
            Evidence(
                metric="barrier",
                subject="job",
                value=len(ranks),
                note=f"{clue.text} [{clue.where()}]",
            ),
            *missing_evidence(missing),
        ),
    )


def silent_finding(
    waiting: Sequence[int], silent: Sequence[int], remains: Remains, missing: Sequence[str]
) -> Finding:
    """Ranks of the job that did not time out while the others did."""
    firsts: dict[int, Clue] = {}
    for c in remains.clues:
        if c.kind == "timeout" and c.rank is not None and c.rank in waiting:
            firsts.setdefault(c.rank, c)
    ops = sorted({c.op for c in firsts.values() if c.op})
    what = f" ({', '.join(ops)})" if ops else ""
    plural = len(silent) > 1
    summary = (
        f"{fmt_ranks(silent)} never timed out while {fmt_ranks(waiting)} timed out waiting"
        f"{what}: {'they' if plural else 'it'} never joined the collective the others wait in"
        + (" (no Flight Recorder dumps to say where)" if not remains.dumps else "")
    )
    evidence = [
        Evidence(
            metric="timed_out",
            subject=f"rank {r}",
            value=float(c.line_no),
            unit="line",
            note=f"{c.text[:200]} [{c.where()}]",
        )
        for r, c in sorted(firsts.items())
    ][:8]
    evidence.append(
        Evidence(
            metric="silent_ranks",
            subject="job",
            value=len(silent),
            note=f"{fmt_ranks(silent)} logged no timeout",
        )
    )
    evidence.extend(missing_evidence(missing))
    conf = 0.6 if len(silent) == 1 else 0.5
    return _ranks_hang(tuple(silent), "unknown", conf, summary, evidence, remains)


def odd_site_finding(
    odd: tuple[int, ...],
    site: StackFrame,
    majority: tuple[int, ...],
    sites: dict[int, StackFrame],
    remains: Remains,
    missing: Sequence[str],
) -> Finding:
    """Every rank timed out, the ``odd`` ones at another call site of the job's code than the
    ``majority``: they were waiting in another collective (one skipped or added a collective)."""
    theirs = sorted({_site(sites[r]) for r in odd})
    summary = printable(
        f"{fmt_ranks(odd)} timed out in a different call than {fmt_ranks(majority)}: at "
        f"{'; '.join(theirs)}, against {_site(site)}: the ranks were not in the same collective "
        "(one skipped or added a collective)"
        + (" (no Flight Recorder dumps to say which)" if not remains.dumps else "")
    )
    evidence = [
        Evidence(
            metric="timeout_site",
            subject=f"rank {r}",
            value=float(sites[r].line),
            unit="line",
            note=printable(f"{sites[r].text()}: {sites[r].code}"[:200]),
        )
        for r in sorted(sites)
    ][:8]
    evidence.extend(missing_evidence(missing))
    return _ranks_hang(odd, "program", 0.5, summary, evidence, remains)


def _ranks_hang(
    ranks: tuple[int, ...],
    cause: str,
    confidence: float,
    summary: str,
    evidence: Sequence[Evidence],
    remains: Remains,
) -> Finding:
    """A critical hang finding naming ``ranks`` and their hosts."""
    return Finding(
        id=f"hang-r{'-'.join(str(r) for r in ranks)}",
        symptom="hang",
        cause=cause,
        severity="critical",
        ranks=ranks,
        hosts=tuple(sorted({remains.hosts[r] for r in ranks if r in remains.hosts})),
        confidence=confidence,
        summary=summary,
        evidence=tuple(evidence),
    )


def _site(frame: StackFrame) -> str:
    """``train.py:12 in f (loss.backward())``: the file without its folder, the line's code."""
    where = frame.text().rsplit("/", 1)[-1]
    return f"{where} ({frame.code[:80]})" if frame.code else where


def uniform_hang_finding(
    waiting: Sequence[int], have_dumps: bool, missing: Sequence[str]
) -> Finding:
    """A hang in which no rank stands out: say so and what would have told."""
    why = (
        "no rank stands out in the dumps (all at the same place, or their side is missing)"
        if have_dumps
        else "nothing says which rank they waited for"
    )
    return Finding(
        id="hang-unknown",
        symptom="hang",
        cause="unknown",
        severity="critical",
        confidence=0.3,
        summary=f"{fmt_ranks(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in "
        f"collectives; no culprit: {why}",
        evidence=(
            Evidence(
                metric="waiting_ranks", subject="job", value=len(waiting), note=fmt_ranks(waiting)
            ),
            *missing_evidence(missing),
        ),
    )
