"""Replay mode of the fault suite: a case as the event stream of a synchronous data-parallel job.

The job (:class:`Job`): rank ``r`` runs on host ``node{r // ranks_per_host}``; data-parallel
group ``dp<j>`` holds the ranks of local rank ``j`` on every host (each group crosses hosts, as on
a rail-optimized cluster), and a small all-reduce over ``world`` ends every step. Each step every
rank, from the same start:

1. rank 0 only, on save steps (every ``ckpt_every``): saves a checkpoint (``ckpt_ms`` +-10%; a
   :class:`CheckpointEvent` with path and bytes) before taking its batch: all wait for it;
2. waits ``data_ms x exp(data_sigma x N)`` for its batch, plus a loader hiccup of
   ``data_hiccup_ms`` on ``hiccup_frac`` of the (rank, step) pairs;
3. computes ``compute_ms x bias_r x (1 + noise x N + spike)``: ``bias_r`` is a fixed per-rank
   speed (``rank_spread``), ``spike`` a scheduler spike of ``spike_range`` on ``spike_frac`` of the
   (rank, step) pairs; the first ``warmup_steps`` take ``warmup_factor`` x; every ``eval_every``
   steps an eval pass adds ``eval_frac x compute_ms`` on every rank (balanced). ``cpu_wait_ns``
   stays 0: spikes are not assumed to show as run-queue delay (GC, page faults, clocks...);
4. all-reduces ``num_buckets`` buckets of ``bucket_bytes`` in its dp group (each starts when the
   group's last rank arrives and takes ``bucket_ms x (1 + noise x N)``, 2-3x on ``hiccup_frac``
   of them: congestion), then ``world_bytes`` over ``world``.

So a rank's collective wait is the slowest rank's busy time minus its own plus the transfers, and
every rank's step lasts as long as the slowest one's. Every ``profile_every`` steps each rank
takes a one-step profiler window: a :class:`ProfileWindow` and a :class:`KernelSummary` per
operator of :data:`KERNELS` (a share of the rank's training compute each, ``noise`` apart; an eval
pass adds calls of the forward operators; ``aten::linear`` wraps ``aten::addmm``) and the
``nccl:all_reduce`` wait.

Faults, sized by ``extra = case.extra_ms(job.base_step_ms)`` ms per step, from
``case.onset_step`` (from step 0 for ``structural``):

- ``node``: the culprit's compute +extra, spread over all its operators (a slow GPU slows every
  kernel);
- ``structural``: the job is laid out as 2 pipeline stages x ``n / 2`` data-parallel replicas
  (rank ``r`` is stage ``r // (n / 2)``, replica ``r % (n / 2)``: each rank announces its "pp"
  and "dp" process groups, :class:`~diag.schema.ProcessGroupInfo`) and every replica of the
  culprit's stage computes +extra from the first step (a stage with more layers);
- ``data``: the culprit's data wait +extra;
- ``kernel``: one operator (``case.kernel``) +extra on the culprit, in its profiles and so in its
  steps' compute;
- ``link``: the buckets of one dp group (``case.hosts``: its hosts) take +extra per step in all;
  compute stays balanced;
- ``checkpoint``: rank 0 saves every ``fault_ckpt_every`` steps; from the onset each save stalls
  ``fault_ckpt_every x extra`` (slow storage).

Noise comes from ``numpy.random.default_rng(case.seed)``, drawn in the same order whatever the
fault, so a case and the same case at severity 0 give identical events before the onset.
:func:`prepare` fills what a case leaves to the simulator (the slow kernel, the slow link's
hosts): judge findings against the prepared case.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from diag import schema
from diag.diagnose.triage import triage
from diag.findings import Finding
from diag.selftest.cases import Case
from diag.store.run_store import RunStore

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
MB = 1 << 20

#: operator -> (share of a rank's training compute, runs in the forward pass); the rest of the
#: compute is Python and launch overhead. aten::linear wraps aten::addmm (its time includes it).
KERNELS: tuple[tuple[str, float, bool], ...] = (
    ("aten::addmm", 0.30, True),
    ("aten::mm", 0.40, False),
    ("aten::relu", 0.04, True),
    ("aten::threshold_backward", 0.04, False),
    ("aten::mse_loss", 0.02, True),
    ("aten::mse_loss_backward", 0.02, False),
    ("aten::add_", 0.06, False),
)
WRAPPERS = {"aten::linear": ("aten::addmm", 0.01)}  # wrapper -> (child, its own share)
FORWARD_SHARE = sum(s for _, s, fwd in KERNELS if fwd) + sum(s for _, s in WRAPPERS.values())
CALLS_PER_STEP = 24  # calls of each operator in a training step
#: the kernels a kernel case slows, by seed.
SLOW_KERNELS = ("aten::addmm", "aten::mm")


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """The simulated job's nominal timings (ms) and noise (see the module docstring)."""

    compute_ms: float = 100.0
    data_ms: float = 5.0
    num_buckets: int = 2
    bucket_ms: float = 8.0
    bucket_bytes: int = 64 * MB
    world_ms: float = 2.0
    world_bytes: int = 4096
    noise: float = 0.03  # std of compute (and kernel, transfer) noise, as a fraction
    rank_spread: float = 0.01  # std of the fixed per-rank speed
    spike_frac: float = 0.02  # (rank, step) pairs with a scheduler spike
    spike_range: tuple[float, float] = (0.2, 0.6)  # its size, fraction of compute
    data_sigma: float = 0.2  # log-normal sigma of the data wait
    hiccup_frac: float = 0.01  # data waits and transfers with a hiccup
    data_hiccup_ms: tuple[float, float] = (10.0, 40.0)  # a loader hiccup's size
    comm_hiccup: tuple[float, float] = (2.0, 3.0)  # a congested transfer's factor
    warmup_steps: int = 3
    warmup_factor: float = 3.0
    ckpt_every: int = 20
    fault_ckpt_every: int = 10
    ckpt_ms: float = 5.0
    ckpt_bytes: int = 10**7
    eval_every: int = 25
    eval_frac: float = 0.6
    profile_every: int = 10

    @property
    def base_step_ms(self) -> float:
        """A clean step: data + compute + the transfers."""
        return self.data_ms + self.compute_ms + self.num_buckets * self.bucket_ms + self.world_ms


JOB = Job()


def host_of(rank: int, ranks_per_host: int) -> str:
    return f"node{rank // ranks_per_host}"


def dp_groups(world_size: int, ranks_per_host: int) -> dict[str, tuple[int, ...]]:
    """``dp<j>`` -> the ranks of local rank ``j`` on every host."""
    return {f"dp{j}": tuple(range(j, world_size, ranks_per_host)) for j in range(ranks_per_host)}


def slow_group(case: Case, ranks_per_host: int) -> str:
    """The dp group a link case slows: the first whose hosts are ``case.hosts`` (any when the
    case names none), starting from group ``seed % ranks_per_host``."""
    groups = list(dp_groups(case.world_size, ranks_per_host).items())
    k = case.seed % len(groups)
    for name, ranks in groups[k:] + groups[:k]:
        hosts = {host_of(r, ranks_per_host) for r in ranks}
        if not case.hosts or hosts == set(case.hosts):
            return name
    raise ValueError(f"no dp group joins exactly the hosts {case.hosts}")


def prepare(case: Case, *, ranks_per_host: int = 2) -> Case:
    """``case`` with what the simulator chooses filled in: a kernel case's ``kernel`` (by seed,
    from :data:`SLOW_KERNELS`) and a link case's ``hosts`` (those of the dp group it slows).
    Idempotent; judge the findings against the prepared case."""
    if case.world_size % ranks_per_host or case.world_size < 2:
        raise ValueError(f"{case.world_size} ranks do not fill hosts of {ranks_per_host}")
    if case.cause == "structural":
        dp = case.world_size // 2
        stage = (case.ranks[0] if case.ranks else 0) // dp
        return replace(case, ranks=tuple(range(stage * dp, (stage + 1) * dp)))
    if case.cause == "kernel" and case.kernel is None:
        return replace(case, kernel=SLOW_KERNELS[case.seed % len(SLOW_KERNELS)])
    if case.cause == "link":
        if case.world_size // ranks_per_host < 2:
            raise ValueError("a link case needs at least two hosts")
        ranks = dp_groups(case.world_size, ranks_per_host)[slow_group(case, ranks_per_host)]
        return replace(case, hosts=tuple(sorted({host_of(r, ranks_per_host) for r in ranks})))
    return case


@dataclass(frozen=True, slots=True)
class _Fault:
    """What the fault adds at one step (ms): per rank, and to one group's transfers."""

    compute: np.ndarray  # spread over all operators
    kernel: np.ndarray  # in case.kernel only (included in the step's compute too)
    data: np.ndarray
    ckpt: float  # rank 0's save stall
    link: float  # the slow group's extra transfer time this step, over its buckets


def _fault(case: Case, job: Job, step: int, save: bool) -> _Fault:
    n = case.world_size
    zero = np.zeros(n)
    onset = 0 if case.cause == "structural" else case.onset_step
    if case.cause == "clean" or onset is None or step < onset:
        return _Fault(zero, zero, zero, 0.0, 0.0)
    extra = case.extra_ms(job.base_step_ms)
    on = np.zeros(n)
    on[list(case.ranks)] = extra
    return _Fault(
        compute=on if case.cause in ("node", "structural") else zero,
        kernel=on if case.cause == "kernel" else zero,
        data=on if case.cause == "data" else zero,
        ckpt=job.fault_ckpt_every * extra if case.cause == "checkpoint" and save else 0.0,
        link=extra if case.cause == "link" else 0.0,
    )


class _Sources:
    """One numbered source per rank, as the hooks number their events."""

    def __init__(self, case: Case, ranks_per_host: int) -> None:
        self.rph = ranks_per_host
        self.job_id = case.name.replace("/", "-").replace("%", "pct")
        self._seq = [itertools.count() for _ in range(case.world_size)]

    def env(self, rank: int, ts_ns: int, step: int = -1) -> dict[str, Any]:
        host = host_of(rank, self.rph)
        return {
            "ts_ns": int(ts_ns),
            "host": host,
            "rank": rank,
            "local_rank": rank % self.rph,
            "job_id": self.job_id,
            "source": f"{host}/rank{rank}/{1000 + rank}",
            "seq": next(self._seq[rank]),
            "step": step,
        }


@dataclass(frozen=True, slots=True)
class _Noise:
    """One step's random draws: all of them, used or not, so the stream never depends on the
    fault (see the module docstring)."""

    compute: np.ndarray  # per rank: N(0, 1)
    spike: np.ndarray  # per rank: a scheduler spike's size, or 0
    data: np.ndarray  # per rank: N(0, 1)
    data_hiccup: np.ndarray  # per rank: ms, or 0
    evals: np.ndarray  # per rank: N(0, 1)
    transfer: np.ndarray  # per (group, bucket): the factor on bucket_ms
    world: float  # the world all-reduce's factor
    ckpt: float  # N(0, 1)
    kernels: np.ndarray  # per (rank, operator): N(0, 1)

    @classmethod
    def draw(cls, rng: np.random.Generator, n: int, num_groups: int, job: Job) -> _Noise:
        shape = (num_groups, job.num_buckets)
        return cls(
            compute=rng.standard_normal(n),
            spike=(rng.random(n) < job.spike_frac) * rng.uniform(*job.spike_range, n),
            data=rng.standard_normal(n),
            data_hiccup=(rng.random(n) < job.hiccup_frac) * rng.uniform(*job.data_hiccup_ms, n),
            evals=rng.standard_normal(n),
            transfer=(1 + job.noise * rng.standard_normal(shape))
            * np.where(
                rng.random(shape) < job.hiccup_frac, rng.uniform(*job.comm_hiccup, shape), 1
            ),
            world=float(1 + job.noise * rng.standard_normal()),
            ckpt=float(rng.standard_normal()),
            kernels=rng.standard_normal((n, len(KERNELS))),
        )


def simulate(case: Case, *, ranks_per_host: int = 2, job: Job = JOB) -> list[schema.Event]:
    """The events of ``case``'s run (prepared first by :func:`prepare`), in time order per rank."""
    case = prepare(case, ranks_per_host=ranks_per_host)
    n, rng = case.world_size, np.random.default_rng(case.seed)
    src = _Sources(case, ranks_per_host)
    groups = dp_groups(n, ranks_per_host)
    slow = slow_group(case, ranks_per_host) if case.cause == "link" else None
    bias = 1.0 + job.rank_spread * rng.standard_normal(n)
    out: list[schema.Event] = [_rank_info(src, r, n, ranks_per_host) for r in range(n)]
    if case.cause == "structural":
        out += [ev for r in range(n) for ev in _pipeline_groups(src, r, n)]
    every = job.fault_ckpt_every if case.cause == "checkpoint" else job.ckpt_every
    t = T0
    for step in range(case.steps):
        z = _Noise.draw(rng, n, len(groups), job)
        save = step > 0 and step % every == 0
        fault = _fault(case, job, step, save)
        train = job.compute_ms * bias * (1 + job.noise * z.compute + z.spike)
        if step < job.warmup_steps:
            train = train * job.warmup_factor
        train = train + fault.compute  # spread over every operator
        evals = np.zeros(n)
        if step > 0 and step % job.eval_every == 0:
            evals = job.eval_frac * job.compute_ms * (1 + job.noise * z.evals)
        data = job.data_ms * np.exp(job.data_sigma * z.data) + z.data_hiccup + fault.data
        ckpt = np.zeros(n)
        if save:
            ckpt[0] = job.ckpt_ms * (1 + 0.1 * z.ckpt) + fault.ckpt
        arrive = ckpt + data + train + evals + fault.kernel  # ms after the step start
        transfer = job.bucket_ms * z.transfer
        if slow is not None:
            transfer[list(groups).index(slow)] += fault.link / job.num_buckets
        end, colls = _all_reduces(step, arrive, groups, transfer, job.world_ms * z.world, job)
        for r in range(n):
            out.append(
                _step_event(src, r, step, t, end, arrive[r], data[r], ckpt[r], evals[r], job)
            )
            if ckpt[r]:
                out.append(_ckpt_event(src, r, step, t, ckpt[r], job))
        out.extend(_coll_event(src, step, t, c) for c in colls)
        if step > 0 and step % job.profile_every == 0:
            for r in range(n):
                work = _Work(
                    train_ms=float(train[r]),
                    eval_ms=float(evals[r]),
                    wait_ms=end - float(arrive[r]),
                    slow_kernel=case.kernel or "",
                    slow_ms=float(fault.kernel[r]),
                )
                out.extend(_profile(src, r, step, t, end, work, z.kernels[r], job))
        t += int(end * MS)
    return out


class _Coll(NamedTuple):
    """One rank's part in one all-reduce; times in ms after the step's start."""

    rank: int
    group: str
    size: int
    seq: int
    enqueue_ms: float
    ms: float
    num_bytes: int


def _all_reduces(
    step: int,
    arrive: np.ndarray,
    groups: dict[str, tuple[int, ...]],
    transfer: np.ndarray,
    world_ms: float,
    job: Job,
) -> tuple[float, list[_Coll]]:
    """The step's collectives (times in ms after its start) and its end: each dp group's buckets
    in turn, each starting when the group's last rank is there, then the world all-reduce."""
    n = len(arrive)
    leave = np.zeros(n)
    colls: list[_Coll] = []
    for gi, (g, ranks) in enumerate(groups.items()):
        at = float(max(arrive[r] for r in ranks))
        enq = {r: float(arrive[r]) for r in ranks}
        for b in range(job.num_buckets):
            done = at + float(transfer[gi, b])
            seq = step * job.num_buckets + b  # the group's collective sequence number
            for r in ranks:
                colls.append(_Coll(r, g, len(ranks), seq, enq[r], done - enq[r], job.bucket_bytes))
                enq[r] = done
            at = done
        leave[list(ranks)] = at
    end = float(leave.max()) + world_ms
    world = job.world_bytes
    colls += [_Coll(r, "world", n, step, leave[r], end - leave[r], world) for r in range(n)]
    return end, colls


def _pipeline_groups(src: _Sources, rank: int, n: int) -> list[schema.ProcessGroupInfo]:
    """Rank ``rank``'s "pp" group (its replica's stages) and "dp" group (its stage's replicas)
    in a 2-stage layout, as its hook would announce them."""
    dp = n // 2
    stage, replica = divmod(rank, dp)
    pp_ranks = [replica, dp + replica]
    dp_ranks = list(range(stage * dp, (stage + 1) * dp))
    return [
        schema.ProcessGroupInfo(**src.env(rank, T0), pg_name=name, pg_desc=desc,
                                ranks_json=json.dumps(ranks), size=len(ranks), backend="nccl")
        for name, desc, ranks in ((f"{1 + replica}", "pp", pp_ranks),
                                  (f"{1 + dp + stage}", "dp", dp_ranks))
    ]  # fmt: skip


def _rank_info(src: _Sources, rank: int, n: int, rph: int) -> schema.RankInfo:
    return schema.RankInfo(
        **src.env(rank, T0),
        pid=1000 + rank,
        world_size=n,
        local_world_size=rph,
        node_rank=rank // rph,
        backend="nccl",
        device=f"cuda:{rank % rph}",
    )


def _step_event(
    src: _Sources, r: int, step: int, t: int, end: float, arrive: float, data: float,
    ckpt: float, evals: float, job: Job,
) -> schema.StepEvent:  # fmt: skip
    """The phases partition the step; the eval pass is ``other`` (outside the training phases)
    but, like all but the waits, counts as compute."""
    dur, wait = int(end * MS), int((end - arrive) * MS)
    data_ns, ckpt_ns, other = int(data * MS), int(ckpt * MS), int(evals * MS)
    compute = dur - wait - data_ns - ckpt_ns
    train = compute - other
    fwd, opt = int(0.3 * train), int(0.1 * train)
    return schema.StepEvent(
        **src.env(r, t + dur, step),
        start_ns=t,
        end_ns=t + dur,
        duration_ns=dur,
        data_wait_ns=data_ns,
        forward_ns=fwd,
        backward_ns=train - fwd - opt + wait,  # the gradient all-reduces wait inside backward()
        optimizer_ns=opt,
        checkpoint_ns=ckpt_ns,
        other_ns=other,
        compute_ns=compute,
        collective_wait_ns=wait,
        loss=1.0 / (1.0 + 0.01 * step),
        num_backward=1,
        num_collectives=job.num_buckets + 1,
    )


def _ckpt_event(
    src: _Sources, r: int, step: int, t: int, ms: float, job: Job
) -> schema.CheckpointEvent:
    return schema.CheckpointEvent(
        **src.env(r, t + int(ms * MS), step),
        op="save",
        api="torch.save",
        path=f"/checkpoints/step{step:06d}.pt",
        num_bytes=job.ckpt_bytes,
        start_ns=t,
        duration_ns=int(ms * MS),
    )


def _coll_event(src: _Sources, step: int, t: int, c: _Coll) -> schema.CollectiveEvent:
    enq, dur = t + int(c.enqueue_ms * MS), int(c.ms * MS)
    return schema.CollectiveEvent(
        **src.env(c.rank, enq + dur, step),
        op="allreduce",
        pg_name=c.group,
        pg_desc=c.group,
        pg_size=c.size,
        seq_id=c.seq,
        num_bytes=c.num_bytes,
        dtype="Float",
        enqueue_ns=enq,
        start_ns=enq,
        end_ns=enq + dur,
        duration_ns=dur,
        state="completed",
    )


@dataclass(frozen=True, slots=True)
class _Work:
    """What one rank did in a profiled step (ms): training ops (with a node fault's extra), the
    eval pass's forward ops, the collective wait, and a slow kernel's extra time."""

    train_ms: float
    eval_ms: float
    wait_ms: float
    slow_kernel: str
    slow_ms: float


def _profile(
    src: _Sources, r: int, step: int, t: int, end: float, w: _Work, z: np.ndarray, job: Job
) -> Iterator[schema.Event]:
    """Rank ``r``'s one-step window at ``step``: the window and one summary per operator. An eval
    pass runs the forward operators again: more calls, each as long as in training."""
    wid, dur = f"p{step}", int(end * MS)
    extra_calls = round(CALLS_PER_STEP * w.eval_ms / (FORWARD_SHARE * job.compute_ms))
    times: dict[str, tuple[float, int]] = {}
    for i, (name, share, forward) in enumerate(KERNELS):
        ms = w.train_ms * share * (1 + job.noise * z[i])
        ms += share / FORWARD_SHARE * w.eval_ms if forward else 0.0
        ms += w.slow_ms if name == w.slow_kernel else 0.0
        times[name] = (ms, CALLS_PER_STEP + (extra_calls if forward else 0))
    for wrapper, (child, share) in WRAPPERS.items():
        own = share * (w.train_ms + w.eval_ms / FORWARD_SHARE)
        times[wrapper] = (times[child][0] + own, times[child][1])
    times["nccl:all_reduce"] = (w.wait_ms, job.num_buckets + 1)
    yield schema.ProfileWindow(
        **src.env(r, t + dur, step),
        window_id=wid,
        trigger="periodic",
        start_ns=t,
        end_ns=t + dur,
        duration_ns=dur,
        device=f"cuda:{r % src.rph}",
        num_ops=len(times),
    )
    for name, (ms, calls) in times.items():
        total = int(ms * MS)
        yield schema.KernelSummary(
            **src.env(r, t + dur, step),
            window_id=wid,
            name=name,
            category="collective" if name.startswith("nccl") else "cpu_op",
            num_calls=calls,
            total_ns=total,
            median_ns=total // calls,
            max_ns=2 * total // calls,
            step_share=ms / end if end > 0 else 0.0,
        )


def run_simulated(
    case: Case,
    run_dir: Path,
    *,
    ranks_per_host: int = 2,
    job: Job = JOB,
    shipped: Callable[[list[schema.Event]], list[schema.Event]] | None = None,
) -> list[Finding]:
    """Simulate ``case`` into a new :class:`RunStore` at ``run_dir`` and triage it: the findings,
    ranked as ``diag triage`` lists them. Judge them against ``prepare(case)``. ``shipped``:
    what reaches the store of the events (e.g. collectives summed as a node daemon does)."""
    events = simulate(case, ranks_per_host=ranks_per_host, job=job)
    store = RunStore.create(run_dir)
    store.append(events if shipped is None else shipped(events))
    store.flush()
    return list(triage(RunStore.open(run_dir)).findings)
