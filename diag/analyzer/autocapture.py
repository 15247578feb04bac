"""The closed loop: when live triage holds a slowdown whose cause depends on evidence it lacks,
the analyzer asks for that evidence itself.

A node slowdown with no kernel trace covering it (:mod:`diag.diagnose.coverage` marks it with a
``kernel_evidence`` item of value 0: undecided between ``node`` and ``kernel``) gets a profiler
window through the existing control path (:meth:`AnalyzerCore.request_profile`): on its ranks
and on up to ``max_peers`` ranks of the same work class (healthy ones first: named in no
finding), at the control board's next step (every listed rank opens it at the same
step). The next triage passes decide from it (:mod:`diag.diagnose.reconcile`: one operator that
explains the excess makes it ``kernel``, naming the operator; else it stays ``node``, now
decided); the loop records that outcome.

Budget: at most one automatic window per job every ``min_interval_s`` (120 s), ``num_steps``
(3) steps long: a window step costs about 40% more on CPU, so at 1 s steps that is 1.2 s in
120 s, 1% of the job's time, and nothing while nothing is undecided. Three steps, not one: the
window decides from a single capture, and a fault costs its time in every step while a one-off
stall (the rank preempted inside one call) does not grow with the window. In a one-step window
on a loaded host, a 31 ms preemption inside one ``aten::addcmul_`` call outweighed the injected
operator's 24 ms and named the wrong operator; over three steps the fault's excess triples.

A link finding that spans several hosts, where the ranks' own connections did not single out one
host (:mod:`diag.diagnose.detectors.link_hosts` leaves it on a pair or the whole group), gets a
point-to-point probe round through the node daemons (:mod:`diag.analyzer.linkprobe`: every
pair of up to five of the job's hosts, both ways, ``tcp_pair`` at nice 19, three timed 1 MiB
bursts each way, none started after a quarter of a second); the link detector reads its matrix
(:mod:`diag.diagnose.detectors.link_probe`). Budget: one round per finding and at most one per
job every ``probe_interval_s`` (600 s). A job on two hosts gets none: a probe between them
measures the very link the finding names.

Modes (``--auto-capture``): ``on`` requests; ``observe`` records what it would request and
requests nothing; ``off`` does neither (diag before the loop). Every request, budget deferral,
observation and outcome is one line of ``RUN_DIR/auto_capture.jsonl``
(:mod:`diag.store.captures`), and triage shows it on the finding
(:mod:`diag.diagnose.capture_evidence`). A request that fails (the analyzer shutting down) is
logged and the job goes on: the loop never signals, pauses or slows the job beyond its budget.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from diag.analyzer import linkprobe
from diag.analyzer.linkprobe import LinkProbeConfig
from diag.diagnose.coverage import KERNEL_EVIDENCE, awaits_window
from diag.diagnose.detectors.link_probe import PROBE_LOCALIZATION
from diag.errors import ConfigError, DiagError
from diag.findings import SEVERITIES, Finding
from diag.proto import diag_pb2 as pb
from diag.store import captures
from diag.store.captures import Capture

log = logging.getLogger(__name__)

MODES = ("on", "observe", "off")

#: (num_steps, ranks) -> the request as sent (its ``request_id`` and ``at_step``).
Requester = Callable[[int, Sequence[int]], pb.ProfileRequest]
#: (probe name, params_json, host) -> the probe request as sent.
ProbeRequester = Callable[[str, str, str], pb.ProbeRequest]


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoCaptureConfig:
    """How the loop acts (module docstring)."""

    mode: str = "on"
    min_interval_s: float = 120.0  # one automatic window per job at most this often
    num_steps: int = 3  # steps a window covers (one-off stalls do not grow with it; faults do)
    max_peers: int = 3  # healthy ranks of the suspects' work class profiled beside them
    min_severity: str = "info"  # findings below this are not worth a window
    outcome_timeout_s: float = 300.0  # a window not back by then is recorded as lost
    probe_interval_s: float = 600.0  # one link probe round per job at most this often
    link: LinkProbeConfig = field(default_factory=LinkProbeConfig)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"auto capture mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if not self.min_interval_s >= 0 or not self.probe_interval_s >= 0:
            raise ConfigError("auto capture: intervals must be >= 0 s")
        if self.num_steps < 1 or self.max_peers < 1:
            raise ConfigError("auto capture: interval >= 0 s, at least 1 step and 1 peer")
        if self.min_severity not in SEVERITIES:
            raise ConfigError(f"auto capture: unknown severity {self.min_severity!r}")


@dataclass(slots=True)
class _Pending:
    capture: Capture
    since_ns: int


@dataclass(slots=True)
class AutoCapture:
    """The loop's state across live triage passes. ``request`` sends a profile request (the
    analyzer's control board); ``run_dir`` is where the record goes (``None``: memory only);
    ``clock`` is monotonic ns (the budget), ``wall`` the record's timestamps. ``probe`` sends a
    probe request to one host's daemon (``None``: no link probe rounds)."""

    request: Requester
    run_dir: Path | None
    cfg: AutoCaptureConfig = field(default_factory=AutoCaptureConfig)
    probe: ProbeRequester | None = None
    clock: Callable[[], int] = time.monotonic_ns
    wall: Callable[[], int] = time.time_ns
    records: list[Capture] = field(default_factory=list)
    _last_request_ns: int | None = None
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _noted: set[tuple[str, str]] = field(default_factory=set)  # (finding id, status) recorded
    _last_probe_ns: int | None = None
    _probed: set[str] = field(default_factory=set)  # link findings a round was sent for

    def step(
        self,
        findings: Sequence[Finding],
        classes: Mapping[int, int] | None,
        ranks: Sequence[int],
        addresses: Mapping[str, str] | None = None,
    ) -> list[Capture]:
        """Act on one triage pass's ``findings`` (``classes``: rank -> work class, ``None`` when
        every rank does the same work; ``ranks``: every rank seen; ``addresses``: host -> the
        address its ranks' connections use). The new records."""
        new: list[Capture] = []
        self._outcomes(findings, new)
        if self.cfg.mode == "off":
            return new
        self._links(findings, addresses or {}, new)
        named = _named_ranks(findings, self.cfg.min_severity)
        for f in findings:
            if not _undecided(f, self.cfg.min_severity):
                continue
            suspects = tuple(sorted(f.ranks))
            if any(set(suspects) <= set(p.capture.ranks) for p in self._pending.values()):
                continue  # a window for these ranks is on its way
            peers = _peers(suspects, classes, ranks, named, self.cfg.max_peers)
            after = f.onset_step if f.onset_step is not None else -1
            reason = f"no kernel evidence after step {after} for {f.id}"
            if not peers:
                self._note(f, "deferred", suspects, (), after, reason, "no healthy peer", new)
                continue
            if self.cfg.mode == "observe":
                self._note(f, "observed", suspects, peers, after, reason, "", new)
                continue
            now = self.clock()
            wait_ns = int(self.cfg.min_interval_s * 1e9)
            if self._last_request_ns is not None and now - self._last_request_ns < wait_ns:
                left = (wait_ns - (now - self._last_request_ns)) / 1e9
                why = f"one per job every {self.cfg.min_interval_s:g} s; next in {left:.0f} s"
                self._note(f, "deferred", suspects, peers, after, reason, why, new)
                continue
            try:
                req = self.request(self.cfg.num_steps, [*suspects, *peers])
            except DiagError as exc:  # the analyzer shutting down: the job goes on
                log.warning("automatic profiler window not requested: %s", exc)
                continue
            self._last_request_ns = now
            c = Capture(
                ts_ns=self.wall(), status="requested", finding_id=f.id, kind="profile",
                reason=reason, ranks=suspects, peers=peers, after_step=after,
                at_step=int(req.at_step) if req.at_step > 0 else -1, request_id=req.request_id,
            )  # fmt: skip
            self._pending[req.request_id] = _Pending(c, now)
            self._record(c, new)
            log.info(
                "automatic profiler window for step %s on ranks %s (peers %s): %s",
                c.at_step, list(suspects), list(peers), reason,
            )  # fmt: skip
        return new

    @property
    def pending(self) -> int:
        """How many requests are still waiting for what they asked for."""
        return len(self._pending)

    def settle(self, findings: Sequence[Finding]) -> list[Capture]:
        """The run's final triage: record what its ``findings`` decided for every request still
        pending (or that nothing came back before the run ended); nothing new is requested."""
        new: list[Capture] = []
        self._outcomes(findings, new, final=True)
        return new

    # -- records ----------------------------------------------------------------------------

    def _outcomes(
        self, findings: Sequence[Finding], new: list[Capture], final: bool = False
    ) -> None:
        now = self.clock()
        for rid, p in list(self._pending.items()):
            probe = p.capture.kind == "probe"
            outcome = (
                _probe_outcome(p.capture, findings) if probe else _outcome(p.capture, findings)
            )
            what = "probe results" if probe else "window"
            if outcome is None and now - p.since_ns > self.cfg.outcome_timeout_s * 1e9:
                outcome = f"no {what} came back within {self.cfg.outcome_timeout_s:g} s"
            if outcome is None and final:
                outcome = f"undecided when the run ended (the {what} did not come back in time)"
            if outcome is None:
                continue
            del self._pending[rid]
            c = p.capture
            done = Capture(
                ts_ns=self.wall(), status="decided", finding_id=c.finding_id, kind=c.kind,
                reason=c.reason, ranks=c.ranks, peers=c.peers, after_step=c.after_step,
                at_step=c.at_step, request_id=rid, outcome=outcome,
            )  # fmt: skip
            self._record(done, new)
            log.info("automatic %s %s: %s", _KIND[c.kind], rid, outcome)

    def _links(
        self, findings: Sequence[Finding], addresses: Mapping[str, str], new: list[Capture]
    ) -> None:
        """A probe round for each link finding its connections left undecided (module doc)."""
        for f in findings:
            if not _undecided_link(f, self.cfg.min_severity) or f.id in self._probed:
                continue
            assert f.link is not None
            after = f.onset_step if f.onset_step is not None else -1
            reason = (
                f"the link of {', '.join(f.link.hosts)}: the ranks' connections do not single "
                "out one host"
            )
            hosts = _probe_hosts(f.link.hosts, addresses, self.cfg.link.max_hosts)
            note = functools.partial(self._note, f, ranks=f.ranks, peers=(), after=after,
                                     reason=reason, new=new, kind="probe")  # fmt: skip
            if self.probe is None:
                note("deferred", outcome="no probe path (the analyzer runs without daemons)")
                continue
            if len(hosts) < 3:
                why = (
                    "the job's connections name fewer than three hosts' addresses; probes "
                    "between two hosts measure the very link the finding names"
                )
                note("deferred", outcome=why)
                continue
            if self.cfg.mode == "observe":
                note("observed", outcome="")
                continue
            now = self.clock()
            wait_ns = int(self.cfg.probe_interval_s * 1e9)
            if self._last_probe_ns is not None and now - self._last_probe_ns < wait_ns:
                left = (wait_ns - (now - self._last_probe_ns)) / 1e9
                note("deferred", outcome=f"one probe round per job every "
                     f"{self.cfg.probe_interval_s:g} s; next in {left:.0f} s")  # fmt: skip
                continue
            try:
                orders = linkprobe.plan(hosts, addresses, self.cfg.link)
                sent = [self.probe(linkprobe.PROBE, o.params_json, o.host) for o in orders]
            except DiagError as exc:  # the analyzer shutting down: the job goes on
                log.warning("link probe round not requested: %s", exc)
                continue
            self._last_probe_ns = now
            self._probed.add(f.id)
            c = Capture(
                ts_ns=self.wall(), status="requested", finding_id=f.id, kind="probe",
                reason=f"{reason}; probing {', '.join(hosts)} pairwise ({len(sent)} probes)",
                ranks=f.ranks, after_step=after, request_id=sent[0].request_id,
            )  # fmt: skip
            self._pending[c.request_id] = _Pending(c, now)
            self._record(c, new)
            log.info("link probe round between %s: %s", ", ".join(hosts), reason)

    def _note(
        self,
        f: Finding,
        status: str,
        ranks: tuple[int, ...],
        peers: tuple[int, ...],
        after: int,
        reason: str,
        outcome: str,
        new: list[Capture],
        kind: str = "profile",
    ) -> None:
        if (f.id, status) in self._noted:
            return
        self._noted.add((f.id, status))
        c = Capture(
            ts_ns=self.wall(), status=status, finding_id=f.id, kind=kind, reason=reason,
            ranks=ranks, peers=peers, after_step=after, outcome=outcome,
        )  # fmt: skip
        self._record(c, new)
        if status == "observed":
            log.info("auto capture (observe): would request a %s: %s", _KIND[kind], reason)

    def _record(self, c: Capture, new: list[Capture]) -> None:
        self.records.append(c)
        new.append(c)
        if self.run_dir is None:
            return
        try:
            captures.append(self.run_dir, c)
        except OSError as exc:  # a full disk must not stop the loop (nor the analyzer)
            log.warning("cannot record the automatic capture: %s", exc)


#: what each kind of capture is, in words.
_KIND = {"profile": "profiler window", "probe": "link probe round"}


def _at_least(severity: str, floor: str) -> bool:
    return SEVERITIES.index(severity) >= SEVERITIES.index(floor)


def _undecided(f: Finding, floor: str) -> bool:
    """A slowdown that a profiler window would decide: node, undecided (no covering window)."""
    if f.symptom != "slowdown" or f.cause != "node" or not _at_least(f.severity, floor):
        return False
    return awaits_window(f)


def _undecided_link(f: Finding, floor: str) -> bool:
    """A link slowdown its connections left on several hosts, not yet probed."""
    if f.symptom != "slowdown" or f.cause != "link" or not _at_least(f.severity, floor):
        return False
    if f.link is None or len(f.link.hosts) < 2:
        return False
    return not any(e.metric == PROBE_LOCALIZATION for e in f.evidence)


def _probe_hosts(suspects: Sequence[str], addresses: Mapping[str, str], most: int) -> list[str]:
    """The finding's hosts first, then the job's other hosts (references), with an address."""
    order = [*sorted(suspects), *sorted(set(addresses) - set(suspects))]
    return [h for h in order if h in addresses][:most]


def _named_ranks(findings: Sequence[Finding], floor: str) -> set[int]:
    return {r for f in findings if _at_least(f.severity, floor) for r in f.ranks}


def _peers(
    suspects: tuple[int, ...],
    classes: Mapping[int, int] | None,
    ranks: Sequence[int],
    named: set[int],
    most: int,
) -> tuple[int, ...]:
    """Up to ``most`` ranks of the suspects' work class to profile beside them: healthy ones
    (named in no finding) first, nearest rank numbers first; then, when there are fewer, ranks
    other findings name (a moving imbalance names ranks that are no slower on average): the
    kernel detector compares a rank with the median of three or more."""
    mine = {classes.get(r) for r in suspects} if classes else {None}
    pool = [r for r in ranks if r not in suspects and (classes.get(r) if classes else None) in mine]
    pool.sort(key=lambda r: (r in named, min(abs(r - s) for s in suspects), r))
    return tuple(sorted(pool[:most]))


def _outcome(c: Capture, findings: Sequence[Finding]) -> str | None:
    """What the evidence decided for ``c``'s ranks, ``None`` while undecided."""
    for f in findings:
        if f.symptom != "slowdown" or not set(c.ranks) <= set(f.ranks):
            continue
        if f.cause == "kernel":
            return f"kernel: {f.summary}"
        if f.cause == "node" and any(
            e.metric == KERNEL_EVIDENCE and e.value >= 1 for e in f.evidence
        ):
            return "node: no one operator explains it (the rank is slower throughout)"
    return None


def _probe_outcome(c: Capture, findings: Sequence[Finding]) -> str | None:
    """What the probe round decided for ``c``'s finding, ``None`` while no result is in."""
    for f in findings:
        if f.id != c.finding_id:
            continue
        for e in f.evidence:
            if e.metric == PROBE_LOCALIZATION:
                if e.value >= 1:
                    return f"link: the probes name {e.subject}"
                return f"link: the probes name no one link ({e.note})"
    return None
