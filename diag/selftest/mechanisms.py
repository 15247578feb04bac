"""How a fault is injected: several mechanisms of different nature per cause, split up front into
the ones diag's detectors were tuned on and the ones held out to test them.

A detector that names every fault of our own injector proves little; the question is whether it
names the same *cause* injected another way. So each cause has mechanisms that differ in nature
(extra work inside the step vs a foreign process taking the CPU vs a cgroup quota; a loader that
computes vs one that sleeps vs batches of uneven length; extra work inside one operator vs another
dtype vs another algorithm; a stall inside ``torch.save`` vs slow writes behind a file object).
The split is fixed here, before tuning: ``tune`` mechanisms are the ones the detectors were
developed against (the suite's original injectors); ``heldout`` ones were added to test them and
must not be tuned on. ``bench/accuracy.py --split`` reports each.

A mechanism adds arguments to the job (:mod:`diag.selftest.workloads.train_ddp`) and, where the
fault comes from outside the job, an :class:`Actor` the live runner drives: ``at_start`` once
every rank has finished a step (the ranks' pids known), ``at_onset`` once step ``onset - 1`` is
done, ``stop`` at the end. ``prepare`` may change the case's expected culprits (a CPU hog slows
every rank pinned to its CPU).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from diag.selftest.cases import Case, Unsupported

TUNE = "tune"
HELDOUT = "heldout"


class Actor(Protocol):
    """A fault applied from outside the job, to the ranks' processes."""

    def at_start(self, pids: dict[int, int]) -> None: ...

    def at_onset(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Mechanism:
    """One way to inject a cause: what it does (``nature``), its split, the job's extra arguments
    and, for a fault from outside the job, the actor that applies it."""

    name: str
    cause: str
    split: str
    nature: str
    job_args: Callable[[Case], list[str]] = lambda case: []
    actor: Callable[[Case], Actor] | None = None
    prepare: Callable[[Case], Case] = lambda case: case
    #: the causes' own job arguments (the tuning injectors) are replaced, not added to
    replaces_base: bool = False
    #: the job it runs: "train_ddp" (data parallel) or "pipeline" (PP x DP: its arguments are
    #: all the mechanism's own)
    workload: str = "train_ddp"


#: the pipeline job's step on these machines, roughly (its faults are sized on it: it has no
#: --severity of its own)
PIPELINE_STEP_MS = 25.0


def _pipeline_args(case: Case, *fault: str) -> list[str]:
    return ["--steps", str(case.steps), "--seed", str(case.seed), "--pp", "2",
            "--microbatches", "8", "--print-every", "1", *fault]  # fmt: skip


def _pipeline_ms(case: Case) -> str:
    return f"{case.extra_ms(PIPELINE_STEP_MS):.1f}"


def _stage_ranks(case: Case) -> Case:
    """The culprit's stage, every replica of it (2 stages: rank r is stage r // (n / 2))."""
    dp = case.world_size // 2
    stage = (case.ranks[0] if case.ranks else 0) // dp
    return replace(case, ranks=tuple(range(stage * dp, (stage + 1) * dp)), onset_step=None)


def _rank(case: Case) -> str:
    return str(case.ranks[0]) if case.ranks else "1"


def _stage_of(case: Case) -> int:
    return (case.ranks[0] if case.ranks else 0) // (case.world_size // 2)


def _onset(case: Case) -> str:
    return str(case.onset_step if case.onset_step is not None else 2)


# -- actors ---------------------------------------------------------------------------------------


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _pin(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` (training, gloo, the hook's) to ``cpus``."""
    for tid in _threads(pid):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


def cpu_of(rank: int, num_cpus: int) -> int:
    """The CPU the hog mechanism pins ``rank`` to."""
    return rank % num_cpus


class CpuHog:
    """A foreign process burning one CPU: the ranks are pinned round-robin to the CPUs at start
    (so their shares are equal), then a hog pinned to the culprit's CPU starts at the onset."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.num_cpus = len(os.sched_getaffinity(0))
        self.proc: subprocess.Popen[bytes] | None = None
        self.pids: dict[int, int] = {}

    def at_start(self, pids: dict[int, int]) -> None:
        self.pids = pids
        for rank, pid in pids.items():
            _pin(pid, {cpu_of(rank, self.num_cpus)})

    def at_onset(self) -> None:
        for rank, pid in self.pids.items():  # threads started since (a loader's, gloo's)
            _pin(pid, {cpu_of(rank, self.num_cpus)})
        cpu = cpu_of(int(_rank(self.case)), self.num_cpus)
        self.proc = subprocess.Popen([sys.executable, "-c", self.code(cpu)])  # a foreign process

    def code(self, cpu: int) -> str:
        """The competitor's program: a plain busy loop on ``cpu`` (a fair share of it)."""
        return f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


class RtHog(CpuHog):
    """A higher-priority service in bursts on the culprit's CPU: a ``SCHED_FIFO`` loop that
    spins ``spin_ms`` and sleeps ``rest_ms`` (~90% of the core, in 20 ms bursts that no fair
    share interleaves: a rank ready during one waits it out, in whatever phase). Needs root and
    real-time bandwidth."""

    spin_ms, rest_ms = 20.0, 2.0

    def __init__(self, case: Case) -> None:
        if os.geteuid() != 0 or not hasattr(os, "SCHED_FIFO"):
            raise Unsupported("real-time hog mechanism: needs root and SCHED_FIFO")
        super().__init__(case)

    def code(self, cpu: int) -> str:
        return rt_hog_program(cpu, self.spin_ms, self.rest_ms)


def rt_hog_program(cpu: int, spin_ms: float, rest_ms: float, ready: str = "") -> str:
    """A Python program that runs on ``cpu`` at real-time priority (``SCHED_FIFO`` 1), spinning
    ``spin_ms`` and sleeping ``rest_ms`` for ever; it prints ``ready`` (when given) once it has
    that priority. Needs root (CAP_SYS_NICE) and real-time bandwidth."""
    return (
        f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\n"
        "os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))\n"
        + (f"print({ready!r}, flush=True)\n" if ready else "")
        + "while True:\n"
        f"    end = time.perf_counter() + {spin_ms / 1e3}\n"
        "    while time.perf_counter() < end:\n        pass\n"
        f"    time.sleep({rest_ms / 1e3})\n"
    )


def _hog_culprits(case: Case) -> Case:
    num_cpus = len(os.sched_getaffinity(0))
    if num_cpus >= case.world_size:
        return case
    cpu = cpu_of(int(_rank(case)), num_cpus)
    ranks = tuple(r for r in range(case.world_size) if cpu_of(r, num_cpus) == cpu)
    return replace(case, ranks=ranks)


class CpuQuota:
    """A cgroup CPU quota on the culprit rank's process from the onset (a throttled node): the
    whole process (every thread) joins a cgroup limited to ``fraction`` of one CPU."""

    def __init__(self, case: Case, fraction: float = 0.25) -> None:
        from diag.selftest import cpuquota

        reason = cpuquota.unavailable_reason()
        if reason is not None:
            raise Unsupported(f"cpu quota mechanism: {reason}")
        self.case = case
        self.fraction = fraction
        self.pid = 0
        self._stack = contextlib.ExitStack()

    def at_start(self, pids: dict[int, int]) -> None:
        self.pid = pids[int(_rank(self.case))]

    def at_onset(self) -> None:
        from diag.selftest import cpuquota

        path = self._stack.enter_context(cpuquota.cgroup(self.fraction))
        (Path(path) / "cgroup.procs").write_text(f"{self.pid}\n")  # every thread moves

    def stop(self) -> None:
        from diag.selftest import cpuquota

        with contextlib.suppress(OSError):  # still running (the job failed): leave the quota
            (cpuquota.root() / "cgroup.procs").write_text(f"{self.pid}\n")
        self._stack.close()


class StopCont:
    """The culprit rank's process frozen in short bursts from the onset (a host that stalls:
    hypervisor steal, a stop-the-world pause, a firmware hiccup): ``SIGSTOP`` for ``stop_ms``
    every ``stop_ms + run_ms``. Frozen time that lands while the rank waits for its peers anyway
    costs the job little, so the frozen share of the time, ``stop_ms / (stop_ms + run_ms)``, is
    ``S / (1 - S)`` for severity ``S`` (at most 0.75; 0.43 at ``S`` = 0.3: a first try at ``S``
    itself lost about half of it). A stopped process is neither running nor runnable: no
    run-queue delay, its compute and its collectives just take longer."""

    def __init__(self, case: Case, run_ms: float = 20.0) -> None:
        self.case = case
        self.run_s = run_ms / 1000
        sev = min(0.9, max(0.0, case.severity))
        frozen = min(0.75, sev / (1 - sev))
        self.stop_s = self.run_s * frozen / (1 - frozen)
        self.pid = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def at_start(self, pids: dict[int, int]) -> None:
        self.pid = pids[int(_rank(self.case))]

    def at_onset(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="stopcont", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._done.is_set():
            try:
                os.kill(self.pid, signal.SIGSTOP)
                self._done.wait(self.stop_s)
                os.kill(self.pid, signal.SIGCONT)
            except OSError:  # the rank is gone: nothing left to freeze
                return
            self._done.wait(self.run_s)

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGCONT)


# -- the registry ---------------------------------------------------------------------------------


def _args(*extra: str) -> Callable[[Case], list[str]]:
    return lambda case: list(extra)


MECHANISMS: dict[str, Mechanism] = {
    m.name: m
    for m in (
        # node
        Mechanism(name="node.extra_compute", cause="node", split=TUNE,
                  nature="extra real compute (matrix products) inside the rank's forward"),
        Mechanism(name="node.cpu_hog", cause="node", split=HELDOUT,
                  nature="a foreign process burning the CPU the culprit ranks are pinned to",
                  actor=CpuHog, prepare=_hog_culprits, replaces_base=True),
        Mechanism(name="node.rt_hog", cause="node", split=HELDOUT,
                  nature="a real-time process on the culprit ranks' CPU in 20 ms bursts (~90% "
                  "of it): a higher-priority service no fair share interleaves with the rank",
                  actor=RtHog, prepare=_hog_culprits, replaces_base=True),
        Mechanism(name="node.cpu_quota", cause="node", split=HELDOUT,
                  nature="a cgroup CPU quota (a quarter of a core) on the culprit's process",
                  actor=CpuQuota, replaces_base=True),
        Mechanism(name="node.stop_cont", cause="node", split=HELDOUT,
                  nature="the culprit's process frozen (SIGSTOP) in short bursts from the onset",
                  actor=StopCont, replaces_base=True),
        Mechanism(name="node.gc_pauses", cause="node", split=HELDOUT,
                  nature="full garbage collections over a large live object graph on the "
                  "culprit's training thread in a random 30% of its steps (on-CPU pauses)",
                  job_args=lambda c: ["--gc-pause-rank", _rank(c), "--gc-pause-from-step",
                                      _onset(c), "--gc-pause-share", "0.3"],
                  replaces_base=True),
        Mechanism(name="node.from_start", cause="node", split=HELDOUT,
                  nature="one data-parallel rank slow from the first steps (no onset)",
                  job_args=lambda c: ["--slow-rank", _rank(c), "--slow-from-step", "2"],
                  prepare=lambda c: replace(c, onset_step=None), replaces_base=True),
        Mechanism(name="node.pipeline_rank", cause="node", split=HELDOUT,
                  nature="one rank of a 2-stage pipeline job does extra compute from the onset",
                  job_args=lambda c: _pipeline_args(c, "--slow-rank", _rank(c), "--slow-ms",
                                                    _pipeline_ms(c), "--slow-from-step", _onset(c)),
                  replaces_base=True, workload="pipeline"),
        Mechanism(name="node.fsdp_rank", cause="node", split=HELDOUT,
                  nature="one rank of a fully sharded (FSDP2) job does extra compute from the "
                  "onset: all-gathers and reduce-scatters instead of DDP's all-reduce",
                  job_args=_args("--fsdp")),
        # structural
        Mechanism(name="structural.pipeline_stage", cause="structural", split=HELDOUT,
                  nature="every replica of one pipeline stage does more work from the start",
                  job_args=lambda c: _pipeline_args(c, "--slow-stage", str(_stage_of(c)),
                                                    "--slow-stage-ms", _pipeline_ms(c)),
                  prepare=_stage_ranks, replaces_base=True, workload="pipeline"),
        # data
        Mechanism(name="data.pipeline_microbatches", cause="data", split=HELDOUT,
                  nature="each step one microbatch of one replica is long (pipeline, moving)",
                  job_args=lambda c: _pipeline_args(c, "--imbalance-ms", _pipeline_ms(c),
                                                    "--imbalance-from-step", _onset(c)),
                  prepare=lambda c: replace(c, ranks=()), replaces_base=True,
                  workload="pipeline"),
        Mechanism(name="data.cpu_loader", cause="data", split=TUNE,
                  nature="the culprit's dataset does real CPU work per batch"),
        Mechanism(name="data.sleep_loader", cause="data", split=HELDOUT,
                  nature="the culprit's dataset sleeps per batch (I/O-like, frees its CPU)",
                  job_args=_args("--data-sleep")),
        Mechanism(name="data.fsdp_sleep_loader", cause="data", split=HELDOUT,
                  nature="the culprit's loader sleeps per batch in a fully sharded (FSDP2) job",
                  job_args=_args("--fsdp", "--data-sleep")),
        Mechanism(name="data.skewed_lengths", cause="data", split=HELDOUT,
                  nature="each step one rank, drawn anew, gets a longer batch (moving imbalance)",
                  job_args=lambda c: ["--skew-from-step", _onset(c)],
                  prepare=lambda c: replace(c, ranks=()), replaces_base=True),
        # kernel
        Mechanism(name="kernel.custom_op", cause="kernel", split=TUNE,
                  nature="extra work inside one custom operator on the culprit"),
        Mechanism(name="kernel.float64", cause="kernel", split=HELDOUT,
                  nature="one linear layer computed in float64 on the culprit (another dtype)",
                  job_args=lambda c: ["--linear-mode-rank", _rank(c), "--linear-mode", "double",
                                      "--linear-mode-from-step", _onset(c)],
                  prepare=lambda c: replace(c, kernel=None), replaces_base=True),
        Mechanism(name="kernel.naive_matmul", cause="kernel", split=HELDOUT,
                  nature="one linear layer as broadcast multiply-and-sum (another algorithm)",
                  job_args=lambda c: ["--linear-mode-rank", _rank(c), "--linear-mode", "naive",
                                      "--linear-mode-from-step", _onset(c)],
                  prepare=lambda c: replace(c, kernel=None), replaces_base=True),
        # checkpoint
        Mechanism(name="checkpoint.slow_pickle", cause="checkpoint", split=TUNE,
                  nature="each save stalls inside torch.save before pickling (path known)"),
        Mechanism(name="checkpoint.slow_stream", cause="checkpoint", split=HELDOUT,
                  nature="each save's writes stall behind a file object (no path)",
                  job_args=_args("--ckpt-file-object")),
        Mechanism(name="checkpoint.dcp_all_ranks", cause="checkpoint", split=HELDOUT,
                  nature="a collective DCP save on every rank, each rank's writer stalling",
                  job_args=_args("--dcp"),
                  prepare=lambda c: replace(c, ranks=tuple(range(c.world_size)))),
        # link
        Mechanism(name="link.tbf_one_node", cause="link", split=TUNE,
                  nature="tc tbf rate limit on one node's veth of a two-node job"),
        Mechanism(name="link.flap", cause="link", split=TUNE,
                  nature="the slow host's link down 150 ms at a time (a flapping port): stalls, "
                  "retransmissions both ways"),
        Mechanism(name="link.lossy_htb", cause="link", split=HELDOUT,
                  nature="an htb rate limit with a 16-packet drop-tail queue: drops, retransmits"),
    )
}  # fmt: skip

#: each cause's tuning mechanism: the one a case without a mechanism means
DEFAULT_MECHANISM: dict[str, str] = {
    "node": "node.extra_compute",
    "data": "data.cpu_loader",
    "kernel": "kernel.custom_op",
    "checkpoint": "checkpoint.slow_pickle",
    "link": "link.tbf_one_node",
    "structural": "structural.pipeline_stage",
}


def mechanism_of(case: Case) -> Mechanism | None:
    """The case's mechanism (its cause's tuning one when it names none; None for clean and
    structural cases); :class:`Unsupported` for an unknown name or one of another cause."""
    name = case.mechanism or DEFAULT_MECHANISM.get(case.cause, "")
    if not name:
        return None
    mech = MECHANISMS.get(name)
    if mech is None:
        raise Unsupported(f"unknown mechanism {name!r} (known: {', '.join(MECHANISMS)})")
    if mech.cause != case.cause:
        raise Unsupported(f"mechanism {name} injects {mech.cause}, not {case.cause}")
    return mech


def split_of(case: Case) -> str:
    """``tune`` or ``heldout`` (clean runs count as tuning: every detector was tuned on them)."""
    mech = mechanism_of(case)
    return TUNE if mech is None else mech.split
