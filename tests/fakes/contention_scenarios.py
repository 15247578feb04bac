"""Synthetic runs with CPU contention: run-queue delay in the steps, the daemon's samples.

Synchronous data-parallel steps as in :mod:`tests.fakes.scenarios`: every rank computes
``compute_ms``, waits for a CPU ``cpu_wait`` ms (bursty: each step a rank waits ``burst_ms`` with
probability ``burst_p``, else ~0), then meets its peers; each rank's collective wait is the
slowest rank's busy time minus its own, plus ``comm_ms``. From ``onset`` (to ``until``, the end
by default) the ``contended`` ranks wait ``extra_ms`` more per step on average (a foreign process
on their CPU: itself bursty, ``extra_p`` of the steps); ``shared_ms`` adds the same delay to every
rank (the job oversubscribing its own host). The daemon samples the host every second: a
``HostSample``, a ``ProcSample`` per rank (``last_cpu`` = ``cpus[rank]``; -1: not pinned, CPU 0
and 1 in turn) and, while the hog
runs, a ``HostProcess`` for it (pid ``HOG_PID``, 95% of a core on ``hog_cpu``), plus a
background process at 20% on CPU 0 throughout. ``hog_seen``: the hog is reported while it runs
even with no ``contended`` rank (with ``shared_ms``: a foreign process slowing the whole host).
``limited``: ranks that wait ``limited_ms`` longer every step from ``limited_from`` with no
process to show for it (a CPU quota; with ``quota_seen`` the daemon reads it from their
cgroups: throttled time and a limit in their samples). ``heavier``: ranks that compute
``heavier_x`` x longer from the onset on a host the job oversubscribes, so that they wait for a
CPU that much longer too (a slower kernel, no competitor); ``calmer_x``: the other ranks' share
of their delay from the onset (their steps grew around the heavier rank's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diag import schema
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source

HOG_PID = 4711
HOG_CMD = "python3 -c while True: pass"
S = 1_000_000_000


@dataclass(frozen=True, kw_only=True)
class ContentionRun:
    """One synthetic run (see the module docstring). Rank ``r`` is on host ``hosts[r]``."""

    hosts: tuple[str, ...] = ("vm", "vm", "vm", "vm")
    cpus: tuple[int, ...] = (0, 0, 1, 0)
    steps: int = 120
    seed: int = 0
    compute_ms: float = 40.0
    comm_ms: float = 10.0
    burst_ms: float = 8.0
    burst_p: float = 0.3
    contended: tuple[int, ...] = ()
    onset: int = 50
    until: int | None = None
    extra_ms: float = 12.0
    extra_p: float = 0.8
    shared_ms: float = 0.0
    hog_cpu: int = 1
    hog_seen: bool = False  # the hog's HostProcess while it runs even with no contended rank
    hog_reported: bool = True  # False: no HostProcess for it (the delay is the job's own)
    mild: tuple[int, ...] = ()  # ranks that wait ``mild_ms`` more (every step) while it runs
    mild_ms: float = 0.0
    daemon_every_s: float = 1.0
    early: tuple[int, int] = (0, 0)  # steps [a, b) the contended ranks wait ``early_ms`` more
    early_ms: float = 0.0
    heavier: tuple[int, ...] = ()  # ranks computing ``heavier_x`` x longer from the onset ...
    heavier_x: float = 1.0  # ... and so runnable, and waiting for a CPU, that much longer
    #: from the onset, the other ranks wait this share of what they did (their job's steps grew
    #: around the heavier rank: they sleep in the collectives, the host is less busy)
    calmer_x: float = 1.0
    #: the heavier ranks' run-queue delay grows this many times instead of ``heavier_x`` (a rank
    #: that computes without a break waits more per millisecond than in short bursts)
    heavier_wait_x: float | None = None
    #: the heavier ranks' process CPU share from the onset (the others' stays 50 %)
    heavier_cpu_pct: float = 50.0
    limited: tuple[int, ...] = ()  # ranks that wait ``limited_ms`` more every step from ...
    limited_from: int = 0  # ... this step: a CPU limit, no process to see
    limited_ms: float = 0.0
    #: the daemon reads the ranks' cgroup CPU quota (schema 1.21): a ``limited`` rank's samples
    #: carry its delay as throttled time and a limit of a quarter core, the others none
    quota_seen: bool = False
    #: steps in which every rank waits ``host_burst_ms`` more (an evaluation or a checkpoint
    #: that makes the whole host busy for a step or two)
    host_bursts: tuple[int, ...] = ()
    host_burst_ms: float = 0.0
    extra_events: list[schema.Event] = field(default_factory=list)

    def events(self) -> list[schema.Event]:
        rng = np.random.default_rng(self.seed)
        n = len(self.hosts)
        ranks = [Source(h, r, pid=1000 + r) for r, h in enumerate(self.hosts)]
        daemons = {h: Source(h, -1, pid=7 + i) for i, h in enumerate(sorted(set(self.hosts)))}
        out: list[schema.Event] = []
        t, next_sample = T0, T0
        throttled = [0] * n  # per rank, the quota's throttled ns since the last sample
        until = self.steps if self.until is None else self.until
        for step in range(self.steps):
            hog = self.onset <= step < until
            wait_cpu = np.where(rng.random(n) < self.burst_p, self.burst_ms, 0.1)
            wait_cpu = wait_cpu * rng.uniform(0.5, 1.5, n) + (self.shared_ms if hog else 0.0)
            if step >= self.onset:
                wait_cpu[[r for r in range(n) if r not in self.heavier]] *= self.calmer_x
            if hog:
                hit = rng.random(n) < self.extra_p
                for r in self.contended:
                    wait_cpu[r] += self.extra_ms / self.extra_p * hit[r]
                for r in self.mild:
                    wait_cpu[r] += self.mild_ms
            if self.early[0] <= step < self.early[1]:
                for r in self.contended:
                    wait_cpu[r] += self.early_ms
            if step >= self.limited_from:
                for r in self.limited:
                    wait_cpu[r] += self.limited_ms
                    throttled[r] += int(self.limited_ms * MS)
            if step in self.host_bursts:
                wait_cpu = wait_cpu + self.host_burst_ms
            compute = self.compute_ms * (1 + 0.03 * rng.standard_normal(n))
            if step >= self.onset:
                for r in self.heavier:
                    compute[r] *= self.heavier_x
                    wait_cpu[r] *= (
                        self.heavier_x if self.heavier_wait_x is None else self.heavier_wait_x
                    )
            busy = compute + wait_cpu
            wait = busy.max() - busy + self.comm_ms
            dur_ms = float(busy.max() + self.comm_ms)
            dur = int(dur_ms * MS)
            for r, src in enumerate(ranks):
                out.append(
                    schema.StepEvent(
                        **src.env(t + dur, step),
                        start_ns=t,
                        end_ns=t + dur,
                        duration_ns=dur,
                        forward_ns=int(busy[r] * 0.3 * MS),
                        backward_ns=int((busy[r] * 0.6 + wait[r]) * MS),
                        optimizer_ns=int(busy[r] * 0.1 * MS),
                        compute_ns=int(busy[r] * MS),
                        collective_wait_ns=int(wait[r] * MS),
                        cpu_wait_ns=int(wait_cpu[r] * MS),
                        loss=1.0,
                        num_collectives=3,
                    )
                )
            t += dur
            while next_sample <= t:
                out += self._samples(next_sample, daemons, ranks, hog, throttled)
                next_sample += int(self.daemon_every_s * S)
        return [*out, *self.extra_events]

    def _quota(self, rank: int, throttled: list[int]) -> dict[str, object]:
        """A rank's sample's quota fields (with ``quota_seen``): its throttled time since the
        last sample, taken (``throttled`` reset)."""
        ns, throttled[rank] = throttled[rank], 0
        if not self.quota_seen:
            return {}
        limit = 0.25 if rank in self.limited else 0.0
        return {"interval_ns": int(self.daemon_every_s * S), "cpu_throttled_ns": ns,
                "cpu_limit_cores": limit}  # fmt: skip

    def _samples(
        self, ts: int, daemons: dict, ranks: list[Source], hog: bool, throttled: list[int]
    ) -> list:
        out: list[schema.Event] = []
        for host, d in daemons.items():
            out.append(schema.HostSample(**d.env(ts), num_cpus=2, cpu_busy_pct=90.0))
            mine = [r for r, h in enumerate(self.hosts) if h == host]
            out += [
                schema.ProcSample(
                    **ranks[r].env(ts) | {"source": d.name, "seq": next(d._seq)},
                    pid=1000 + r,
                    cpu_pct=self.heavier_cpu_pct if hog and r in self.heavier else 50.0,
                    last_cpu=self.cpus[r] if self.cpus[r] >= 0 else (ts - T0) // S % 2,
                    **self._quota(r, throttled),
                )
                for r in mine
            ]
            out.append(
                schema.HostProcess(**d.env(ts), pid=99, cpu_pct=20.0, cmd="sshd", last_cpu=0)
            )
            shown = self.hog_seen or any(r in self.contended for r in mine)
            if hog and self.hog_reported and shown:
                out.append(
                    schema.HostProcess(
                        **d.env(ts), pid=HOG_PID, cpu_pct=95.0, cmd=HOG_CMD, last_cpu=self.hog_cpu
                    )
                )
        return out

    def write(self, run_dir: Path) -> RunStore:
        store = RunStore.create(run_dir)
        store.append(self.events())
        store.flush()
        return RunStore.open(run_dir)
