"""The hang verdict: from the ranks' stall reports, who is behind and why (rules in
:mod:`diag.diagnose.detectors.hang`'s docstring)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from diag.diagnose.detectors.hang_evidence import (
    RankState,
    breaks_pattern,
    main_stack,
    majority,
    stack_cause,
    user_frame,
)
from diag.diagnose.features import Features
from diag.findings import Evidence

#: A stack's category -> the finding's cause ("compute": stuck in the job's own code, unknown).
STACK_CAUSES = {"data": "data", "checkpoint": "checkpoint", "collective": "program"}
_DOING = {
    "data": "stuck in data loading",
    "checkpoint": "stuck in a checkpoint save or load",
    "collective": "inside another collective",
    "compute": "stuck in its own code",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The culprits, the cause, how sure, and what to say."""

    culprits: tuple[int, ...]
    cause: str
    confidence: float
    summary: str
    evidence: tuple[Evidence, ...] = ()


def _ranks(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _verb(ranks: list[int] | dict[int, RankState], one: str, many: str) -> str:
    return one if len(ranks) == 1 else many


def _sig(op: str, sizes: str) -> str:
    return f"{op} {sizes}" if sizes and sizes != "[]" else op


def explain(f: Features, rank: int, gone: Mapping[int, str]) -> tuple[str, str, float]:
    """(cause, what the rank is doing, confidence) from its exit or its main thread's stack."""
    if rank in gone:
        return "node", f"its process is gone: {gone[rank]}", 0.9
    frames, _ = main_stack(f.stacks, rank)
    if not frames:
        return "unknown", "no stack of it arrived", 0.7
    category, _ = stack_cause(frames)
    where = user_frame(frames)
    cause = STACK_CAUSES.get(category, "unknown")
    return cause, f"{_DOING[category]} at {where}", 0.9 if cause != "unknown" else 0.8


def judge(f: Features, states: dict[int, RankState], gone: Mapping[int, str]) -> Verdict:
    """The verdict on a hang (``states``: each stalled rank's report; ``gone``: ranks whose
    process disappeared during the stall, with what was seen)."""
    known = set() if f.rank_info.empty else {int(r) for r in f.rank_info["rank"] if r >= 0}
    silent = sorted(known - set(states))
    waits = Counter((s.pg, s.seq) for s in states.values() if s.seq >= 0)
    if not waits:
        return _no_collective(f, states, gone)
    pg, seq = min(waits, key=lambda k: (-waits[k], k[1]))
    inside = {r: s for r, s in states.items() if (s.pg, s.seq) == (pg, seq)}
    behind = {r: s for r, s in states.items() if r not in inside and s.enqueued(pg) < seq}
    elsewhere = sorted(r for r in states if r not in inside and r not in behind)
    ops = Counter(s.op for s in inside.values())
    name = f"{ops.most_common(1)[0][0]} (group {pg}, seq {seq})"
    evidence = tuple(
        Evidence(
            metric="last_seq", subject=f"rank {r}", value=float(s.enqueued(pg)),
            reference=float(seq),
            note=(f"in {_sig(s.op, s.sizes)} (group {s.pg}, seq {s.seq})" if s.seq >= 0
                  else "in no collective") + f"; last step {s.last_step}",
        )
        for r, s in sorted(states.items())
    )  # fmt: skip
    sigs = {r: s.signature for r, s in inside.items()}
    if len(set(sigs.values())) > 1:
        return _mismatch(states, inside, pg, seq, evidence)
    waiting = _ranks(list(inside))
    if behind:
        low = min(s.enqueued(pg) for s in behind.values())
        culprits = sorted(r for r, s in behind.items() if s.enqueued(pg) == low)
        cause, doing, conf = explain(f, culprits[0], gone)
        summary = (
            f"{_ranks(culprits)} never joined {name} that {waiting} "
            f"{_verb(inside, 'waits', 'wait')} in (last seq there: {low}); "
            f"{_ranks(culprits[:1])} is {doing}"
        )
        return Verdict(tuple(culprits), cause, conf, summary, evidence)
    if elsewhere:
        where = "; ".join(
            f"rank {r} is in {_sig(states[r].op, states[r].sizes)} (group {states[r].pg}, "
            f"seq {states[r].seq})" if states[r].seq >= 0 else f"rank {r} is past it"
            for r in elsewhere
        )  # fmt: skip
        summary = (
            f"{waiting} {_verb(inside, 'waits', 'wait')} in {name} but {where}: "
            "a collective skipped or reordered"
        )
        return Verdict(tuple(elsewhere), "program", 0.8, summary, evidence)
    if silent:
        cause, doing, conf = explain(f, silent[0], gone)
        summary = (
            f"{_ranks(silent)} sent no stall report while {waiting} "
            f"{_verb(inside, 'waits', 'wait')} in {name}; "
        )
        summary += f"{_ranks(silent[:1])}: {doing}"
        return Verdict(tuple(silent), cause, min(conf, 0.7), summary, evidence)
    summary = (
        f"all {len(inside)} ranks are inside {name} with the same op and sizes and none "
        "completes it: the transport between them is stuck"
    )
    return Verdict(tuple(sorted(inside)), "link", 0.6, summary, evidence)


def _mismatch(
    states: dict[int, RankState],
    inside: dict[int, RankState],
    pg: str,
    seq: int,
    evidence: tuple[Evidence, ...],
) -> Verdict:
    sigs = {r: s.signature for r, s in inside.items()}
    agreed = majority(list(sigs.values()))
    if agreed is not None:
        culprits = sorted(r for r, sg in sigs.items() if sg != agreed)
        how, conf = f"the other ranks agree: {_ranks(culprits)} is out of step", 0.9
    else:
        broke = sorted(r for r in sigs if breaks_pattern(states[r]))
        if broke and len(broke) < len(sigs):
            culprits = broke
            how = f"{_ranks(culprits)} broke its own per-step pattern: it skipped a collective"
            conf = 0.8
        else:
            culprits = sorted(sigs)
            how, conf = "which rank is at fault is not clear", 0.5
    rest = sorted(r for r in sigs if r not in culprits)
    mine = _sig(*sigs[culprits[0]])
    theirs = _sig(*sigs[rest[0]]) if rest else ""
    summary = (
        f"collectives mismatched at group {pg} seq {seq}: {_ranks(culprits)} "
        f"{_verb(culprits, 'is', 'are')} in {mine}"
    )
    if rest:
        summary += f" while {_ranks(rest)} {_verb(rest, 'is', 'are')} in {theirs}"
    summary += f"; {how}"
    return Verdict(tuple(culprits), "program", conf, summary, evidence)


def _no_collective(f: Features, states: dict[int, RankState], gone: Mapping[int, str]) -> Verdict:
    """No rank is inside a collective: the ranks with the lowest last seq hold the others."""
    pgs = sorted({pg for s in states.values() for pg in s.status})
    pg = "0" if "0" in pgs else (pgs[0] if pgs else "")
    low = min(s.enqueued(pg) for s in states.values())
    culprits = sorted(r for r, s in states.items() if s.enqueued(pg) == low)
    found = [explain(f, r, gone) for r in culprits]
    cause = Counter(c for c, _, _ in found).most_common(1)[0][0]
    doing = next(d for c, d, _ in found if c == cause)
    conf = min(c for _, _, c in found) - (0.1 if len(culprits) < len(states) else 0.2)
    summary = (
        f"no rank is inside a collective; {_ranks(culprits)} (last seq {low} on group {pg}) "
        f"{'is' if len(culprits) == 1 else 'are'} {doing}"
    )
    return Verdict(tuple(culprits), cause, max(conf, 0.5), summary)
