"""Hang and crash detector: which rank stopped the job, and why, from the evidence of the stall.

Inputs (:class:`~diag.diagnose.features.Features`): each rank's newest
:class:`~diag.schema.HangReport` that no later progress resolved (a step ending after it, or the
rank exiting cleanly: a final hook report and no exception), thread stacks, uncaught exceptions
and rank exits. Whichever came first decides the symptom: stall reports before any failure are a
**hang**; a failure first is a **crash** (the stalls and errors after it are its echo).

Hang. ``W``, the collective the others wait in, is the (group, seq) most ranks have in flight (the
lowest seq on a tie). Each rank is *in* ``W``, *behind* it (its last enqueued seq on that group is
lower: it never joined), *elsewhere* (it passed ``W``'s seq or waits on another group) or
*silent* (no report: its hook cannot run, or its process is gone). The culprits and cause:

1. ranks in ``W`` with different op or sizes: **program** (mismatched collectives). The culprits
   are the minority when a strict majority agrees, else the ranks whose collective breaks their
   own per-step pattern (:func:`~diag.diagnose.detectors.hang_evidence.breaks_pattern`: a rank
   that skipped one), else all of them;
2. ranks behind: the culprits (those with the lowest last seq); the cause is their main thread's
   stack (:func:`~diag.diagnose.detectors.hang_evidence.stack_cause`): **data**, **checkpoint**,
   **program** when in another collective, else unknown (stuck in its own code); **node** when
   its process is gone;
3. ranks elsewhere: **program** (a rank skipped ``W`` or went to another group's collective);
4. silent ranks: **node** when their process is gone, else the cause of their py-spy stack;
5. every rank in ``W`` with the same op and sizes: **link** (nobody is missing; no progress).

Without any collective in flight the culprits are the ranks with the lowest last seq, the cause
that of their stacks. Crash: the first exception that is not an echo (a peer's connection lost,
a timeout) is **program**; a rank ended by a signal its own native code raises (SIGABRT on a
failed heap check or assertion, SIGSEGV, SIGILL, SIGFPE) is **program**; else a rank killed by a
signal other than torchrun's own SIGTERM (SIGKILL: the OOM killer or the scheduler; SIGBUS), or
that vanished with no exception and no final report in a job that failed, is **node** (process
gone).

Reports arrive rank by rank (each hook's watchdog, then its daemon's shipping, a second or two
apart), so while some known rank that is still alive has not reported, and the run's newest
evidence is less than ``report_grace_s`` past the first report, the verdict waits: a rank silent
only because its report is on its way must not be named as the silent culprit (cause unknown).

``confidence``: 0.9 for a culprit named by the Flight Recorder and explained by its stack or by
its exit, 0.8 for a pattern tie-break or an unexplained stack, 0.6 for link, 0.5 when the
culprit stays ambiguous. ``slowdown`` is None (the job stopped). ``onset_step`` is the step the
culprit was in.
"""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass

import pandas as pd

from diag.diagnose.detectors.hang_evidence import (
    TEARDOWN_SIGNALS,
    RankState,
    compact,
    frames_of,
    is_echo,
    main_stack,
    rank_states,
    stack_cause,
    user_frame,
)
from diag.diagnose.detectors.hang_rules import judge
from diag.diagnose.features import Features
from diag.findings import Evidence, Finding


@dataclass(frozen=True, slots=True, kw_only=True)
class HangConfig:
    """Settings of the hang detector (see the module docstring for the rules)."""

    num_frames: int = 6  # innermost frames of a culprit's stack quoted in the evidence
    report_grace_s: float = 4.0  # how long the verdict waits for the other ranks' reports


@dataclass(frozen=True, slots=True)
class Failure:
    """A rank's own failure (not an echo): an exception, a signal, or a silent disappearance."""

    rank: int
    host: str
    ts_ns: int
    kind: str  # "exception", "signal", "vanished", "exit"
    text: str  # what to say about it
    step: int
    frames: tuple[str, ...] = ()
    signal: str = ""  # the signal's name, for kind "signal"


def detect(features: Features, cfg: HangConfig | None = None) -> list[Finding]:
    """At most one finding: the hang, or the crash that came before any stall."""
    cfg = cfg or HangConfig()
    states = {r: s for r, s in rank_states(features.hangs).items() if not _resolved(features, s)}
    failures = _failures(features)
    first_hang = min((s.ts_ns for s in states.values()), default=None)
    if first_hang is not None and (not failures or first_hang <= failures[0].ts_ns):
        if not failures and _reports_pending(features, states, first_hang, cfg):
            return []
        return [_hang(features, states, failures, cfg)]
    return [_crash(features, failures, cfg)] if failures else []


def _reports_pending(
    f: Features, states: dict[int, RankState], first_ns: int, cfg: HangConfig
) -> bool:
    """True while a known, living rank has sent no stall report and the run's newest evidence
    (any rank's or daemon's report since) is within ``report_grace_s`` of the first one."""
    known = set() if f.rank_info.empty else {int(r) for r in f.rank_info["rank"] if r >= 0}
    gone = set() if f.exits.empty else {int(r) for r in f.exits["rank"]}
    if not (known - set(states) - gone):
        return False
    newest = max(
        (int(frame["ts_ns"].max()) for frame in (f.hangs, f.stacks, f.hook_health, f.host)
         if not frame.empty and "ts_ns" in frame),
        default=first_ns,
    )  # fmt: skip
    return newest - first_ns < cfg.report_grace_s * 1e9


def _resolved(f: Features, s: RankState) -> bool:
    steps = f.step_events
    if not steps.empty and ((steps["rank"] == s.rank) & (steps["end_ns"] > s.ts_ns)).any():
        return True
    health, exc = f.hook_health, f.exceptions
    clean = (
        not health.empty
        and ((health["rank"] == s.rank) & health["final"] & (health["ts_ns"] > s.ts_ns)).any()
    )
    return bool(clean) and (exc.empty or not (exc["rank"] == s.rank).any())


def _failures(f: Features) -> list[Failure]:
    """Root failures, the most telling first: exceptions, signals, disappearances, exit codes."""
    out: list[Failure] = []
    exc, exits = f.exceptions, f.exits
    raised = set() if exc.empty else {int(r) for r in exc["rank"]}
    for row in [] if exc.empty else exc.sort_values("ts_ns").itertuples():
        if not is_echo(row.exc_type, row.message):
            frames = tuple(frames_of(row.frames))
            where = f" at {user_frame(list(frames))}" if frames else ""
            text = f"raised {row.exc_type}: {row.message.splitlines()[0][:160]}{where}"
            out.append(Failure(int(row.rank), row.host, int(row.ts_ns), "exception", text,
                               int(row.step), frames))  # fmt: skip
    if exits.empty:
        return out
    launcher = exits[exits["observer"] == "launcher"]
    teardown = {int(r.rank) for r in launcher.itertuples() if r.signal in TEARDOWN_SIGNALS}
    final = set() if f.hook_health.empty else set(f.hook_health[f.hook_health["final"]]["rank"])
    ordered = launcher.sort_values(["first_failure", "ts_ns"], ascending=[False, True])
    for row in ordered.itertuples():
        rank = int(row.rank)
        if row.signal and row.signal not in TEARDOWN_SIGNALS:
            name = _signal_name(int(row.signal))
            text = f"(pid {row.pid}) was killed by {name} without a Python exception"
            out.append(
                Failure(rank, row.host, int(row.ts_ns), "signal", text, _step(f, rank), (), name)
            )
        elif (row.exit_code or 0) > 0 and rank not in raised:
            text = f"(pid {row.pid}) exited with code {row.exit_code} without a Python exception"
            out.append(Failure(rank, row.host, int(row.ts_ns), "exit", text, _step(f, rank)))
    # A process that vanished counts only in a job that failed (an exception, a failure report):
    # a rank that ended normally but whose final report was lost must not read as a crash.
    failed = not exc.empty or not launcher.empty
    daemon = exits[exits["observer"] == "daemon"].sort_values("ts_ns")
    for row in daemon.itertuples() if failed else ():
        rank = int(row.rank)
        if rank in raised or rank in final or rank in teardown:
            continue
        text = f"(pid {row.pid}) vanished without an exception or an exit report"
        out.append(Failure(rank, row.host, int(row.ts_ns), "vanished", text, _step(f, rank)))
    return out


#: Signals a process sends itself when its own native code fails (abort() on a failed heap
#: check or assertion, a segmentation fault, an illegal instruction, a division by zero).
NATIVE_SIGNALS = ("SIGABRT", "SIGSEGV", "SIGILL", "SIGFPE")


def _native(failure: Failure) -> bool:
    return failure.kind == "signal" and failure.signal in NATIVE_SIGNALS


def _signal_name(num: int) -> str:
    try:
        return signals.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _step(f: Features, rank: int) -> int:
    """The step a rank was in: one past its last finished step; without any of its steps (it
    died before its hook sent them), the job's: one past the newest step of any rank, or the
    step the other ranks' exceptions name (-1 if unknown)."""
    steps, exc = f.step_events, f.exceptions
    if not steps.empty and (steps["rank"] == rank).any():
        return int(steps[steps["rank"] == rank]["step"].max()) + 1
    known = [int(steps["step"].max()) + 1] if not steps.empty else []
    known += [int(s) for s in exc["step"]] if not exc.empty else []
    return max(known, default=-1)


def _crash(f: Features, failures: list[Failure], cfg: HangConfig) -> Finding:
    first = failures[0]
    same = [x for x in failures if x.kind == first.kind and x.text == first.text]
    culprits = sorted({x.rank for x in (same if first.kind == "exception" else [first])})
    cause = "program" if first.kind in ("exception", "exit") or _native(first) else "node"
    others = sorted(
        ({int(r) for r in f.exceptions["rank"]} if not f.exceptions.empty else set())
        | ({int(r) for r in f.exits["rank"]} if not f.exits.empty else set())
    )
    echoes = [r for r in others if r not in culprits]
    tail = f"; {len(echoes)} other rank(s) failed after it" if echoes else ""
    where = "" if first.step < 0 else f" in step {first.step}"
    evidence = [Evidence(metric=first.kind, subject=f"rank {first.rank}", value=1.0,
                         note=first.text)]  # fmt: skip
    if first.frames:
        evidence.append(_stack_evidence(first.rank, list(first.frames), "exception", cfg))
    if _native(first):
        evidence += _unsettled_windows(f.windows, first.rank)
    evidence += _exit_evidence(f, echoes)
    return Finding(
        id="crash", symptom="crash", cause=cause, severity="critical", ranks=tuple(culprits),
        hosts=(first.host,), onset_step=first.step if first.step >= 0 else None,
        detected_step=first.step if first.step >= 0 else None,
        confidence=0.9 if first.kind in ("exception", "signal") else 0.7,
        summary=f"rank {first.rank} {first.text}{where}{tail}", evidence=tuple(evidence),
    )  # fmt: skip


def _unsettled_windows(windows: pd.DataFrame, rank: int) -> list[Evidence]:
    """The rank's profiler windows that stopped while a gloo worker still held a record (schema
    1.16, :mod:`diag.hook.c10d_workers`): the late end wrote into memory the stop had freed, a
    known way to corrupt the heap, so a native crash after one says so."""
    if windows.empty or "unsettled" not in windows.columns:
        return []
    mine = windows[(windows["rank"] == rank) & (windows["unsettled"].fillna(0) > 0)]
    return [
        Evidence(metric="profile_window_unsettled", subject=f"rank {rank} window {row.window_id}",
                 value=float(row.unsettled), reference=0.0,
                 note=f"diag's profiler window {row.window_id} (step {row.step}) stopped while "
                 f"{int(row.unsettled)} gloo worker thread(s) had not ended a collective's record; "
                 "its late end wrote into freed memory (torch's profiler race), a known cause "
                 "of heap corruption")
        for row in mine.itertuples()
    ]  # fmt: skip


def _hang(
    f: Features, states: dict[int, RankState], failures: list[Failure], cfg: HangConfig
) -> Finding:
    # A process that disappeared while the stall was being reported (not at the teardown after).
    last_report = max(s.ts_ns for s in states.values())
    gone = {x.rank: x.text for x in failures if x.kind != "exception" and x.ts_ns <= last_report}
    verdict = judge(f, states, gone)
    culprits = verdict.culprits
    lead = states.get(culprits[0]) if culprits else None
    stalled = max(states.values(), key=lambda s: s.stall_ns)
    evidence = [
        Evidence(metric="stall_s", subject=f"rank {s.rank}", value=s.stall_ns / 1e9,
                 reference=s.threshold_ns / 1e9, unit="s",
                 note=f"no step or collective completed; in step {s.step}")
        for s in sorted(states.values(), key=lambda s: s.rank)
    ]  # fmt: skip
    evidence += verdict.evidence
    for rank in culprits:
        frames, origin = main_stack(f.stacks, rank)
        if frames:
            evidence.append(_stack_evidence(rank, frames, origin, cfg))
    evidence += _exit_evidence(f, sorted(states))
    step = lead.step if lead is not None else stalled.step
    hosts = sorted({states[r].host for r in culprits if r in states})
    return Finding(
        id="hang", symptom="hang", cause=verdict.cause, severity="critical",
        ranks=tuple(culprits), hosts=tuple(hosts), onset_step=step if step >= 0 else None,
        detected_step=step if step >= 0 else None, confidence=verdict.confidence,
        summary=f"hang: {verdict.summary} (no progress for {stalled.stall_ns / 1e9:.1f} s "
        "when reported)",
        evidence=tuple(evidence),
    )  # fmt: skip


def _stack_evidence(rank: int, frames: list[str], origin: str, cfg: HangConfig) -> Evidence:
    cause, _ = stack_cause(frames)
    top = " <- ".join(compact(f) for f in frames[: cfg.num_frames])
    return Evidence(metric="stack", subject=f"rank {rank} main thread ({origin})",
                    value=float(len(frames)), note=f"{cause}: {top}")  # fmt: skip


def _exit_evidence(f: Features, ranks: list[int]) -> list[Evidence]:
    """What happened to ranks after the fault: their exceptions (echoes) and exits."""
    out = []
    exc = f.exceptions
    for row in [] if exc.empty else exc[exc["rank"].isin(ranks)].itertuples():
        note = f"{row.exc_type}: {row.message.splitlines()[0][:160] if row.message else ''}"
        out.append(Evidence(metric="exception", subject=f"rank {row.rank}", value=1.0,
                            note=("echo of a peer's failure; " if is_echo(row.exc_type, row.message)
                                  else "") + note))  # fmt: skip
    exits = f.exits
    launcher = exits[exits["observer"] == "launcher"] if not exits.empty else exits
    for row in [] if launcher.empty else launcher[launcher["rank"].isin(ranks)].itertuples():
        sig = f" ({_signal_name(int(row.signal))})" if row.signal else ""
        out.append(Evidence(metric="exit_code", subject=f"rank {row.rank}",
                            value=float(row.exit_code if row.exit_code is not None else -1),
                            note=f"torchrun: exit code {row.exit_code}{sig}"))  # fmt: skip
    return out
