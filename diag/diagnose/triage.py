"""Triage a run: features -> every registered detector -> ranked findings, plus the run's facts.

The ``diag triage --json`` object is :meth:`TriageResult.to_json`: ``{"run": {...}, "findings":
[...]}`` where ``run`` is the run section of ``diag report --json`` (id, world_size, steps, hosts,
...) and ``findings`` are :meth:`Finding.to_json`, in :func:`~diag.findings.ranked` order
(severity, then share of the job lost x confidence). For a timing table
(:mod:`diag.diagnose.timing_table`) ``run`` is ``{"id": the file's stem, "source": "timing
table", "world_size": ranks, "steps": ...}``.

Remains of a failed run (:mod:`diag.postmortem`: Flight Recorder dumps, torchelastic error files,
worker logs) add two keys, ``"problems"`` (``"<file>: <why>"`` for each file that could not be
read) and ``"missing"`` (each kind of evidence that was absent and what it would have told), and
``run`` is their section (``"source": "remains"``). In a run directory the remains inside it
(``logs/job.log``, dumps) are merged in: their findings join the detectors', ranked together, and
``run["remains"]`` is their section; a run directory with no remains keeps the two-key object.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diag.diagnose.capture_evidence import annotate
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.diagnose.timing_table import features_from_table, read_timing_table, run_info
from diag.errors import InputError, SchemaError
from diag.findings import Evidence, Finding, ranked
from diag.fsutil import atomic_open
from diag.postmortem.analyze import RemainsReport, analyze
from diag.postmortem.discover import collect
from diag.postmortem.from_store import dumps_from_collectives
from diag.postmortem.messages import NO_DUMPS
from diag.postmortem.progress import steps_stopped
from diag.store import captures
from diag.store.run_store import RunStore
from diag.store.summary import summarize

log = logging.getLogger(__name__)

FINDINGS_FILE = "findings.jsonl"
_FAILED = ("hang", "crash")


@dataclass(frozen=True, slots=True)
class TriageResult:
    """The run's facts (``diag report``'s run section) and its findings, ranked; ``problems``
    and ``missing`` when remains were read (``None``: none were)."""

    run: dict[str, Any]
    findings: tuple[Finding, ...]
    problems: tuple[str, ...] | None = None
    missing: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run": self.run, "findings": [f.to_json() for f in self.findings]}
        if self.problems is not None:
            out["problems"] = list(self.problems)
            out["missing"] = list(self.missing)
        return out


def triage(store: RunStore, detectors: Mapping[str, object] | None = None) -> TriageResult:
    """Run every registered detector on ``store`` (``detectors``: name -> config, e.g. from
    :func:`~diag.diagnose.detector_config.load_detector_config`; defaults for the others);
    :class:`~diag.errors.InputError` on bad parts."""
    features = Features.from_store(store)
    run = summarize(store).to_json()["run"]
    findings = run_all(features, detectors)
    done, problems = captures.read(store.run_dir)
    for problem in problems:
        log.warning("%s", problem)
    return TriageResult(run=run, findings=tuple(annotate(findings, done)))


def triage_table(path: Path, detectors: Mapping[str, object] | None = None) -> TriageResult:
    """Run every registered detector (configs as in :func:`triage`) on a timing table (Parquet or
    CSV) at ``path``; :class:`~diag.errors.InputError` (one line naming the file) when it is not
    one."""
    table = read_timing_table(path)
    features = features_from_table(table)
    return TriageResult(run=run_info(path, table), findings=tuple(run_all(features, detectors)))


def triage_remains(path: Path) -> tuple[TriageResult, RemainsReport]:
    """Triage what a failed run left at ``path`` (a directory or one file of dumps, error files,
    logs); :class:`~diag.errors.InputError` when there is nothing to read there."""
    report = analyze(collect(path))
    result = TriageResult(
        run=report.run, findings=report.findings, problems=report.problems, missing=report.missing
    )
    return result, report


def triage_run_dir(
    run_dir: Path, detectors: Mapping[str, object] | None = None
) -> tuple[TriageResult, RemainsReport | None]:
    """:func:`triage` of a run directory plus the remains inside it, merged (see the module
    docstring). For a run that did not exit cleanly the store's own Flight Recorder entries
    stand in for dumps when the directory has none and the hang detector found nothing; a hang
    or crash finding of the detectors wins over remains findings about the same ranks. A job
    whose exit diag did not record (``diag attach``) counts as failed only when its steps
    stopped long before the recording ended (:mod:`diag.postmortem.progress`)."""
    store = RunStore.open(run_dir)
    base = triage(store, detectors)
    remains = collect(Path(run_dir))
    exit_code = base.run.get("exit_code")
    failed = exit_code is not None and exit_code != 0
    # A job whose end diag did not see (diag attach detached, the launcher was killed) failed
    # only if its steps stopped: entries in flight are what any running job shows. A run an
    # analyzer is still writing is not judged stopped from the store at all: its newest steps
    # may be on their way (a live run once read as "ranks 0, 1 wait in collectives").
    in_progress = base.run.get("in_progress", False)
    stopped = _steps_stopped(store) if exit_code is None and not in_progress else None
    live = [f for f in base.findings if f.symptom in _FAILED]
    if (failed or stopped) and not remains.dumps and not live:
        stored = dumps_from_collectives(store.frame("collective"), f"{run_dir}/store")
        if any(e.pending for d in stored for e in d.entries):
            remains = dataclasses.replace(remains, dumps=stored)
    if remains.empty:
        return base, None
    report = analyze(remains, expect_failure=failed, stopped=() if stopped is None else (stopped,))
    # The hang detector saw the stall live (stacks, exits): its answer stands; remains findings
    # about the same ranks (or naming no rank) would only repeat it.
    extra = [
        f
        for f in report.findings
        if not (
            f.symptom in _FAILED
            and live
            and (not f.ranks or any(set(f.ranks) & set(g.ranks) for g in live))
        )
    ]
    # ... but what the remains know of a live crash's rank (its abort message, the stacks of
    # its fatal report) is folded into the live finding as evidence
    base_findings = [_fold_remains(g, report.findings) for g in base.findings]
    missing = report.missing
    if live:  # the hook's hang reports carried the Flight Recorder's in-flight entries
        missing = tuple(m for m in missing if m != NO_DUMPS)
    result = TriageResult(
        run={**base.run, "remains": report.run},
        findings=tuple(ranked([*base_findings, *extra])),
        problems=report.problems,
        missing=missing,
    )
    return result, report


def _fold_remains(live: Finding, remains: Sequence[Finding]) -> Finding:
    """A live crash finding with the remains' crash finding about the same rank folded in: its
    evidence (the rank's own error, its stacks) and, where the live finding knew only that a
    signal ended the process, the remains' cause when they know one."""
    if live.symptom != "crash":
        return live
    twin = next(
        (f for f in remains if f.symptom == "crash" and set(f.ranks) & set(live.ranks)), None
    )
    if twin is None:
        return live
    evidence = [e for e in twin.evidence if e.metric != "missing_evidence"]
    bare_signal = bool(live.evidence) and live.evidence[0].metric == "signal"
    cause = twin.cause if bare_signal and twin.cause != "unknown" else live.cause
    return dataclasses.replace(
        live,
        cause=cause,
        summary=f"{live.summary}; its remains: {twin.summary}",
        evidence=(*live.evidence, *evidence),
    )


def _steps_stopped(store: RunStore) -> Evidence | None:
    """:func:`~diag.postmortem.progress.steps_stopped` of a store: the recording's end is the
    newest host sample or hook health report (the daemon and the hooks outlive a hung step)."""
    ends = [
        int(frame["ts_ns"].max())
        for frame in (store.frame("host"), store.frame("hook_health"))
        if not frame.empty and "ts_ns" in frame
    ]
    return steps_stopped(store.resident_frame("step"), max(ends) if ends else None)


def read_findings(run_dir: Path) -> tuple[Finding, ...] | None:
    """The findings of ``RUN_DIR/findings.jsonl`` (``None`` when the file is absent);
    :class:`~diag.errors.InputError` naming the file and line when it is not readable."""
    path = Path(run_dir) / FINDINGS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    out: list[Finding] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(Finding.from_json(json.loads(line)))
        except (ValueError, SchemaError, RecursionError) as exc:  # JSONDecodeError: ValueError
            if isinstance(exc, RecursionError):
                first = "nested too deeply"
            else:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"{path}:{no}: not a finding ({first})") from None
    return tuple(out)


def write_findings(run_dir: Path, findings: tuple[Finding, ...]) -> Path:
    """``RUN_DIR/findings.jsonl``, one JSON object per finding, replaced atomically."""
    path = Path(run_dir) / FINDINGS_FILE
    with atomic_open(path, "w", durable=True) as fh:
        for f in findings:
            fh.write(json.dumps(f.to_json(), allow_nan=False) + "\n")
    return path
