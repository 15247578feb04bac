"""Intermittent stalls: a rank that loses its time in bursts, not in every step.

A rank frozen now and then (a hypervisor descheduling its vCPU, a stop-the-world pause, a thread
holding the GIL or a lock it needs, paging, a debugger's stop) is not slower in most steps: its
*median* compute is its peers', so the persistent detector (:mod:`node_slow`) does not see it.
Yet it is the one that loses the time, the peers wait for it in the collectives, and the job's
steps grow. What singles it out is a comparison with the ranks doing the same work, on *means*
and *turns*:

- ``excess`` per step: the rank's compute above the median of its peers' (its work class's other
  ranks); ``lead`` per step: its excess above the median of its peers' excesses (a moving
  imbalance, uneven batches drawn anew each step, gives every rank the same mean excess and a
  mean lead of 0; a stalling rank keeps the lead).
- onset: the CUSUM change point of the lead (the split with the largest rise in mean, an L2
  change point: the stalls are spikes, which a median-based split ignores by design); before
  ``min_steps`` analysed steps: from the start.
- over the steps from the onset, all of: its mean excess is at least ``stall_min_loss`` of the
  job's mean step; its median lead is under half its mean lead (slow in only some steps: a rank
  slow in most is the persistent detector's to judge, with its thresholds); its peers' mean
  collective wait grew since the onset (from the start: exceeds its own) by
  ``min_wait_explained`` of that excess (they wait for it); and one of two tests:
  - *often*: its mean lead is ``stall_min_t`` standard errors above 0 (a t statistic on the
    steps: k spikes among n steps make about sqrt(k), so one huge spike cannot pass), and it is
    its class's slowest in more steps than chance (``1 / class size``) by ``stall_min_share_z``
    binomial standard errors (a moving imbalance gives each rank its turn), and in each half of
    those steps it is still its class's slowest more often than chance with a positive mean
    lead (a stall goes on; a streak of long batches on one replica, which a moving imbalance
    makes now and then, ends);
  - *rare long pauses* (a full garbage collection, a long page-in: too few for the t test): the
    steps in which a rank of the class lost half a job step or more (``PAUSE_FRAC``) fall on
    this rank (at least ``MIN_PAUSES``, in both halves) far more often than chance would put
    them there (binomial tail).
  Both tests' thresholds are raised for the number of ranks tested (Bonferroni: each rank is a
  test, so 3 sigmas become 3.4 on 4 ranks, 3.9 on 32, 4.6 on 1,024).
- a *suggestion* when neither holds but the class's pauses fall on this rank (at least
  ``MIN_PAUSES``, in both halves, with the other tests above) as chance would put them on one
  rank of the class less than ``SUGGEST_P`` of the time: three full garbage collections of
  175 ms (7 job steps each) on one of 4 ranks cost the job a third of its time, yet 3 of 3 on
  one rank happens by chance 1 time in 16. The pause tests also date the onset at the rank's
  first pause (a few pauses make a poor CUSUM). Reported (``chance_p`` set; ``info``, never louder:
  the evidence is too thin to alarm on) because the time it costs is what a user asks about.
- detected: the first step from which those hold on the steps from the onset to it. A fault
  that shows in only some steps takes more steps to tell from chance than a persistent one:
  with stalls in a third of the steps, about 20-35 steps after the onset.

Everything is vectorized over ranks up to the per-candidate onset search (a rank must first pass
the tests on its whole run, diluted as they are by the steps before a late onset).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from diag.diagnose.features import peer_median, peer_medians

#: A pause: a step in which the rank's lead over its peers is at least this share of the job step.
PAUSE_FRAC = 0.5
#: The fewest pauses that can single a rank out.
MIN_PAUSES = 3
#: Pauses that fall only on one rank, too few for the corrected test, are still reported (as a
#: suggestion, ``info``) when chance would put them all on one rank of the class this rarely.
SUGGEST_P = 0.1
#: classes up to this size compare a rank's wait with its mates' exact median; beyond, with the
#: class's (computed once: per rank it was 2/3 of the detector's time at 16,384 ranks)
EXACT_PEERS = 64


@dataclass(frozen=True, slots=True)
class Stall:
    rank: int
    onset: int | None  # step; None: from the start
    detected: int
    slowdown: float  # the share of the job's step lost since the onset (as node findings)
    excess_ms: float  # its mean compute above its peers' median, per step
    culprit_ms: float  # its mean compute in the anomaly
    peers_ms: float  # its peers' mean (per-step median) compute in the anomaly
    slowest_share: float  # the share of steps it was its class's slowest
    chance_share: float  # 1 / class size
    lead_t: float  # t statistic of its lead over its peers' excesses
    wait_before: float | None
    wait_after: float
    anomaly: tuple[int, int]
    before: tuple[int, int] | None
    pauses: int = 0  # its pauses (half a job step lost or more) in the anomaly
    class_pauses: int = 0  # ... and its class's (its own among them)
    pause_ms: float = 0.0  # their mean lead over its peers
    chance_p: float | None = None  # suggestive: the chance of pauses this concentrated


@dataclass(frozen=True, slots=True)
class StallFrames:
    compute: pd.DataFrame  # steps x ranks
    wait: pd.DataFrame
    job_step: pd.Series
    classes: Mapping[int, int] | None
    #: ``peer_median(compute, classes)`` where the caller has it already (else computed here)
    peers: pd.DataFrame | None = None


def find_stalls(
    frames: StallFrames,
    *,
    skip: set[int],
    min_t: float,
    min_share_z: float,
    min_loss: float,
    min_steps: int,
    min_wait_explained: float,
) -> list[Stall]:
    compute = frames.compute
    if compute.shape[1] < 2 or len(compute) < 2 * min_steps:
        return []
    peers = frames.peers if frames.peers is not None else peer_median(compute, frames.classes)
    excess = compute - peers
    # the excess less its peers' median, in the median's own array (step x rank tables are
    # ~50 MB at 131,072 ranks)
    lead = peer_medians(excess, frames.classes)
    np.subtract(excess.to_numpy(dtype=float), lead, out=lead)
    slowest = _slowest(compute, frames.classes)
    size = _class_size(compute, frames.classes)
    ex = excess.to_numpy(dtype=float)
    # Screen on the whole run: a rank whose stalls start late passes diluted, or not at all.
    t_all = _t_stat(lead)
    # Every rank is a test: the more ranks, the more likely one passes by chance. Each
    # threshold is raised to keep its one-sided tail over all ranks (Bonferroni): 3 sigmas on
    # 1 rank -> 3.4 on 4, 3.9 on 32, 4.6 on 1,024.
    min_t, min_share_z = (_corrected(z, compute.shape[1]) for z in (min_t, min_share_z))
    max_p = 1.0 - NormalDist().cdf(min_t)  # the same tail, for the pause concentration test
    job = frames.job_step.to_numpy(dtype=float)
    pauses = lead >= PAUSE_FRAC * job[:, None]  # steps that lost half a job step or more
    members = _members(compute, frames.classes)
    key_of = {j: key for key, cols in members.items() for j in cols}
    # Candidates: a lead that could pass, or pauses that fall on it (too few for a t test).
    # the pauses of each rank's class mates: its class's total less its own (one pass over the
    # classes, not over every pair: with one class of N ranks that was N^2, 16,384^2 at scale)
    mine, theirs = pauses.sum(axis=0), np.zeros(compute.shape[1], dtype=int)
    for cols in members.values():
        idx = np.asarray(cols, dtype=int)
        theirs[idx] = int(mine[idx].sum()) - mine[idx]
    exclusive = np.zeros(compute.shape[1], dtype=bool)
    for j in np.flatnonzero(mine >= MIN_PAUSES):  # the tail only where it can pass
        tail = _binomial_tail(int(mine[j]), int(mine[j] + theirs[j]), 1 / size[j])
        exclusive[j] = size[j] * tail <= SUGGEST_P
    candidates = [
        j
        for j in np.flatnonzero((t_all >= min_t / 2) | exclusive)
        if int(compute.columns[j]) not in skip and size[j] >= 2
    ]
    wait = frames.wait.to_numpy(dtype=float)
    class_wait: dict[object, np.ndarray] = {}  # a big class's median wait, once per class
    class_pauses: dict[object, np.ndarray] = {}
    out = []
    for j in candidates:
        key = key_of[int(j)]
        cols = members[key]
        every = len(cols) == compute.shape[1]  # one class: the tables themselves, no copies
        if key not in class_pauses:
            class_pauses[key] = (pauses if every else pauses[:, cols]).sum(axis=1)
        if len(cols) > EXACT_PEERS:  # one rank less moves the median of many by a hair
            if key not in class_wait:
                class_wait[key] = np.nanmedian(wait if every else wait[:, cols], axis=1)
            peers_wait = class_wait[key]
        else:
            peers_wait = np.nanmedian(wait[:, [k for k in cols if k != j]], axis=1)
        found = _one(int(j), frames, ex[:, j], lead[:, j], slowest[:, j], size[j], peers,
                     peers_wait, pauses[:, j], class_pauses[key] - pauses[:, j], max_p,
                     min_t=min_t, min_share_z=min_share_z, min_loss=min_loss,
                     min_steps=min_steps, min_wait_explained=min_wait_explained)  # fmt: skip
        if found is not None:
            out.append(found)
    return out


def _one(
    j: int,
    frames: StallFrames,
    excess: np.ndarray,
    lead: np.ndarray,
    slowest: np.ndarray,
    size: int,
    peers: pd.DataFrame,
    peers_wait: np.ndarray,
    own_pauses: np.ndarray,
    mates_pauses: np.ndarray,
    max_p: float,
    *,
    min_t: float,
    min_share_z: float,
    min_loss: float,
    min_steps: int,
    min_wait_explained: float,
) -> Stall | None:
    valid = ~np.isnan(lead) & ~np.isnan(excess)
    if valid.sum() < 2 * min_steps:
        return None
    steps = frames.compute.index.to_numpy()
    x = np.where(valid, lead, 0.0)
    pos = _cusum_onset(x)
    if pos < min_steps:
        pos = 0  # from the start
    if len(x) - pos < min_steps:
        return None
    job = frames.job_step.to_numpy(dtype=float)
    col = frames.compute.columns[j]
    own_wait = frames.wait[col].to_numpy(dtype=float)

    p0 = 1.0 / size

    def often(sl: slice, mid: int, end: int) -> bool:
        """Slow on average and its class's slowest more often than chance, in both halves of
        the steps too (a stall goes on; a streak of long batches ends)."""
        v = valid[sl]
        t = _t_stat(lead[sl][v][:, None])[0]
        share = float(slowest[sl][v].mean())
        z = (share - p0) / np.sqrt(p0 * (1 - p0) / v.sum())
        if not (t >= min_t and z >= min_share_z):
            return False
        for half in (slice(pos, mid), slice(mid, end)):
            hv = valid[half]
            if not hv.any() or float(slowest[half][hv].mean()) <= p0:
                return False
            if float(np.mean(lead[half][hv])) <= 0:
                return False
        return True

    def chance(sl: slice) -> float:
        """The chance, over the class's ranks, that one gets this many of the class's pauses."""
        mine = int(own_pauses[sl].sum())
        total = mine + int(mates_pauses[sl].sum())
        return min(1.0, size * _binomial_tail(mine, total, p0)) if mine else 1.0

    def paused(sl: slice, mid: int, end: int, suggest: bool) -> bool:
        """Rare long pauses: the steps that lost half a job step or more, on its class, fall on
        it far more than chance would put them there (binomial tail), in both halves.
        ``suggest``: all of them on it, with a chance under ``SUGGEST_P`` over the class."""
        mine = int(own_pauses[sl].sum())
        if mine < MIN_PAUSES:
            return False
        if suggest:
            if chance(sl) > SUGGEST_P:
                return False
        elif _binomial_tail(mine, mine + int(mates_pauses[sl].sum()), p0) > max_p:
            return False
        return bool(own_pauses[pos:mid].any() and own_pauses[mid:end].any())

    def holds(end: int, suggest: bool = False) -> bool:  # the tests on the steps [pos, end)
        sl = slice(pos, end)
        v = valid[sl]
        if v.sum() < min_steps:
            return False
        loss = float(np.nanmean(excess[sl][v]))
        step = float(np.nanmean(job[sl]))
        if not (step > 0 and loss >= min_loss * step):
            return False
        if float(np.median(lead[sl][v])) >= 0.5 * float(np.mean(lead[sl][v])):
            return False  # slow in most steps: the persistent detector's to judge, not a stall
        mid = pos + (end - pos) // 2
        if suggest:
            if not paused(sl, mid, end, True):
                return False
        elif not (often(sl, mid, end) or paused(sl, mid, end, False)):
            return False
        after = float(np.nanmean(peers_wait[sl]))
        grown = after - float(np.nanmean(own_wait[sl])) if pos == 0 else max(
            after - float(np.nanmean(peers_wait[:pos])), after - float(np.nanmean(own_wait[sl]))
        )  # fmt: skip
        return grown >= min_wait_explained * loss

    # The tests read ``pos`` when called: a few pauses make a poor CUSUM (two close together
    # late in the run outweigh a first one long before), so the pause tests also try the onset
    # at its first pause (a rank that never paused before it).
    first = int(np.argmax(own_pauses)) if own_pauses.any() else pos
    first = 0 if first < min_steps else first
    tries = [(pos, False), (first, False), (pos, True), (first, True)]
    for pos, suggest in dict.fromkeys(tries):
        if len(x) - pos >= min_steps and holds(len(x), suggest):
            break
    else:
        return None
    detected = next(e for e in range(pos + min_steps, len(x) + 1) if holds(e, suggest)) - 1
    sl = slice(pos, len(x))
    v = valid[sl]
    step_after = float(np.nanmean(job[sl]))
    loss = float(np.nanmean(excess[sl][v]))
    if pos == 0:
        slowdown = loss / step_after
        wait_before = None
    else:
        step_before = float(np.nanmean(job[:pos]))
        growth = (step_after - step_before) / step_after
        slowdown = max(0.0, min(growth, loss / step_after))
        wait_before = float(np.nanmean(peers_wait[:pos]))
    compute = frames.compute[col].to_numpy(dtype=float)
    return Stall(
        rank=int(col),
        onset=None if pos == 0 else int(steps[pos]),
        detected=int(steps[detected]),
        slowdown=slowdown,
        excess_ms=loss,
        culprit_ms=float(np.nanmean(compute[sl])),
        peers_ms=float(np.nanmean(peers[col].to_numpy(dtype=float)[sl])),
        slowest_share=float(slowest[sl][v].mean()),
        chance_share=1.0 / size,
        lead_t=float(_t_stat(lead[sl][v][:, None])[0]),
        wait_before=wait_before,
        wait_after=float(np.nanmean(peers_wait[sl])),
        anomaly=(int(steps[pos]), int(steps[-1])),
        before=None if pos == 0 else (int(steps[0]), int(steps[pos - 1])),
        pauses=int(own_pauses[sl].sum()),
        class_pauses=int(own_pauses[sl].sum() + mates_pauses[sl].sum()),
        pause_ms=float(np.mean(lead[sl][own_pauses[sl]])) if own_pauses[sl].any() else 0.0,
        chance_p=float(chance(sl)) if suggest else None,
    )


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return float(sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def _corrected(z: float, tests: int) -> float:
    """The z threshold with the one-sided tail of ``z`` shared among ``tests`` tests."""
    normal = NormalDist()
    tail = (1.0 - normal.cdf(z)) / max(1, tests)
    return max(z, normal.inv_cdf(1.0 - tail)) if tail > 0 else z


#: Cells of a table :func:`_t_stat` works on at a time (its deviations are a table of their own).
_T_BLOCK_CELLS = 1 << 20


def _t_stat(x: np.ndarray) -> np.ndarray:
    """Per column: mean / standard error over the rows (NaN rows left out), 0 where undefined.
    A block of columns at a time: the deviation from the mean is a temporary of the block's
    size (of the whole table's, ~50 MB at 131,072 ranks x 50 steps, it was the node detector's
    peak); each column's sums run over its rows in the same order either way."""
    if x.ndim != 2 or not x.shape[1]:
        return np.zeros(x.shape[1] if x.ndim == 2 else 0)
    block = max(1, _T_BLOCK_CELLS // max(1, len(x)))
    return np.concatenate([_t_block(x[:, i : i + block]) for i in range(0, x.shape[1], block)])


def _t_block(x: np.ndarray) -> np.ndarray:
    nan = np.isnan(x)
    some = bool(nan.any())
    n = np.sum(~nan, axis=0)
    del nan
    # without a NaN, the plain mean and deviation (the same sums): the nan* forms copy the table
    # with NaN as 0 first
    mean_of, std_of = (np.nanmean, np.nanstd) if some else (np.mean, np.std)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = mean_of(x, axis=0) if len(x) else np.zeros(x.shape[1])
        sd = std_of(x, axis=0, ddof=1) if len(x) > 1 else np.zeros(x.shape[1])
        t = mean / (sd / np.sqrt(np.maximum(n, 1)))
    return np.nan_to_num(np.where(n >= 2, t, 0.0), nan=0.0, posinf=0.0, neginf=0.0)


def _cusum_onset(x: np.ndarray) -> int:
    """The split with the largest rise in mean (CUSUM: where the cumulative deviation from the
    overall mean is lowest); 0 when the mean never rises."""
    s = np.cumsum(x - x.mean())
    low = int(np.argmin(s))
    return low + 1 if s[low] < 0 else 0


def _slowest(compute: pd.DataFrame, classes: Mapping[int, int] | None) -> np.ndarray:
    """Per step and rank: True when it computes the longest of its class (NaN: False)."""
    values = compute.to_numpy(dtype=float)
    out = np.zeros(values.shape, dtype=bool)
    for cols in _members(compute, classes).values():
        # every rank in one class (no layout): the table itself, not a copy of all its columns
        v = values if cols == list(range(values.shape[1])) else values[:, cols]
        nan = np.isnan(v)
        some = bool(nan.any())
        top = np.argmax(np.where(nan, -np.inf, v) if some else v, axis=1)  # no copy without NaN
        hit = np.zeros(v.shape, dtype=bool)
        hit[np.arange(len(v)), top] = True
        if some:
            hit &= ~nan
        out[:, cols] = hit
    return out


def _class_size(compute: pd.DataFrame, classes: Mapping[int, int] | None) -> np.ndarray:
    size = np.zeros(compute.shape[1], dtype=int)
    for cols in _members(compute, classes).values():
        size[cols] = len(cols)
    return size


def _members(compute: pd.DataFrame, classes: Mapping[int, int] | None) -> dict[object, list[int]]:
    members: dict[object, list[int]] = {}
    for j, col in enumerate(compute.columns):
        key = 0 if classes is None else classes.get(int(col))
        if key is not None:
            members.setdefault(key, []).append(j)
    return members
