"""Generated op tables: PP x DP x TP training jobs as timing tables, with a fault or none.

:func:`generate` returns a timing table (the columns :mod:`diag.diagnose.timing_table` reads,
with ``host``, ``dp_rank``, ``pp_rank``, ``tp_rank``, ``microbatch``) of a seeded synthetic job
described by a :class:`Spec`; :func:`expected` says what ``diag triage`` must answer for it, and
:func:`judge` scores findings against that. Used by the tests in ``tests/unit/selftest/`` and by
``bench/accuracy.py --mode tables``.

The job. ``pp`` stages x ``dp`` replicas x ``tp`` tensor-parallel positions; ranks are numbered
``order="megatron"`` (TP fastest, then DP, then PP: rank = pp x dp x tp + dp x tp + tp) or
``"replica"`` (TP, then PP, then DP: one replica's pipeline on adjacent ranks), ``ranks_per_host``
to a host. Each step, from a common start:

1. every rank loads its batch (``data_ms``);
2. each replica runs ``microbatches`` through its pipeline on a 1F1B schedule (``pp - s - 1``
   warm-up forwards on stage ``s``, then one forward one backward, then the cool-down
   backwards): a forward of microbatch ``m`` on stage ``s`` starts when stage ``s - 1``'s forward
   of ``m`` has ended and its activations arrived (``p2p_ms``), a backward when stage
   ``s + 1``'s backward of ``m`` has. A forward takes ``fwd_ms x stage weight x tokens(m) x
   noise``, a backward twice that; the first stage's weight is ``1 + embed_extra`` (the
   embedding), the last's ``1 + loss_extra`` (the LM head and the loss), the others 1. With
   ``tp > 1`` the TP ranks of a stage and replica finish each forward and backward together:
   each rank's own compute is a ``forward``/``backward`` span, the wait for the slowest TP peer
   a ``collective`` span (``all_reduce_tp``). Time a rank spends waiting for its pipeline
   neighbours is a ``collective`` span (``recv_forward`` / ``recv_backward``) when
   ``p2p_spans``, else a gap no span covers (both are what tools write);
3. the replicas of each (stage, TP position) all-reduce their gradients (``collective``
   ``all_reduce_dp``: each waits for the last one, then ``dp_ms``), then every rank joins a small
   global all-reduce (the gradient norm, ``collective`` ``all_reduce_world``);
4. the optimizer step (``opt_ms x stage weight``).

Noise: each span ``x exp(noise x N)``, a fixed per-rank speed ``x exp(rank_spread x N)``, and a
scheduler spike (+20-60% of the span) on ``spike_frac`` of the compute spans. ``tokens(m)`` is 1,
or in the ``moving`` scenario ``exp(skew x N) / exp(skew^2 / 2)`` per replica, step and
microbatch (uneven sequence lengths: every stage and TP rank of a replica sees the same
microbatch).

Scenarios (:data:`SCENARIOS`), each culprit chosen by the seed (never rank 0), compute made
``1 + extra`` x slower:

- ``clean``: nothing (the embedding and loss stages are still a little heavier);
- ``stage``: every rank of one stage (``stage`` or, if None, the last), from step 0: structural;
- ``slow_rank``: one rank from ``onset``: node; ``slow_start``: one rank from step 0: node
  (onset None: its data-parallel peers do the same work);
- ``tp_group``: the TP ranks of one stage of one replica, from ``onset``: node, one finding;
- ``host``: every rank of one host, from ``onset``: node, one finding;
- ``replica``: every rank of one replica (all stages), from ``onset``: node, one finding;
- ``moving``: uneven sequence lengths (``skew``): data, and no rank's node or structural finding.

Held-out discipline (written before tuning anything; ``bench/accuracy.py --mode tables`` reports
both sets): the detectors may be tuned on :data:`TUNING` only: 64 ranks, PP4 x DP16 x TP1,
Megatron order, p2p spans, 8 microbatches, extra 0.3 (skew 0.4), seeds 0-4. :data:`HELD_OUT` is
never looked at while tuning: 256 ranks (PP4 x DP8 x TP8, PP8 x DP32 x TP1), 1,024 ranks (PP8 x
DP16 x TP8, 4 microbatches), 64 ranks PP2 x DP8 x TP4 in replica order, tables without p2p spans,
a middle stage made heavy, extra 0.2 and 0.5 (skew 0.3 and 0.5), seeds 100-104.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from diag.findings import Finding

MS = 1_000_000
T0 = 1_700_000_000_000_000_000

SCENARIOS = ("clean", "stage", "slow_rank", "slow_start", "tp_group", "host", "replica", "moving")


@dataclass(frozen=True, slots=True, kw_only=True)
class Spec:
    """One generated job and its fault (see the module docstring)."""

    pp: int = 4
    dp: int = 16
    tp: int = 1
    microbatches: int = 8
    steps: int = 60
    seed: int = 0
    scenario: str = "clean"
    extra: float = 0.3  # the culprit's compute is 1 + extra times slower
    skew: float = 0.4  # moving: log-normal sigma of a microbatch's tokens
    onset: int = 30
    stage: int | None = None  # stage scenario: the heavy stage (None: the last)
    order: str = "megatron"
    ranks_per_host: int = 8
    p2p_spans: bool = True
    fwd_ms: float = 4.0
    data_ms: float = 2.0
    p2p_ms: float = 0.2
    dp_ms: float = 3.0
    world_ms: float = 0.5
    opt_ms: float = 3.0
    embed_extra: float = 0.04
    loss_extra: float = 0.07
    noise: float = 0.03
    rank_spread: float = 0.01
    spike_frac: float = 0.005

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.scenario!r}")
        if self.order not in ("megatron", "replica"):
            raise ValueError(f"unknown rank order {self.order!r}")

    @property
    def world(self) -> int:
        return self.pp * self.dp * self.tp

    @property
    def name(self) -> str:
        shape = f"pp{self.pp}xdp{self.dp}xtp{self.tp}"
        more = "" if self.p2p_spans else "/gaps"
        more += "" if self.order == "megatron" else f"/{self.order}"
        size = self.skew if self.scenario == "moving" else self.extra
        return f"{self.scenario}/{shape}{more}/x{size:g}/seed{self.seed}"

    def rank(self, pp: int, dp: int, tp: int) -> int:
        if self.order == "megatron":
            return (pp * self.dp + dp) * self.tp + tp
        return (dp * self.pp + pp) * self.tp + tp

    def coords(self) -> np.ndarray:
        """rank -> (pp, dp, tp), an array of shape (world, 3)."""
        out = np.zeros((self.world, 3), dtype=int)
        for p in range(self.pp):
            for d in range(self.dp):
                for t in range(self.tp):
                    out[self.rank(p, d, t)] = (p, d, t)
        return out

    def host(self, rank: int) -> str:
        return f"node{rank // self.ranks_per_host:04d}"


@dataclass(frozen=True, slots=True)
class Expected:
    """What triage must say: the cause and the culprit ranks of the top finding (cause None:
    a clean job, no finding at warning or above); ``onset`` None: from the start."""

    cause: str | None
    ranks: tuple[int, ...]
    onset: int | None


def culprits(spec: Spec) -> tuple[int, ...]:
    """The ranks the scenario slows down (the heavy stage's, for ``stage``); () for clean and
    moving."""
    rng = np.random.default_rng([spec.seed, 7])  # its own stream: the noise stays the same
    coords = spec.coords()
    pick = lambda n: int(rng.integers(1, n)) if n > 1 else 0  # noqa: E731 (never index 0)
    s = spec.scenario
    if s == "stage":
        stage = spec.pp - 1 if spec.stage is None else spec.stage
        return tuple(int(r) for r in np.flatnonzero(coords[:, 0] == stage))
    if s in ("slow_rank", "slow_start"):
        return (pick(spec.world),)
    if s == "tp_group":
        p, d = pick(spec.pp), pick(spec.dp)
        return tuple(spec.rank(p, d, t) for t in range(spec.tp))
    if s == "host":
        num_hosts = -(-spec.world // spec.ranks_per_host)
        host = spec.host(pick(num_hosts) * spec.ranks_per_host)
        return tuple(r for r in range(spec.world) if spec.host(r) == host)
    if s == "replica":
        d = pick(spec.dp)
        return tuple(sorted(int(r) for r in np.flatnonzero(coords[:, 1] == d)))
    return ()


def expected(spec: Spec) -> Expected:
    """The diagnosis ``spec`` must produce."""
    s = spec.scenario
    if s == "clean":
        return Expected(None, (), None)
    if s == "moving":
        return Expected("data", (), None)
    if s == "stage":
        return Expected("structural", culprits(spec), None)
    onset = None if s == "slow_start" else spec.onset
    return Expected("node", culprits(spec), onset)


def generate(spec: Spec) -> pd.DataFrame:
    """The timing table of ``spec``'s job (one row per span)."""
    return _Job(spec).table()


class _Job:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.coords = spec.coords()
        weight = np.ones(spec.pp)
        weight[0] += spec.embed_extra
        weight[-1] += spec.loss_extra
        self.weight = weight
        self.speed = np.exp(spec.rank_spread * self.rng.standard_normal(spec.world))
        self.culprits = np.array(culprits(spec), dtype=int)
        # members[d, p] = the TP ranks of stage p of replica d
        self.members = np.array(
            [
                [[spec.rank(p, d, t) for t in range(spec.tp)] for p in range(spec.pp)]
                for d in range(spec.dp)
            ]
        )
        self.chunks: list[tuple[np.ndarray, int, str, str, int, np.ndarray, np.ndarray]] = []

    def table(self) -> pd.DataFrame:
        spec = self.spec
        now = 0.0
        for step in range(spec.steps):
            now = self._step(step, now) + 0.5
        keep = [c for c in self.chunks if len(c[0])]
        n = [len(c[0]) for c in keep]
        # Times are ms from the first step, as floats; ns are rounded at both ends of a span so
        # that a span that starts where another ended starts at the very same nanosecond.
        t = np.concatenate([c[5] for c in keep])
        ms = np.concatenate([c[6] for c in keep])
        start = T0 + np.round(t * MS).astype("int64")
        end = T0 + np.round((t + ms) * MS).astype("int64")
        df = pd.DataFrame(
            {
                "rank": np.concatenate([c[0] for c in keep]),
                "step": np.repeat([c[1] for c in keep], n),
                "phase": np.repeat([c[2] for c in keep], n),
                "op": np.repeat([c[3] for c in keep], n),
                "microbatch": np.repeat([c[4] for c in keep], n),
                "start_ns": start,
                "duration_ns": end - start,
            }
        )
        df = df.sort_values(["step", "rank", "start_ns"], kind="stable").reset_index(drop=True)
        coords = self.coords[df["rank"].to_numpy()]
        df["pp_rank"], df["dp_rank"], df["tp_rank"] = coords[:, 0], coords[:, 1], coords[:, 2]
        hosts = np.array([spec.host(r) for r in range(spec.world)])
        df["host"] = hosts[df["rank"].to_numpy()]
        return df

    def _spans(
        self, ranks: np.ndarray, step: int, phase: str, op: str, mb: int, t: Any, ms: Any
    ) -> None:
        shape = np.shape(ranks)
        ranks = np.asarray(ranks).ravel()
        t = np.broadcast_to(np.asarray(t, dtype=float), shape).ravel()
        ms = np.broadcast_to(np.asarray(ms, dtype=float), shape).ravel()
        keep = ms > 0
        self.chunks.append((ranks[keep], step, phase, op, mb, t[keep], ms[keep]))

    def _factor(self, step: int) -> np.ndarray:
        """Per rank, the compute slow-down this step (1: none)."""
        spec = self.spec
        f = np.ones(spec.world)
        if len(self.culprits) and spec.scenario != "moving":
            from_start = spec.scenario in ("stage", "slow_start")
            if from_start or step >= spec.onset:
                f[self.culprits] *= 1 + spec.extra
        return f

    def _noisy(self, shape: tuple[int, ...]) -> np.ndarray:
        spec = self.spec
        x = np.exp(spec.noise * self.rng.standard_normal(shape))
        spikes = self.rng.random(shape) < spec.spike_frac
        return x + spikes * self.rng.uniform(0.2, 0.6, shape)

    def _step(self, step: int, t0: float) -> float:
        spec = self.spec
        D, T, M = spec.dp, spec.tp, spec.microbatches
        everyone = np.arange(spec.world)
        factor = self._factor(step) * self.speed
        tokens = np.ones((D, M))
        if spec.scenario == "moving":
            z = self.rng.standard_normal((D, M))
            tokens = np.exp(spec.skew * z - spec.skew**2 / 2)
        p_of, d_of = self.coords[:, 0], self.coords[:, 1]
        base = spec.fwd_ms * self.weight[p_of][:, None] * tokens[d_of] * factor[:, None]
        fwd = base * self._noisy((spec.world, M))
        bwd = 2 * base * self._noisy((spec.world, M))
        data = spec.data_ms * self._noisy((spec.world,))
        self._spans(everyone, step, "data", "next(loader)", -1, t0, data)
        done = self._pipeline(step, fwd, bwd, t0 + data.max())
        # Gradient all-reduce over each (stage, TP position)'s replicas, then the global one.
        end_dp = np.zeros(spec.world)
        for p in range(spec.pp):
            for tt in range(T):
                cls = self.members[:, p, tt]
                finish = done[cls].max() + (spec.dp_ms if D > 1 else 0.0)
                self._spans(
                    cls, step, "collective", "all_reduce_dp", -1, done[cls], finish - done[cls]
                )
                end_dp[cls] = finish
        finish = end_dp.max() + spec.world_ms
        opt = spec.opt_ms * self.weight[p_of] * factor * self._noisy((spec.world,))
        self._spans(everyone, step, "collective", "all_reduce_world", -1, end_dp, finish - end_dp)
        self._spans(everyone, step, "optimizer", "optimizer.step", -1, finish, opt)
        return float(finish + opt.max())

    def _pipeline(self, step: int, fwd: np.ndarray, bwd: np.ndarray, start: float) -> np.ndarray:
        """Every replica's 1F1B schedule at once (the same order of operations on each); per
        rank, when its last backward ended."""
        spec = self.spec
        P, M, D = spec.pp, spec.microbatches, spec.dp
        orders = []
        for p in range(P):
            warm = min(P - p - 1, M)
            ops = [("F", m) for m in range(warm)]
            for m in range(warm, M):
                ops += [("F", m), ("B", m - warm)]
            ops += [("B", m) for m in range(M - warm, M)]
            orders.append(ops)
        f_end = np.full((P, M, D), np.nan)
        b_end = np.full((P, M, D), np.nan)
        free = np.full((P, D), start)
        pos = [0] * P
        remaining = sum(len(o) for o in orders)
        done = np.zeros(spec.world)
        while remaining:
            progressed = False
            for p in range(P):
                while pos[p] < len(orders[p]):
                    kind, m = orders[p][pos[p]]
                    if kind == "F":
                        dep = np.full(D, start) if p == 0 else f_end[p - 1, m] + spec.p2p_ms
                    else:
                        dep = f_end[p, m] if p == P - 1 else b_end[p + 1, m] + spec.p2p_ms
                    if np.isnan(dep).any():
                        break
                    begin = np.maximum(free[p], dep)
                    ranks = self.members[:, p, :]  # (D, T)
                    own = (fwd if kind == "F" else bwd)[ranks, m]
                    end = begin + own.max(axis=1)
                    phase = "forward" if kind == "F" else "backward"
                    if spec.p2p_spans and not (kind == "F" and p == 0):
                        idle = (begin - free[p])[:, None]
                        self._spans(
                            ranks,
                            step,
                            "collective",
                            f"recv_{phase}",
                            m,
                            free[p][:, None],
                            np.broadcast_to(idle, ranks.shape),
                        )
                    self._spans(ranks, step, phase, f"model.{phase}", m, begin[:, None], own)
                    if spec.tp > 1:
                        self._spans(
                            ranks,
                            step,
                            "collective",
                            "all_reduce_tp",
                            m,
                            begin[:, None] + own,
                            end[:, None] - begin[:, None] - own,
                        )
                    (f_end if kind == "F" else b_end)[p, m] = end
                    free[p] = end
                    pos[p] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:
                raise AssertionError("1F1B schedule deadlocked")  # a bug in the schedule
        for p in range(P):
            done[self.members[:, p, :]] = free[p][:, None]
        return done


# -- scoring ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """How triage fared on one table: the top finding's culprit, cause and exact culprit set
    right (``culprit_set`` None where the scenario has no set: clean, moving), and the
    warning-or-above findings on a clean table."""

    spec: Spec
    culprit: bool
    cause: bool
    culprit_set: bool | None
    warnings: int
    top: str


def judge(spec: Spec, findings: list[Finding]) -> Verdict:
    """Score ranked ``findings`` against :func:`expected`.

    - clean: right when no finding is at warning or above;
    - moving: a ``data-moving`` finding (at whatever severity its measured cost earns: a small
      skew costs under 10% of the step, ``info``), no node or structural finding at warning or
      above, and the top finding at warning or above, if any, is ``data``;
    - the others, judged on the top finding (the top one at warning or above, else the top
      one): ``culprit`` = it names culprit ranks only, ``culprit_set`` = exactly the culprit
      set, ``cause`` = the expected cause."""
    exp = expected(spec)
    loud = [f for f in findings if f.severity != "info"]
    top = loud[0] if loud else (findings[0] if findings else None)
    line = (
        "no finding"
        if top is None
        else (
            f"{top.id} {top.cause} {top.severity} ranks={_short(top.ranks)} onset={top.onset_step}"
        )
    )
    if exp.cause is None:
        ok = not loud
        return Verdict(spec, ok, ok, None, len(loud), line)
    if exp.cause == "data":
        blamed = [f for f in loud if f.cause in ("node", "structural")]
        moving = [f for f in findings if f.id == "data-moving"]
        ok = bool(moving) and not blamed and (not loud or loud[0].cause == "data")
        return Verdict(spec, ok, ok, None, len(loud), line)
    if top is None:
        return Verdict(spec, False, False, False, 0, line)
    named, want = set(top.ranks), set(exp.ranks)
    culprit = bool(named) and named <= want
    return Verdict(spec, culprit, top.cause == exp.cause, named == want, len(loud), line)


def _short(ranks: tuple[int, ...]) -> str:
    return str(list(ranks)) if len(ranks) <= 6 else f"[{ranks[0]}..{ranks[-1]}] ({len(ranks)})"


def specs(which: str) -> list[Spec]:
    """The tuning set (``"tuning"``) or the held-out set (``"held-out"``): every scenario on
    each of the set's layouts and seeds (see the module docstring)."""
    extras: tuple[float, ...]
    skews: tuple[float, ...]
    if which == "tuning":
        bases = [Spec(pp=4, dp=16, tp=1)]
        seeds, extras, skews = range(5), (0.3,), (0.4,)
    elif which == "held-out":
        bases = [
            Spec(pp=4, dp=8, tp=8, microbatches=8),
            Spec(pp=8, dp=32, tp=1, microbatches=8),
            Spec(pp=8, dp=16, tp=8, microbatches=4, steps=50),
            Spec(pp=2, dp=8, tp=4, order="replica", ranks_per_host=4),
            Spec(pp=4, dp=16, tp=1, p2p_spans=False),
        ]
        seeds, extras, skews = range(100, 105), (0.2, 0.5), (0.3, 0.5)
    else:
        raise ValueError(f"no spec set {which!r} (tuning, held-out)")
    out = []
    for base in bases:
        for seed in seeds:
            for scenario in SCENARIOS:
                sizes = skews if scenario == "moving" else extras
                if scenario == "clean":
                    sizes = sizes[:1]
                for size in sizes:
                    spec = replace(base, seed=seed, scenario=scenario)
                    spec = (
                        replace(spec, skew=size)
                        if scenario == "moving"
                        else replace(spec, extra=size)
                    )
                    if which == "held-out" and scenario == "stage" and seed % 2:
                        spec = replace(spec, stage=1)  # a middle stage made heavy
                    out.append(spec)
    return out
