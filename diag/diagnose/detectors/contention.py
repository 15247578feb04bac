"""Contention detector: a rank (or the ranks of one host) waiting for a CPU more than its peers.

The node detector takes the training thread's run-queue delay (``cpu_wait_ms``: ready to run,
no CPU free) out of a rank's compute, so that a host oversubscribed by the job itself (every rank
waiting alike) is not taken for a slow device. That delay is noise only while the ranks share it;
when one rank's, or one host's, stands out against its peers' while the others wait for it, it
is the diagnosis: cause ``node``, the host's CPUs contended, with the competing processes the
daemon saw (:class:`~diag.schema.HostProcess`) as evidence.

Run-queue delay comes in bursts (a step waits 0 or 8 ms as the scheduler happens to place it),
so ranks are compared on its mean over the last ``window`` steps: per step and rank, that mean
against the median of its peers' means (the other ranks over the same steps); the step is
*flagged* when ``mean >= min_ratio x peers'`` and the excess ``mean - peers'`` is at least the
*floor*, ``max(min_excess_ms, min_excess_frac x job step)`` (the step's median over ranks); the
rank is a candidate when flagged in ``>= min_frac`` of a ``window``-step sliding window (warm-up
steps skipped). Its anomaly starts at the change point of its per-step excess over the peers'
median, from the first analysed step to the end of its last flagged window (the split with the
least summed absolute deviation from each side's median, a higher median after: one step change
stands out of bursty noise over the whole span, where a window's worth of it does not; a split
found at the end of a search range that cut it short gives way to the whole span's); it is
contention "from the start" (``onset_step`` None, the anomaly from the first analysed step) when
that split is within the first ``window`` steps or the mean excess before it is already half the
mean excess after. The anomaly ends at its last step above the floor. It is contended when, over
the anomaly:

- the excess stands above the steps' noise: mean excess minus ``sigmas`` (2) standard errors is
  still at least the floor (a few bursty steps do not make a rank contended). Run-queue delay
  comes in bursts that span several steps, so successive steps are not independent samples: the
  standard error is the larger of the per-step one and the one of the means of successive
  ``window``-step blocks (a burst moves one block, not many steps);
- it lasts ``min_blocks`` (3) such blocks and ``min_duration_s`` (1 s) of the job's time: a
  scheduler burst of a few hundred milliseconds on a busy host is weather, not a fault (a
  job of 20 ms steps contended for 50 steps is not). ``detected_step`` is therefore the first
  step at which all of this held over the anomaly so far (three windows in at the earliest: a
  live triage before it would not have named the rank), not its first flagged window;
- its peers wait for it: their median collective wait grows (onset: after - before, or the
  growth of theirs less its own, whichever is larger; from the start: theirs - its own) by at
  least ``min_wait_explained`` x the mean excess. Less its own: a late rank's own wait shrinks
  as its peers' grows (seen beside a busy loop: a rank under a CPU quota 10.6 ms/step late, its
  peers' wait up 4.0 ms and its own down 1.5 ms in the medians, left out against the 5.3 ms the
  peers' growth alone had to reach); whichever is larger: a quota also slows the rank's own
  collectives, so its own wait can grow too (seen quiet: peers' +10.3 ms, its own +4.5 ms);
- its demand does not explain it (:func:`_beyond_demand`): on a host the job oversubscribes, a
  rank that computes longer (a slower kernel, more work) is runnable longer and waits for a CPU
  longer in proportion. Its delay beyond its own compute times its peers' delay per millisecond
  of compute must still reach the floor (a float64 matmul on one rank: 7.5 ms/step against its
  peers' 2.5 ms, yet no more per millisecond of compute than theirs; a competitor raises that
  rate itself), and so must its delay beyond its compute times its own rate before the onset
  (a rank that computes without a break waits more per millisecond than peers that compute in
  bursts: a pipeline rank with 4x the work beside a busy loop, 1.4 ms per ms against its peers'
  0.3-0.6, but 2.7 of its own before); and its process must not use more of a CPU than before
  while its peers do not (:func:`_uses_more_cpu`: more work of its own; a competitor or a quota
  takes CPU from a rank, it cannot make it use more).

A whole host can be contended with no calm peer to show it (every rank of a one-host job shares
its CPUs with the competitor; the scheduler spreads the loss over them): then the reference is the
host's own level before a dated change point (:func:`_host_arrival`): its ranks' median run-queue
delay steps up by more than the floor and two standard errors, for ``min_blocks`` windows and
``min_duration_s``, the job's steps grow with it, and a process that is neither the job's (a rank,
a rank's child running its command line, the launcher) nor diag's takes at least
``min_process_pct`` of a core, twice its share before: without that competitor a host-wide rise
is the job's own load, never a finding. The host's level is taken with its bursts clipped
(:func:`_without_bursts`): an evaluation step that makes every rank wait 200 ms is not the
level. The ranks named are those pinned to the CPU the
competitor ran on when others run elsewhere, else every rank of the host.

Ranks of one host contended together (onsets at most ``window`` steps apart, or all from the
start) are one finding (all of a host: the host's; else those ranks): they share its CPUs and the
processes that compete for them. Not when some of the host's ranks are contended and they are
pinned to different CPUs (``ProcSample.last_cpu``, one CPU each in the later samples): one
finding per CPU then, each naming what ran on its CPU; and a rank pinned to another CPU than a
contended rank's is not tried again as its host-mate (in :func:`detect`): that CPU is not known
contended.

- ``slowdown``: onset: ``(median job step after - before) / after``, at most the mean excess
  over the job step after; from the start: the mean excess over the job step. Either at most
  what it cost the job (:func:`_cost_to_job`): per step, its excess only while the group arrived
  last at the collectives, by no more than the others waited for it (a rank contended while
  another rank's hog held everyone up cost nothing then; CI saw rank 0's 5 ms/step of delay,
  there from step 16, reported as "18% slower" beside rank 2's hog).
- competing processes: on the culprit's host, over the anomaly's wall-clock span, each other
  process's mean CPU share per host sample (the daemon reports those above 10% of a core); the
  ones at ``>= min_process_pct`` are named (at most ``max_processes``), first those that last ran
  on a CPU a culprit last ran on (``ProcSample.last_cpu``: "the hog ran on rank 2's CPU"), each as
  an evidence item with its share before the onset as reference.
- ``confidence = consistency x (0.5 + 0.5 x min(1, excess / job step / confident_gap))`` (as the
  node detector's; consistency: the share of the anomaly's steps in which it waits more than its
  peers), + 0.1 when a named process ran on a culprit's CPU, + 0.05 when only on its host; at
  most 0.95.
- severity: ``critical`` at ``critical`` (0.3) slowdown, ``warning`` at ``warning`` (0.1),
  else ``info``. Contention from the start is ``info`` at most, with its evidence: with no change
  to date it, a rank's larger share of its host's contention is as likely its placement (which
  ranks share a core, which one hosts a store or a writer, where the host's other jobs happen to
  run) as a fault; on a shared 2-core VM other users' jobs single out one rank or another from
  the first step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from diag.diagnose.coverage import CONTENDED_UNTIL, FOREIGN_PROCESSES, HOST_PROCESS_CPU
from diag.diagnose.features import (
    Features,
    change_point,
    peer_median,
    persistence,
    persistent_columns,
)
from diag.findings import Evidence, Finding, job_cost_text

#: evidence metric: the culprit's cgroup CPU quota throttling (ms per second) vs its peers'
CPU_THROTTLED = "cpu_throttled_ms_per_s"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentionConfig:
    """Thresholds of the contention detector (see the module docstring)."""

    warmup_steps: int = 5
    min_ratio: float = 1.5  # cpu_wait / peers' median
    min_excess_ms: float = 1.0
    min_excess_frac: float = 0.05  # of the job step
    window: int = 10
    min_frac: float = 0.8
    min_duration_s: float = 1.0  # wall-clock length of the anomaly
    min_blocks: int = 3  # ... and its length in windows (blocks of ``window`` steps)
    sigmas: float = 2.0  # the mean excess minus this many standard errors must reach the floor
    sibling_sigmas: float = 1.0  # ... for a rank whose host already holds a contended rank
    #: the rank's own delay per ms of compute before its onset, taken this many standard errors
    #: high, must leave the floor unexplained (:func:`_beyond_demand`)
    own_rate_sigmas: float = 1.0
    #: a rank whose process's CPU share grew this many times over its own before the onset, and
    #: over its peers' change, does more work: its delay is its demand (:func:`_uses_more_cpu`)
    more_cpu_ratio: float = 1.25
    min_wait_explained: float = 0.5
    dwarfed: float = 0.25  # a later step up this many times the earlier level dates the finding
    confident_gap: float = 0.2
    min_process_pct: float = 10.0
    burst_mads: float = 4.0  # a host's level: bursts clipped at median + this x robust sd
    max_processes: int = 3
    warning: float = 0.1
    critical: float = 0.3


#: the later samples a rank must have, all on one CPU, to count as pinned to it
MIN_PINNED_SAMPLES = 3


@dataclass(frozen=True, slots=True)
class _Rank:
    rank: int
    onset: int | None  # step; None: from the start
    detected: int
    anomaly: tuple[int, int]  # first and last step
    before: tuple[int, int] | None
    waits_ms: float  # its median cpu_wait in the anomaly
    peers_ms: float  # its peers' median cpu_wait there
    own_before_ms: float | None
    peers_wait: tuple[float, float | None]  # peers' collective wait in the anomaly, before
    slowdown: float
    gap: float  # excess / job step
    consistency: float
    cost_ms: float | None = None  # per step, how long the others waited for it (_cost_to_job)


def detect(features: Features, cfg: ContentionConfig | None = None) -> list[Finding]:
    """Contended ranks, one finding per host (see the module docstring)."""
    cfg = cfg or ContentionConfig()
    cpu = features.wide("cpu_wait_ms", cfg.warmup_steps)
    if cpu.shape[1] < 2 or len(cpu) < cfg.window or not (cpu.to_numpy() > 0).any():
        return []
    wait = features.wide("wait_ms", cfg.warmup_steps).reindex_like(cpu)
    step = features.wide("duration_ms", cfg.warmup_steps).reindex_like(cpu).median(axis=1)
    mean = cpu.rolling(cfg.window, min_periods=cfg.window).mean()
    layout = features.work_layout()
    classes = layout.work_class if layout.known else None
    peers = calm_reference(mean, classes=classes)
    step_mean = step.rolling(cfg.window, min_periods=cfg.window).mean().to_numpy()
    floor = np.maximum(cfg.min_excess_ms, cfg.min_excess_frac * step_mean)
    flagged = ((mean - peers).ge(floor, axis=0) & (mean >= cfg.min_ratio * peers)).to_numpy()
    excess = cpu - calm_reference(cpu, classes=classes)
    above = excess.ge(np.maximum(cfg.min_excess_ms, cfg.min_excess_frac * step), axis=0)
    persistent = persistent_columns(flagged, cfg.window, cfg.min_frac)
    candidates = [int(c) for c in cpu.columns[persistent]]
    args = (cpu, excess, above, wait, step, flagged, cfg)
    found = [r for rank in candidates if (r := _contended(rank, *args)) is not None]
    hosts = features.hosts_of()
    pinned = _pinned_cpus(features.proc, candidates)  # the found ranks are among them
    # Ranks of one host share its CPUs: a candidate left out (its peers' median rose with it:
    # a contended rank among them) is tried again against the ranks not found contended, from
    # the onset of a contended rank of its host, its excess held to one standard error
    # (``sibling_sigmas``) instead of two: its host's CPUs are already known to be contended. A
    # host-mate found contended "from the start" is dated the same way when it holds from then.
    # Not one pinned to another CPU than the contended rank's: that CPU is not known contended.
    for rank in candidates:
        mine = [r for r in found if r.rank == rank]
        if mine and mine[0].onset is not None:
            continue
        calm = [c for c in cpu.columns if c != rank and all(r.rank != c for r in found)]
        dated = [
            r
            for r in found
            if r.onset is not None
            and hosts.get(r.rank) == hosts.get(rank)
            and not _apart(r.rank, rank, pinned)
        ]
        if not calm or not dated:
            continue
        ex = cpu.sub(cpu[calm].median(axis=1), axis=0)
        ab = ex.ge(np.maximum(cfg.min_excess_ms, cfg.min_excess_frac * step), axis=0)
        for other in dated:
            pos = int(np.searchsorted(cpu.index.to_numpy(), other.anomaly[0]))
            r = _contended(rank, cpu, ex, ab, wait, step, flagged, cfg, onset_at=pos, sibling=True)
            if r is not None:
                found = [f for f in found if f.rank != rank] + [r]
                break
    comp = features.wide("compute_ms", cfg.warmup_steps).reindex_like(cpu)
    found = [
        r
        for r in found
        if _beyond_demand(r, cpu, comp, step, cfg) and not _uses_more_cpu(r, features, cfg)
    ]
    by_host: dict[str, list[_Rank]] = {}
    for r in found:
        by_host.setdefault(hosts.get(r.rank, ""), []).append(r)
    out = [
        _finding(_cost_to_job(group, excess, wait, step), host, hosts, features, cfg)
        for host, rs in sorted(by_host.items())
        for group in _together(rs, cfg.window, _ranks_of(host, hosts, cpu), pinned)
    ]
    with_onset = {h for h, rs in by_host.items() if any(r.onset is not None for r in rs)}
    for host in sorted(set(hosts.values()) - with_onset):
        group = _host_arrival(host, hosts, features, cpu, wait, step, cfg)
        if group:
            out.append(_finding(group, host, hosts, features, cfg, reference="before"))
    return out


def _cost_to_job(
    group: list[_Rank], excess: pd.DataFrame, wait: pd.DataFrame, step: pd.Series
) -> list[_Rank]:
    """``group`` with each rank's ``slowdown`` at most what its delay cost the job: per step of
    the lead's anomaly, the group's excess delay (the largest of its ranks') counts only as far
    as the group arrived last, by how much it did (the least collective wait among the other
    ranks minus the group's least: the time the others waited for it); a delay while another
    rank arrives later still (another rank's hog, a slow device elsewhere) holds nobody up. Its
    mean over the anomaly, over the median job step there, caps the slowdown and is kept as
    ``cost_ms`` (a rank contended the whole run but held up only while no one else was slower
    is a slight finding, not the job's slowdown). With no other rank there is nothing to arrive
    before: the group unchanged."""
    members = [r.rank for r in group]
    others = [c for c in wait.columns if c not in members]
    if not others:
        return group
    lead = max(group, key=lambda r: r.slowdown)
    rows = (wait.index >= lead.anomaly[0]) & (wait.index <= lead.anomaly[1])
    late = wait.loc[rows, others].min(axis=1) - wait.loc[rows, members].min(axis=1)
    delay = excess.loc[rows, members].max(axis=1)
    cost = np.minimum(delay.clip(lower=0).to_numpy(), late.clip(lower=0).to_numpy())
    after = float(step[rows].median())
    if not np.isfinite(cost).any() or not after > 0:
        return group
    cost_ms = float(np.nanmean(cost))
    return [replace(r, slowdown=min(r.slowdown, cost_ms / after), cost_ms=cost_ms) for r in group]


def _beyond_demand(
    r: _Rank, cpu: pd.DataFrame, comp: pd.DataFrame, step: pd.Series, cfg: ContentionConfig
) -> bool:
    """The rank's run-queue delay over its anomaly is more than its own demand explains: on a
    host the job oversubscribes, a rank that computes longer (a slower kernel, more work) is
    runnable longer and waits longer. Two references, each of which must leave at least the
    floor unexplained:

    - its peers': its mean compute (on-CPU) times their delay per millisecond of compute (the
      median over the other ranks of their sums over the same steps);
    - its own before the onset (a rank with an onset and at least ``window`` steps before it):
      its mean compute in the anomaly times its own delay per millisecond of compute then, plus
      ``own_rate_sigmas`` (1) standard errors of that rate (:func:`_stderr` of the steps'
      residuals, in blocks: 4x the work multiplies a rate's noise by four). A competitor that
      arrives raises that rate; more work of its own does not. The peers' rate alone
      under-reads a rank that computes without a break beside ranks that compute in short
      bursts and sleep in the collectives (the scheduler favours a task that wakes up over one
      that has run on): a pipeline rank doing 4x its stage's work beside a busy loop waited
      27.4 ms/step for a CPU at 19.6 ms of compute (1.4 ms per ms) against its peers' 0.3-0.6,
      yet 2.7 per ms of its own before the onset; it read as contention by the busy loop, its
      extra work folded in.

    Without compute times there is nothing to scale by and the rank stands."""
    rows = (cpu.index >= r.anomaly[0]) & (cpu.index <= r.anomaly[1])
    others = [c for c in cpu.columns if c != r.rank]
    demand = comp.loc[rows, others].sum()
    if not others or not (demand > 0).all() or not (comp.loc[rows, r.rank] > 0).any():
        return True
    per_ms = float((cpu.loc[rows, others].sum() / demand).median())
    compute = float(comp.loc[rows, r.rank].mean())
    delay = float(cpu.loc[rows, r.rank].mean())
    floor = max(cfg.min_excess_ms, cfg.min_excess_frac * float(step[rows].mean()))
    if delay - per_ms * compute < floor:
        return False
    if r.onset is None or r.before is None:
        return True
    pre = (cpu.index >= r.before[0]) & (cpu.index <= r.before[1])
    pre_comp = comp.loc[pre, r.rank].to_numpy(dtype=float)
    pre_delay = cpu.loc[pre, r.rank].to_numpy(dtype=float)
    ok = ~(np.isnan(pre_comp) | np.isnan(pre_delay))
    pre_comp, pre_delay = pre_comp[ok], pre_delay[ok]
    if len(pre_comp) < cfg.window or not pre_comp.sum() > 0:
        return True
    own_per_ms = float(pre_delay.sum() / pre_comp.sum())
    # the rate's own noise (bursty delay over a few dozen steps): its standard error, in blocks
    se = _stderr(pre_delay - own_per_ms * pre_comp, cfg.window) / float(pre_comp.mean())
    return delay - (own_per_ms + cfg.own_rate_sigmas * se) * compute >= floor


def _uses_more_cpu(r: _Rank, features: Features, cfg: ContentionConfig) -> bool:
    """The rank's process took ``more_cpu_ratio`` times the CPU share after its onset that it
    took before (the daemon's ``ProcSample.cpu_pct``, samples wholly on either side of the
    onset's start, up to the anomaly's end), and that many times its peers' median change: it
    does more work. A competitor, or a quota, takes CPU from a rank; it cannot make it use more.
    A rank that computes without a break beside a busy loop waits more per millisecond than it
    did in short bursts (a pipeline rank with 3.6x the work: 3.5 -> 23.7 ms/step of delay, its
    own rate doubled), yet its process went from 31 % to 53 % of a core while its peers' fell
    from ~37 % to ~23 %; the quota'd rank of another run went from 30 % to 25 %. Unknown (no
    samples on a side, a rank from the start): False, the rank stands. Its peers are the ranks
    of its host where it has any (the host's load is what changed with it; and at fleet scale
    the samples of one host, not of every rank, are grouped), else every other rank."""
    proc = features.proc
    if r.onset is None or proc.empty or "cpu_pct" not in proc.columns:
        return False
    mine = proc["rank"].to_numpy() == r.rank
    if not mine.any():
        return False
    if "host" in proc.columns:
        host = proc["host"].to_numpy()[mine][-1]
        local = proc["host"].to_numpy() == host
        if len(np.unique(proc["rank"].to_numpy()[local])) >= 2:
            proc = proc[local]
    span = _span(features.steps, (r.onset, r.anomaly[1]))
    if span is None:
        return False
    t_on, t_end = span
    start = proc["ts_ns"] - proc["interval_ns"].clip(lower=0)
    before = proc[proc["ts_ns"] <= t_on].groupby("rank")["cpu_pct"].mean()
    after = proc[(start >= t_on) & (proc["ts_ns"] <= t_end)].groupby("rank")["cpu_pct"].mean()
    change = (after / before.where(before > 0)).dropna()
    if r.rank not in change.index or len(change) < 2:
        return False
    own, peers = float(change.loc[r.rank]), float(change.drop(r.rank).median())
    return own >= cfg.more_cpu_ratio and own >= cfg.more_cpu_ratio * peers


def _host_arrival(
    host: str,
    hosts: dict[int, str],
    features: Features,
    cpu: pd.DataFrame,
    wait: pd.DataFrame,
    step: pd.Series,
    cfg: ContentionConfig,
) -> list[_Rank]:
    """Contention that arrived on a whole host: its ranks' median run-queue delay steps up at a
    change point (a window or more into the run), the job's steps with it, and a process that is
    neither the job's nor diag's takes a CPU share it did not have before (``min_process_pct``,
    at least twice its share before). On a host where every rank shares the CPUs there are no
    calm peers to compare with; the level before the onset is the reference, and the foreign
    process is the evidence that the job did not do it to itself. The ranks named: those pinned
    to the CPU the process ran on (each rank's samples on one CPU) when others run elsewhere,
    else every rank of the host."""
    ranks = sorted(r for r, h in hosts.items() if h == host and r in cpu.columns)
    if not ranks or len(cpu) < (cfg.min_blocks + 1) * cfg.window:
        return []
    found = _arrival(ranks, ranks, host, features, cpu, wait, step, cfg)
    if found:
        return found
    # Ranks pinned to CPUs: a competitor on one CPU delays only the ranks pinned there (half of
    # a host's ranks on two CPUs: their median delay moves the host's median by half or less).
    for mates in _pinned_groups(features.proc, ranks):
        found = _arrival(mates, ranks, host, features, cpu, wait, step, cfg)
        if found:
            return found
    return []


def _pinned_groups(proc: pd.DataFrame, ranks: list[int]) -> list[list[int]]:
    """The host's ranks grouped by the one CPU each ran on in its later samples, when every rank
    ran on one (:func:`_pinned_cpus`) and there are several groups."""
    cpus = _pinned_cpus(proc, ranks)
    if set(cpus) != set(ranks):
        return []
    groups: dict[int, list[int]] = {}
    for r in ranks:
        groups.setdefault(cpus[r], []).append(r)
    return list(groups.values()) if len(groups) > 1 else []


def _pinned_cpus(proc: pd.DataFrame, ranks: list[int]) -> dict[int, int]:
    """Rank -> the one CPU it ran on in its later samples (the second half of each rank's
    samples: pinning can come after the start), for the ranks of ``ranks`` that ran on one in
    at least ``MIN_PINNED_SAMPLES`` of them (a rank the scheduler kept on one core for a sample
    or two is not pinned)."""
    if proc.empty or "last_cpu" not in proc.columns:
        return {}
    p = proc[proc["rank"].isin(ranks) & (proc["last_cpu"] >= 0)].sort_values("ts_ns")
    out: dict[int, int] = {}
    for r, c in p.groupby("rank")["last_cpu"]:
        later = c.iloc[len(c) // 2 :].astype(int)
        if len(later) >= MIN_PINNED_SAMPLES and later.nunique() == 1:
            out[int(r)] = int(later.iloc[0])
    return out


def _ranks_of(host: str, hosts: Mapping[int, str], cpu: pd.DataFrame) -> set[int]:
    """The analysed ranks of ``host``."""
    return {int(c) for c in cpu.columns if hosts.get(int(c), "") == host}


def _apart(a: int, b: int, cpus: Mapping[int, int]) -> bool:
    """Ranks ``a`` and ``b`` are pinned to different CPUs: a competitor for one does not contend
    the other."""
    return a in cpus and b in cpus and cpus[a] != cpus[b]


def _arrival(
    mates: list[int],
    ranks: list[int],
    host: str,
    features: Features,
    cpu: pd.DataFrame,
    wait: pd.DataFrame,
    step: pd.Series,
    cfg: ContentionConfig,
) -> list[_Rank]:
    """:func:`_host_arrival` for the ranks ``mates`` of the host's ``ranks`` (all of them, or
    the ones pinned to one CPU: then the competitor must have run on that CPU)."""
    x = _without_bursts(cpu[mates].median(axis=1).to_numpy(dtype=float), cfg.burst_mads)
    if np.isnan(x).all():
        return []
    t = _change_point(x, len(x))
    if t < cfg.window or len(x) - t < cfg.min_blocks * cfg.window:
        return []
    level = float(np.nanmean(x[:t]))
    d = x[t:][~np.isnan(x[t:])] - level
    after_step = float(step.iloc[t:].median())
    before_step = float(step.iloc[:t].median())
    gap_ms = float(d.mean()) if len(d) else 0.0
    floor = max(cfg.min_excess_ms, cfg.min_excess_frac * after_step)
    if after_step <= 0 or gap_ms - cfg.sigmas * _stderr(d, cfg.window) < floor:
        return []
    if float(step.iloc[t:].sum()) < 1e3 * cfg.min_duration_s:
        return []
    growth = (after_step - before_step) / after_step
    if growth <= 0:
        return []
    steps = cpu.index.to_numpy()
    anomaly = (int(steps[t]), int(steps[-1]))
    before = (int(steps[0]), int(steps[t - 1]))
    span, before_span = _span(features.steps, anomaly), _span(features.steps, before)
    if span is None or before_span is None:
        return []
    foreign = [
        p
        for p in _processes(features, host, mates, span, before_span)
        if p.pct >= cfg.min_process_pct
        and 2 * (p.pct_before or 0.0) <= p.pct
        and not _of_the_job(p, features, ranks)
    ]
    if not foreign:
        return []
    named = _pinned_with(foreign[0].cpu, features.proc, ranks, span) or ranks
    if len(mates) < len(ranks) and named != mates:
        return []  # the competitor is not where the delay is
    wait_before = wait[ranks].median(axis=1)
    flags = np.r_[np.zeros(t, dtype=bool), x[t:] - level >= floor]
    return [
        _Rank(
            rank=r,
            onset=anomaly[0],
            detected=int(steps[_detected(flags, t, len(x) - 1, cfg, x - level, step, cfg.sigmas)]),
            anomaly=anomaly,
            before=before,
            waits_ms=float(cpu[r].iloc[t:].mean()),
            peers_ms=float(cpu[r].iloc[:t].mean()),
            own_before_ms=float(cpu[r].iloc[:t].mean()),
            peers_wait=(float(wait_before.iloc[t:].median()), float(wait_before.iloc[:t].median())),
            slowdown=max(0.0, min(growth, gap_ms / after_step)),
            gap=gap_ms / after_step,
            consistency=float((d > 0).mean()),
        )
        for r in named
    ]


def _without_bursts(x: np.ndarray, mads: float) -> np.ndarray:
    """``x`` with its upward bursts clipped to ``median + mads`` robust standard deviations
    (1.4826 x the median absolute deviation) of the whole series. A host-wide burst of a step
    or two (every rank's run-queue delay at 100-270 ms around an evaluation and a checkpoint,
    against 10-20 ms) says nothing about a level that moved for good, yet it alone set the
    standard error that hid a hog's lasting rise; a lasting rise is a large part of the series
    and stays below the clip."""
    finite = x[np.isfinite(x)]
    if len(finite) < 3:
        return x
    center = float(np.median(finite))
    scale = 1.4826 * float(np.median(np.abs(finite - center)))
    if not scale > 0:
        return x
    return np.where(np.isfinite(x), np.minimum(x, center + mads * scale), x)


#: command lines of diag's and the launcher's own processes (never a foreign competitor)
_OWN_COMMANDS = ("diag.cli.main", "diag ", "torch.distributed.run", "torchrun")


def _of_the_job(p: _Process, features: Features, ranks: list[int]) -> bool:
    """The process is a rank, a rank's child (a data loader worker runs its command line),
    the launcher or diag itself."""
    pids = _rank_pids(features)
    if p.pid in pids:
        return True
    hp = features.host_processes
    if len(hp) and pids and "cmd" in hp.columns:
        rank_cmds = set(hp[hp["pid"].isin(pids)]["cmd"].astype(str))
        if p.cmd in rank_cmds:
            return True
    first = p.cmd.split(" -c ")[0]
    return any(own in first for own in _OWN_COMMANDS)


def _rank_pids(features: Features) -> set[int]:
    """The pids of the job's ranks on every host (their process samples, their rank info):
    where hosts share a machine (containers, network namespaces) another host's rank is the
    job's too."""
    pids: set[int] = set()
    for frame in (features.proc, features.rank_info):
        if len(frame) and "pid" in frame.columns:
            pids |= {int(x) for x in frame["pid"].dropna() if int(x) > 0}
    return pids


def _pinned_with(cpu: int, proc: pd.DataFrame, ranks: list[int], span: tuple[int, int]) -> list:
    """The ranks that ran on ``cpu`` in every sample over ``span`` when every rank kept to one
    CPU and some other CPU holds ranks too (they are pinned: only those compete with a process
    on ``cpu``); empty otherwise."""
    if cpu < 0 or proc.empty or "last_cpu" not in proc.columns:
        return []
    p = proc[proc["rank"].isin(ranks) & proc["ts_ns"].between(*span) & (proc["last_cpu"] >= 0)]
    seen = {int(r): set(c.astype(int)) for r, c in p.groupby("rank")["last_cpu"]}
    if set(seen) != set(ranks) or any(len(c) != 1 for c in seen.values()):
        return []
    on = sorted(r for r, c in seen.items() if c == {cpu})
    return on if 0 < len(on) < len(ranks) else []


def calm_reference(
    wide: pd.DataFrame, quantile: float = 0.25, classes: Mapping[int, int] | None = None
) -> pd.DataFrame:
    """Per step and rank, what an uncontended rank waits: the lower of its peers' median and
    the step's ``quantile`` over all ranks (a foreign process on one CPU of a small host can
    contend half its ranks, and then a rank's peers' median holds contended ones). With
    ``classes`` (rank -> work class) a rank's peers are the ranks of its class when it has
    any: a pipeline stage with more work keeps its CPUs busier and waits for them more, which
    is the layout's imbalance (structural), not contention."""
    out = _calm(wide, quantile)
    if classes is not None:
        members: dict[int, list] = {}
        for col in wide.columns:
            if int(col) in classes:
                members.setdefault(classes[int(col)], []).append(col)
        for cols in members.values():
            if 2 <= len(cols) < wide.shape[1]:
                out[cols] = _calm(wide[cols], quantile)
    return out


def _calm(wide: pd.DataFrame, quantile: float) -> pd.DataFrame:
    values = wide.to_numpy(dtype=float)
    low = np.full(values.shape[0], np.nan)
    rows = ~np.isnan(values).all(axis=1)
    low[rows] = np.nanquantile(values[rows], quantile, axis=1)
    return peer_median(wide).clip(upper=pd.Series(low, index=wide.index), axis=0)


def _together(
    ranks: list[_Rank], window: int, host_ranks: set[int], pinned: Mapping[int, int]
) -> list[list[_Rank]]:
    """Ranks of one host contended at the same time (onsets at most ``window`` steps apart, or
    all from the start), each set led by its largest slowdown: one finding each. A set of some
    of the host's ranks (``host_ranks``) pinned to different CPUs (``pinned``: rank -> CPU) is
    one set per CPU (with a rank not pinned, which may share any of them, it stays whole): busy
    CI, a real-time hog on rank 2's CPU 1 pushed the machine's other work onto CPU 0, rank 0
    there waited 3.5 ms/step longer from the same step while its CPU-mates did not, and one
    finding "ranks 0, 2" named the hog for both. Every rank of the host contended at once is
    the host's CPUs contended: one set."""
    out: list[list[_Rank]] = []
    for r in sorted(ranks, key=lambda r: (-r.slowdown, r.rank)):
        for group in out:
            lead = group[0].onset
            if (lead is None and r.onset is None) or (
                lead is not None and r.onset is not None and abs(r.onset - lead) <= window
            ):
                group.append(r)
                break
        else:
            out.append([r])
    split: list[list[_Rank]] = []
    for group in out:
        whole = {r.rank for r in group} >= host_ranks
        if whole or not all(r.rank in pinned for r in group):  # a rank not pinned: any CPU
            split.append(group)
            continue
        by_cpu: dict[int, list[_Rank]] = {}
        for r in group:  # in the group's order: each set led by its largest slowdown
            by_cpu.setdefault(pinned[r.rank], []).append(r)
        split += by_cpu.values()
    return split


def _contended(
    rank: int,
    cpu: pd.DataFrame,
    excess: pd.DataFrame,
    above: pd.DataFrame,
    wait: pd.DataFrame,
    step: pd.Series,
    flagged: np.ndarray,
    cfg: ContentionConfig,
    onset_at: int | None = None,
    sibling: bool = False,
) -> _Rank | None:
    """The contention of ``rank``, or ``None``; ``onset_at``: the anomaly starts at that
    position (another rank's onset on its host) instead of the rank's own change point."""
    col = list(cpu.columns).index(rank)
    flags = flagged[:, col]
    x = excess[rank].to_numpy()
    if onset_at is None:
        flags = _main_episode(flags, x, cfg)
    run = persistence(flags, cfg.window, cfg.min_frac)
    if run is None:
        return None
    if onset_at is None:
        # Two datings: the split near the first persistent flags (searched up to three windows
        # past them, at most one window past them: a later, larger step up is the contention
        # growing, not starting), then the split over the whole span; the first that holds.
        stop = min(run.end_pos + 1, run.onset_pos + 3 * cfg.window)
        last = run.onset_pos + cfg.window
        near = _change_point(x, stop, last=last)
        whole = _change_point(x, run.end_pos + 1)
        # A split at the end of its search range is no change point found but a cut-off one
        # (noise flagged the rank 15 steps before the hog arrived): the whole span's comes first.
        # A later step up that dwarfs the level since the near split (a hog's 100 ms on a rank
        # a busy neighbour had held at 5 ms from the start) is the contention that slowed the
        # job, not the same one growing: the whole span's comes first then too.
        cut = near >= min(last, stop - 1)
        first = (whole, near) if cut or _dwarfs(x, near, whole, run.end_pos, cfg) else (near, whole)
        for pos in dict.fromkeys(first):
            found = _contended(rank, cpu, excess, above, wait, step, flagged, cfg, onset_at=pos)
            if found is not None:
                return found
        return None
    onset_pos = onset_at
    # the rolling mean stays up for a window after the contention ends: end at its last step
    own = above[rank].to_numpy()[onset_pos : run.end_pos + 1]
    end_pos = onset_pos + int(np.flatnonzero(own)[-1]) if own.any() else run.end_pos
    if end_pos < onset_pos or np.isnan(x[onset_pos : end_pos + 1]).all():
        return None
    anomaly = slice(onset_pos, end_pos + 1)
    steps = cpu.index.to_numpy()
    others = [c for c in cpu.columns if c != rank]
    peers_wait = wait[others].median(axis=1)
    gap_ms = float(np.nanmean(x[anomaly]))
    before_ms = float(np.nanmean(x[:onset_pos])) if onset_pos else 0.0
    start = onset_pos < cfg.window or (gap_ms > 0 and before_ms >= 0.5 * gap_ms)
    if start:  # the whole span is the anomaly
        onset_pos, anomaly = 0, slice(0, end_pos + 1)
        gap_ms = float(np.nanmean(x[anomaly]))
    after_step = float(step.iloc[anomaly].median())
    wait_after = float(peers_wait.iloc[anomaly].median())
    if start:
        grown = wait_after - float(wait[rank].iloc[anomaly].median())
        slowdown = gap_ms / after_step if after_step > 0 else 0.0
        wait_before = None
    else:
        wait_before = float(peers_wait.iloc[:onset_pos].median())
        before_step = float(step.iloc[:onset_pos].median())
        growth = (after_step - before_step) / after_step if after_step > 0 else 0.0
        slowdown = min(growth, gap_ms / after_step) if after_step > 0 else 0.0
        # Their wait's growth, or how much more they wait than it does, after against before,
        # whichever is larger: a late rank's own wait shrinks as its peers' grows (it arrives
        # last), so the difference shows a lateness that a busy host's noise in the peers'
        # waits hides; a rank slowed in its collectives too (a quota throttles its gloo
        # threads as well) waits longer itself, and its peers' growth shows it.
        ahead = peers_wait - wait[rank]
        grown = max(
            wait_after - wait_before,
            float(ahead.iloc[anomaly].median()) - float(ahead.iloc[:onset_pos].median()),
        )
    d = x[anomaly][~np.isnan(x[anomaly])]
    floor = max(cfg.min_excess_ms, cfg.min_excess_frac * float(step.iloc[anomaly].mean()))
    if len(d) < cfg.min_blocks * cfg.window:
        return None
    sigmas = cfg.sibling_sigmas if sibling else cfg.sigmas
    if gap_ms - sigmas * _stderr(d, cfg.window) < floor or grown < cfg.min_wait_explained * gap_ms:
        return None
    if float(step.iloc[anomaly].sum()) < 1e3 * cfg.min_duration_s:
        return None
    consistency = float((d > 0).mean())
    return _Rank(
        rank=rank,
        onset=None if start else int(steps[onset_pos]),
        detected=int(steps[_detected(flags, onset_pos, end_pos, cfg, x, step, sigmas)]),
        anomaly=(int(steps[onset_pos]), int(steps[end_pos])),
        before=None if start else (int(steps[0]), int(steps[onset_pos - 1])),
        waits_ms=float(cpu[rank].iloc[anomaly].mean()),
        peers_ms=float((cpu[rank] - excess[rank]).iloc[anomaly].mean()),
        own_before_ms=None if start else float(cpu[rank].iloc[:onset_pos].mean()),
        peers_wait=(wait_after, wait_before),
        slowdown=max(0.0, slowdown),
        gap=gap_ms / after_step if after_step > 0 else 0.0,
        consistency=consistency,
    )


def _dwarfs(x: np.ndarray, near: int, whole: int, end: int, cfg: ContentionConfig) -> bool:
    """The excess after ``whole`` (to ``end``) is more than ``1 / dwarfed`` times the excess
    from ``near`` to ``whole``: two episodes, the later one the larger by far."""
    if whole <= near or whole > end:
        return False
    before = float(np.nanmean(x[near:whole])) if np.isfinite(x[near:whole]).any() else 0.0
    after = float(np.nanmean(x[whole : end + 1])) if np.isfinite(x[whole : end + 1]).any() else 0.0
    return after > 0 and before < cfg.dwarfed * after


def _stderr(d: np.ndarray, block: int) -> float:
    """The standard error of ``d``'s mean: the larger of the per-sample one and the one of the
    means of successive ``block``-sample blocks (bursts correlate neighbouring samples)."""
    per_step = float(d.std(ddof=1)) / np.sqrt(len(d)) if len(d) > 1 else np.inf
    n = len(d) // block
    if n < 2:
        return per_step
    means = d[: n * block].reshape(n, block).mean(axis=1)
    return max(per_step, float(means.std(ddof=1)) / np.sqrt(n))


def _detected(
    flags: np.ndarray,
    onset_pos: int,
    end_pos: int,
    cfg: ContentionConfig,
    excess: np.ndarray,
    step: pd.Series,
    sigmas: float,
) -> int:
    """The first step, from the onset on, at which the detector could have said it: a persistent
    window of flags completed, and the anomaly so far (``excess``: per step, ms above its
    reference) as long as a finding needs (``min_blocks`` windows, ``min_duration_s``) with its
    mean excess ``sigmas`` standard errors above the floor; the anomaly's end when that is
    first found only there. A later step than the first flags on a contended rank: a live
    triage before it would not have named the rank."""
    run = persistence(flags[onset_pos : end_pos + 1], cfg.window, cfg.min_frac)
    first = onset_pos + run.detected_pos if run is not None else end_pos
    first = max(first, onset_pos + cfg.min_blocks * cfg.window - 1)
    ms = step.to_numpy(dtype=float)
    elapsed = np.cumsum(np.nan_to_num(ms[onset_pos : end_pos + 1]))
    long_enough = np.flatnonzero(elapsed >= 1e3 * cfg.min_duration_s)
    first = max(first, onset_pos + int(long_enough[0]) if len(long_enough) else end_pos)
    for pos in range(first, end_pos + 1):
        d = excess[onset_pos : pos + 1]
        d = d[~np.isnan(d)]
        floor = max(
            cfg.min_excess_ms, cfg.min_excess_frac * float(np.nanmean(ms[onset_pos : pos + 1]))
        )
        if len(d) > 1 and float(d.mean()) - sigmas * _stderr(d, cfg.window) >= floor:
            return pos
    return end_pos


def _main_episode(flags: np.ndarray, x: np.ndarray, cfg: ContentionConfig) -> np.ndarray:
    """``flags`` from the start of the episode of persistent flags that loses the most (summed
    excess): contention that came, went for a window or more, and came back stronger (a
    neighbour on the rank's CPU for a while, then a hog) is dated where the larger one began,
    not where the first did; with one episode, ``flags`` unchanged."""
    w = cfg.window
    if len(flags) < w:
        return flags
    counts = np.convolve(flags.astype(float), np.ones(w), mode="valid")
    passing = counts >= cfg.min_frac * w - 1e-9  # windows [i, i + w)
    covered = np.zeros(len(flags), dtype=bool)
    for i in np.flatnonzero(passing):
        covered[i : i + w] = True
    edges = np.flatnonzero(np.diff(np.r_[0, covered.astype(int), 0]))
    episodes = list(zip(edges[::2], edges[1::2], strict=True))  # [start, stop)
    if len(episodes) < 2:
        return flags
    gain = np.nan_to_num(np.clip(x, 0, None))
    start, _ = max(episodes, key=lambda e: float(gain[e[0] : e[1]].sum()))
    out = flags.copy()
    out[:start] = False
    return out


def _change_point(
    x: np.ndarray, stop: int, max_candidates: int = 1000, last: int | None = None
) -> int:
    """The step in ``x[:stop]`` that best splits it into a lower median before and a higher one
    after (:func:`~diag.diagnose.features.change_point`); 0 when no split has a higher median
    after. Every step up to ``last`` is a candidate, or every k-th on long runs (at most
    ``max_candidates``)."""
    x = np.nan_to_num(x[:stop])
    n = len(x)
    step = max(1, n // max_candidates)
    found = change_point(x, range(1, n if last is None else min(n, last + 1), step))
    return 0 if found is None else found


def _span(steps: pd.DataFrame, first_last: tuple[int, int]) -> tuple[int, int] | None:
    rows = steps[(steps["step"] >= first_last[0]) & (steps["step"] <= first_last[1])]
    return None if rows.empty else (int(rows["start_ns"].min()), int(rows["end_ns"].max()))


def _cpus(proc: pd.DataFrame, ranks: list[int], span: tuple[int, int]) -> set[int]:
    """The CPUs the ranks last ran on over ``span`` (each rank's most frequent one)."""
    if proc.empty or "last_cpu" not in proc.columns:
        return set()
    p = proc[proc["rank"].isin(ranks) & proc["ts_ns"].between(*span) & (proc["last_cpu"] >= 0)]
    return {int(c.mode().iloc[0]) for _, c in p.groupby("rank")["last_cpu"]}


@dataclass(frozen=True, slots=True)
class _Throttled:
    """What the CPU quota of the culprits' cgroups did over the anomaly (ProcSample, schema
    1.21): the lead culprit's throttled time per second of its samples, its peers' median, and
    the tightest limit among the culprits (cores; 0 unknown)."""

    rank: int
    ms_per_s: float
    peers_ms_per_s: float
    limit_cores: float


def _throttling(
    proc: pd.DataFrame, lead: int, ranks: list[int], span: tuple[int, int]
) -> _Throttled | None:
    """The lead culprit's cgroup throttling over ``span`` against the other ranks' (None where
    the daemon read no CPU quota: a run before schema 1.21, no CPU controller).

    A sample counts what happened over its interval, ``[ts_ns - interval_ns, ts_ns]``: each one
    that overlaps ``span`` counts for the share of its interval inside it (its throttled time
    taken as spread evenly over the interval). Samples stamped inside the span alone would miss
    most of a short anomaly: with one sample a second, a 1.7 s anomaly (50 steps of 35 ms) held
    one sample stamped before the quota's first period and none of the next, stamped 70 ms after
    the span's end (held-out ``node.cpu_quota`` beside a busy loop: read as 0 ms/s throttled)."""
    if proc.empty or "cpu_throttled_ns" not in proc.columns:
        return None
    p = proc[(proc["interval_ns"] > 0) & proc["cpu_throttled_ns"].notna()]
    end = p["ts_ns"].astype("int64")
    start = end - p["interval_ns"].astype("int64")
    inside = (np.minimum(end, span[1]) - np.maximum(start, span[0])).clip(lower=0)
    p = p.assign(
        inside_ns=inside.astype(float),
        throttled_inside=p["cpu_throttled_ns"].astype(float) * inside / p["interval_ns"],
    )[inside > 0]
    if p.empty or lead not in set(p["rank"].tolist()):
        return None
    by = p.groupby("rank")
    rate = by["throttled_inside"].sum() / by["inside_ns"].sum() * 1e3
    peers = rate.drop([r for r in ranks if r in rate.index])
    limits = p.loc[p["rank"].isin(ranks), "cpu_limit_cores"].astype(float)
    limits = limits[limits > 0]
    return _Throttled(
        rank=lead,
        ms_per_s=float(rate.loc[lead]),
        peers_ms_per_s=float(peers.median()) if len(peers) else 0.0,
        limit_cores=float(limits.min()) if len(limits) else 0.0,
    )


def _quota_explains(t: _Throttled | None, lead: _Rank, step_ms: float) -> bool:
    """The culprit's own CPU quota explains at least half of its excess run-queue delay (both
    per second of the job's time), and its peers were throttled at most half as much: then the
    quota, not a competitor on the host, is what it waits for."""
    if t is None or step_ms <= 0:
        return False
    excess_ms_per_s = max(0.0, lead.waits_ms - lead.peers_ms) / step_ms * 1e3
    return (
        excess_ms_per_s > 0
        and t.ms_per_s >= 0.5 * excess_ms_per_s
        and t.peers_ms_per_s <= 0.5 * t.ms_per_s
    )


@dataclass(frozen=True, slots=True)
class _Process:
    pid: int
    cmd: str
    pct: float  # mean CPU share per host sample over the anomaly (100 per core)
    pct_before: float | None
    cpu: int  # the CPU it ran on most often; -1 unknown
    on_culprit_cpu: bool


def _processes(
    features: Features, host: str, ranks: list[int], span: tuple[int, int], before: tuple | None
) -> list[_Process]:
    hp = features.host_processes
    if hp.empty or not host or not {"host", "ts_ns", "pid", "cpu_pct"} <= set(hp.columns):
        return []
    hp = hp[hp["host"].astype(str) == host]
    samples = features.host[features.host["host"].astype(str) == host]["ts_ns"]

    def share(within: tuple[int, int]) -> pd.DataFrame:
        rows = hp[hp["ts_ns"].between(*within)]
        cycles = max(int(samples.between(*within).sum()), rows["ts_ns"].nunique(), 1)
        by = rows.groupby("pid")
        return pd.DataFrame(
            {
                "pct": by["cpu_pct"].sum() / cycles,
                "cmd": by["cmd"].last() if "cmd" in rows else "",
                "cpu": by["last_cpu"].agg(lambda c: int(c.mode().iloc[0]))
                if "last_cpu" in rows
                else -1,
            }
        )

    now = share(span)
    earlier = share(before) if before is not None else None
    mine = _cpus(features.proc, ranks, span)
    out = [
        _Process(
            pid=int(pid),
            cmd=str(row.cmd),
            pct=float(row.pct),
            pct_before=None if earlier is None else float(earlier["pct"].get(pid, 0.0)),
            cpu=int(row.cpu),
            on_culprit_cpu=int(row.cpu) in mine,
        )
        for pid, row in now.iterrows()
    ]
    return sorted(out, key=lambda p: (not p.on_culprit_cpu, -p.pct, p.pid))


def _pinned_mates(
    cpu: int,
    ranks: list[int],
    lead: _Rank,
    host: str,
    hosts: dict[int, str],
    features: Features,
    span: tuple[int, int],
    cfg: ContentionConfig,
) -> list[int]:
    """The other ranks of ``host`` pinned to ``cpu`` (where the competitor runs) whose own
    run-queue delay rose from the onset by at least half the lead rank's rise (and the floor):
    they share the competitor's CPU, so the same cause slows them, though compared with peers
    that include the culprit they may not stand out on their own."""
    mine = [r for r, h in hosts.items() if h == host]
    pinned = [r for r in _pinned_with(cpu, features.proc, mine, span) if r not in ranks]
    if not pinned or lead.onset is None or lead.own_before_ms is None:
        return []
    wait = features.wide("cpu_wait_ms", cfg.warmup_steps)
    after, before = wait.loc[wait.index >= lead.onset], wait.loc[wait.index < lead.onset]
    rise = lead.waits_ms - lead.own_before_ms
    floor = max(cfg.min_excess_ms, 0.5 * rise)
    return [
        r
        for r in pinned
        if r in wait.columns and float(after[r].mean()) - float(before[r].mean()) >= floor
    ]


def _finding(
    group: list[_Rank],
    host: str,
    hosts: dict[int, str],
    features: Features,
    cfg: ContentionConfig,
    reference: str = "peers",
) -> Finding:
    ranks = [r.rank for r in sorted(group, key=lambda r: r.rank)]
    whole = bool(host) and len(ranks) > 1 and len(ranks) == sum(h == host for h in hosts.values())
    lead = max(group, key=lambda r: r.slowdown)
    onsets = [r.onset for r in group]
    onset = None if any(o is None for o in onsets) else min(o for o in onsets if o is not None)
    anomaly = (min(r.anomaly[0] for r in group), max(r.anomaly[1] for r in group))
    befores = [r.before for r in group if r.before is not None]
    before = (min(b[0] for b in befores), min(b[1] for b in befores)) if onset is not None else None
    span = _span(features.steps, anomaly)
    before_span = _span(features.steps, before) if before is not None and befores else None
    procs = _processes(features, host, ranks, span, before_span) if span else []
    # foreign processes first: the job's own (a loader worker, the launcher) and diag's are
    # evidence too, but not the competitor to name (a contract: the first FOREIGN_PROCESSES
    # items of the evidence's HOST_PROCESS_CPU are the ones outside the job; explain reads it)
    procs = sorted(procs, key=lambda p: _of_the_job(p, features, ranks))
    named = [p for p in procs if p.pct >= cfg.min_process_pct][: cfg.max_processes]
    foreign = [p for p in named if not _of_the_job(p, features, ranks)]
    step_ms = float(features.steps.loc[features.steps["step"].between(*anomaly), "duration_ms"]
                    .median()) if "duration_ms" in features.steps else 0.0  # fmt: skip
    throttled = _throttling(features.proc, lead.rank, ranks, span) if span else None
    quota = reference == "peers" and _quota_explains(throttled, lead, step_ms)
    if quota:
        # its own quota, not the host's other processes: they are listed, not blamed (and a
        # process on its CPU brings in no pinned mates)
        foreign = []
    if onset is not None and span is not None and foreign and foreign[0].on_culprit_cpu:
        mates = _pinned_mates(foreign[0].cpu, ranks, lead, host, hosts, features, span, cfg)
        if mates:
            ranks = sorted([*ranks, *mates])
            whole = len(ranks) == sum(h == host for h in hosts.values())
    if whole:
        who, ident = f"host {host} (ranks {', '.join(map(str, ranks))})", f"contention-{host}"
    elif len(ranks) > 1:
        who = f"ranks {', '.join(map(str, ranks))} on {host}"
        ident = f"contention-{host}-ranks{'-'.join(map(str, ranks))}"
    else:
        who = f"rank {ranks[0]} on {host}" if host else f"rank {ranks[0]}"
        ident = f"contention-rank{ranks[0]}"
    when = "from the start" if onset is None else f"from step {onset}"
    against, waiters = ("on its peers", "peers") if reference == "peers" else ("before", "ranks")
    if quota and throttled is not None:
        limit = f" of {throttled.limit_cores:.2g} cores" if throttled.limit_cores > 0 else ""
        why = (
            f"its cgroup's CPU quota{limit} held it throttled {throttled.ms_per_s:.0f} ms/s "
            f"against {throttled.peers_ms_per_s:.0f} ms/s on its peers"
        )
    elif foreign:
        p = foreign[0]
        where = f" on CPU {p.cpu}, a culprit's CPU" if p.on_culprit_cpu else f" on {host}"
        why = (
            f"its host's CPUs are contended (pid {p.pid} ({_short(p.cmd)}) uses {p.pct:.0f}% "
            f"of a core{where})"
        )
    else:
        # diag's own or the job's processes are evidence, not a competitor to blame
        why = (
            "no process outside the job and diag takes over 10% of a core: a CPU limit on the "
            "rank (a cgroup quota) or the job's own load"
        )
    summary = (
        f"{who} waits {lead.waits_ms:.1f} ms/step for a CPU against {lead.peers_ms:.1f} ms "
        f"{against} {when}: {why}; {waiters} wait "
        f"{lead.peers_wait[0]:.1f} ms/step in collectives; {job_cost_text(lead.slowdown)}"
    )
    conf = float(np.mean([_confidence(r, cfg) for r in group]))
    conf += 0.1 if quota or any(p.on_culprit_cpu for p in foreign) else 0.05 if foreign else 0.0
    severity = "info" if onset is None else _severity(lead.slowdown, cfg)
    return Finding(
        id=ident,
        symptom="slowdown",
        cause="node",
        severity=severity,
        ranks=tuple(ranks),
        hosts=(host,) if host else (),
        onset_step=onset,
        detected_step=min(r.detected for r in group),
        slowdown=lead.slowdown,
        confidence=min(0.95, conf),
        summary=summary,
        evidence=(
            *_evidence(group, who, named, host),
            *([] if throttled is None else [_throttle_evidence(throttled)]),
            Evidence(
                metric=FOREIGN_PROCESSES,
                subject=f"host {host}" if host else who,
                value=float(len(foreign)),
                unit="processes",
                note=f"processes outside the job and diag taking >= {cfg.min_process_pct:g}% of "
                "a core over the anomaly (0: the job's own load or a CPU limit on the rank"
                + (
                    "; here its cgroup's CPU quota, whatever else runs on the host)"
                    if quota
                    else ")"
                ),
            ),
        ),
    )


def _throttle_evidence(t: _Throttled) -> Evidence:
    limit = f"; its limit {t.limit_cores:.2g} cores" if t.limit_cores > 0 else ""
    return Evidence(
        metric=CPU_THROTTLED,
        subject=f"rank {t.rank}",
        value=t.ms_per_s,
        reference=t.peers_ms_per_s,
        unit="ms/s",
        note="time its cgroup's CPU quota held it throttled, per second (summed over the CPUs it "
        f"ran on), over the anomaly vs its peers' median{limit}",
    )


def _evidence(group: list[_Rank], who: str, named: list[_Process], host: str) -> list[Evidence]:
    out = [
        Evidence(
            metric="cpu_wait_ms",
            subject=f"rank {r.rank}",
            value=r.waits_ms,
            reference=r.peers_ms,
            unit="ms",
            note="run-queue delay per step (its training thread ready, no CPU free): mean in "
            "the anomaly vs its peers' median",
        )
        for r in group
    ]
    out += [
        Evidence(
            metric="own_cpu_wait_ms",
            subject=f"rank {r.rank}",
            value=r.waits_ms,
            reference=r.own_before_ms,
            unit="ms",
            note="its mean run-queue delay in the anomaly vs its own before onset",
        )
        for r in group
        if r.own_before_ms is not None
    ]
    out += [
        Evidence(
            metric=CONTENDED_UNTIL,
            subject=f"rank {r.rank}",
            value=float(r.anomaly[1]),
            reference=float(r.anomaly[0]),
            unit="step",
            note="the anomaly's last step (its run-queue delay above the floor) vs its first",
        )
        for r in group
    ]
    lead = max(group, key=lambda r: r.slowdown)
    out.append(
        Evidence(
            metric="peers_wait_ms",
            subject=who,
            value=lead.peers_wait[0],
            reference=lead.peers_wait[1],
            unit="ms",
            note="peers' median collective wait in the anomaly vs before onset",
        )
    )
    if lead.cost_ms is not None:
        out.append(
            Evidence(
                metric="held_up_ms",
                subject=who,
                value=lead.cost_ms,
                unit="ms",
                note="per step, how long the other ranks waited for it in the anomaly: its "
                "excess delay while it arrived last, at most its lead over the next to arrive",
            )
        )
    out += [
        Evidence(
            metric=HOST_PROCESS_CPU,
            subject=f"pid {p.pid} on {host}: {p.cmd}",
            value=p.pct,
            reference=p.pct_before,
            unit="%",
            note=f"CPU share over the anomaly (100 per core; reference: before onset); last ran "
            f"on CPU {p.cpu}" + (", a CPU the culprit ran on" if p.on_culprit_cpu else ""),
        )
        for p in named
    ]
    return out


def _short(cmd: str, limit: int = 60) -> str:
    return cmd if len(cmd) <= limit else cmd[: limit - 3] + "..."


def _confidence(r: _Rank, cfg: ContentionConfig) -> float:
    size = min(1.0, max(0.0, r.gap) / cfg.confident_gap)
    return float(min(0.95, r.consistency * (0.5 + 0.5 * size)))


def _severity(slowdown: float, cfg: ContentionConfig) -> str:
    if slowdown >= cfg.critical:
        return "critical"
    return "warning" if slowdown >= cfg.warning else "info"
