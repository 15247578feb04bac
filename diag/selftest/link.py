"""The slow-link fault, live: emulated nodes, one node's link rate-limited mid-run.

:func:`run_link_case` builds an N-node network of :mod:`diag.selftest.netns` (N = ``nodes``, 2 by
default; root only), starts an analyzer in the root namespace on the bridge address, and runs
``diag run --analyzer`` on each node with ``torchrun --nnodes N --nproc-per-node world_size/N``
(c10d rendezvous hosted on node A) of :mod:`diag.selftest.workloads.train_ddp` (gloo over the
bridge) with a clean case's irregularities (:func:`diag.selftest.live.job_args`: warm-up, eval
passes, checkpoint saves, profiler windows), printing every step. It watches the ranks' step lines;
when the job has finished step ``onset_step - 1`` it rate-limits the link of the slow host (a
``tbf`` qdisc on the root end of its veth pair: everything sent to that node, e.g. on two nodes
node A's half of every gradient all-reduce). The slow host is ``slow_host`` when given, else
:func:`default_slow_host`: node B on two nodes; on more, a node other than node A drawn from the
case's seed. The limit is

    rate = bytes_per_step / extra,   extra = base x s / (1 - s)

where ``base`` and ``bytes_per_step`` are the mean step time and the mean bytes the slow host's
veth carried per step over the :data:`CALIBRATE_STEPS` steps before the onset (warm-up left out;
means, so eval, checkpoint and profiler steps count as much as they cost) and ``s`` is the case's
severity: a step's bytes then keep the link ``extra`` longer busy, so the step goes from ``base``
to about ``base / (1 - s)`` and the job loses the fraction ``s`` of its step. How much of the
link's time shows in the step depends on how the all-reduce overlaps it (measured 0.6 to 1.1 on
gloo over a veth), so after :data:`SETTLE_STEPS` steps the rate is corrected once from the measured
extra time ``E`` (mean step since the change - ``base``) when it is more than :data:`DEADBAND` off
the target: the link's time per step ``x = bytes_per_step / rate`` becomes ``x x extra / E``,
within [x / 2, 2 x]. The token bucket holds ``burst`` = clamp(bytes_per_step / 64, 16 KiB, 64 KiB)
(a small share of a step's bytes passes at line rate after each compute phase) and queues up to
``latency`` = :data:`TBF_LATENCY_MS` of traffic (long enough that TCP never sees a drop: a
retransmission timeout would be a stall, not a slow link). The job's pace also drifts with the
machine's load: on a shared machine the severity reached is only about the one asked for
(``WORKDIR/link.json`` has what was measured).

The held-out mechanism ``link.lossy_htb`` (:mod:`diag.selftest.mechanisms`) slows the same link
another way: an ``htb`` class at the same rate whose queue holds only :data:`LOSSY_QUEUE_PACKETS`
packets, so bursts are dropped and TCP retransmits (a lossy link) instead of waiting in a deep
queue (``tbf``'s 2 s); sized and corrected like the rate. (``netem`` latency or loss would be
other natures still, but needs the ``sch_netem`` kernel module, absent on these machines.)

The tuning mechanism ``link.flap`` slows it by a third nature: the limited veth goes down for
:data:`FLAP_DOWN_S` at a time (a flapping port or cable), every ``period`` seconds, both ways at
once: what was in flight is lost and TCP waits out a retransmission timeout (>= 200 ms), so the
job stalls at each flap. Each flap is taken to cost :data:`FLAP_COST_S` of the job's time, so
losing the share ``s`` of the wall time asks for ``period = FLAP_COST_S / s`` (at least
:data:`FLAP_MIN_PERIOD_S`); after
:data:`SETTLE_STEPS` steps and :data:`FLAP_SETTLE_PERIODS` periods the period is corrected once,
as the rate is (the extra time measured against the target, within [1/2, 2]x).

The returned case names the link's hosts and the step the limit was in place from (the onset
asked for, or later when the job was already past it). On two nodes the hosts are both nodes
(``node-a``, ``node-b``: the one link between them is slow, whichever end is limited); on more,
only the slow host (what every other node sends it crosses the limited link; traffic between the
other nodes does not). What was measured and applied (with the node count, ``num_nodes``, and the
slow host, ``node``) is kept in ``WORKDIR/link.json``. Needs root, ``ip netns`` and ``tc``: else
:class:`~diag.selftest.netns.NetnsUnavailable` (an :class:`~diag.selftest.cases.Unsupported`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

from diag.errors import DiagError
from diag.findings import Finding
from diag.selftest.cases import CLEAN, Case, Unsupported
from diag.selftest.live import PROFILE_EVERY, job_args
from diag.selftest.netns import (
    NetnsUnavailable,
    Node,
    Nodes,
    node_hostnames,
    stop,
    unavailable_reason,
)
from diag.selftest.workloads import TRAIN_DDP

REPO = Path(__file__).resolve().parents[2]
#: on two nodes, the hosts the slow link joins, as the ranks see them (the nodes' UTS host names).
HOSTS = ("node-a", "node-b")
#: steps at the start left out of the calibration (warm-up).
SKIP_STEPS = 2
#: at most this many steps just before the onset size the rate (the job's pace drifts).
CALIBRATE_STEPS = 15
TBF_LATENCY_MS = 2000
MIN_BURST_BYTES = 16 * 1024
MAX_BURST_BYTES = 64 * 1024
#: how long the analyzer may take to write its port file.
ANALYZER_START_S = 30.0
#: once one node has failed, how long the other may still take before it is killed.
FAILED_PEER_GRACE_S = 15.0
POLL_S = 0.005
#: steps run at the first rate before it is corrected (the first one after the change left out).
SETTLE_STEPS = 6
#: no correction when the measured extra time is within this share of the target.
DEADBAND = 0.25
#: the lossy mechanism's queue (packets): beyond it, packets are dropped.
LOSSY_QUEUE_PACKETS = 16
#: the flapping mechanism: how long the link is down each time (under TCP's least retransmission
#: timeout, 200 ms, so one retransmission gets through), what one flap is taken to cost the job
#: (the outage, then the timeout's wait), the shortest period (flaps closer than a few costs
#: catch the retransmissions of the one before: each timeout doubles, a measured 7-15 s stall at
#: a 0.4 s period), and how many periods the steps measured for the correction must span
FLAP_DOWN_S = 0.15
FLAP_COST_S = 0.35
FLAP_MIN_PERIOD_S = 4 * FLAP_COST_S
FLAP_SETTLE_PERIODS = 4

_STEP_LINE = re.compile(rb"^rank (\d+) step (\d+) ")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shaping:
    """What the link fault measured and applied (``WORKDIR/link.json``)."""

    veth: str  # root-namespace end of the limited node's veth pair
    node: str  # the slow host: the node whose incoming traffic is limited
    onset_step: int  # first step run under the limit
    base_step_s: float  # mean step time before the onset
    bytes_per_step: float  # mean bytes the veth carried per step before the onset
    rates_bytes_per_s: tuple[float, ...]  # the rate at the onset, then the corrected one
    rate_steps: tuple[int, ...]  # the step from which each rate (or delay) held
    burst_bytes: int
    latency_ms: int
    shaper: str = "tbf"  # "tbf", "htb" with a short drop-tail queue (lossy), "flap" (down/up)
    flap_periods_s: tuple[float, ...] = ()  # flap: the period at the onset, then the corrected
    flap_down_s: float = 0.0  # flap: how long the link was down each time
    after_step_s: float | None = None  # mean step time at the final rate (measured)
    achieved_severity: float | None = None  # 1 - base / after
    num_nodes: int = 2  # nodes the job ran on (world_size / num_nodes ranks each)


def link_rate(severity: float, base_step_s: float, bytes_per_step: float) -> float:
    """Bytes per second at which ``bytes_per_step`` keep a link busy ``base x s / (1 - s)``."""
    if not 0.0 < severity < 1.0:
        raise ValueError(f"severity {severity} is not in (0, 1)")
    if base_step_s <= 0 or bytes_per_step <= 0:
        raise ValueError("the step time and the bytes per step must be positive")
    return bytes_per_step / (base_step_s * severity / (1.0 - severity))


def corrected_rate(rate: float, extra_s: float, measured_s: float) -> float:
    """The rate after one correction (see the module doc): unchanged within the dead band, else
    the link's time per step scaled by ``target / measured`` extra time, within [1/2, 2]x."""
    if abs(measured_s - extra_s) <= DEADBAND * extra_s:
        return rate
    scale = 2.0 if measured_s <= 0 else min(2.0, max(0.5, extra_s / measured_s))
    return rate / scale


def flap_period(severity: float) -> float:
    """Seconds between flaps so that flaps costing :data:`FLAP_COST_S` each take the share
    ``severity`` of the job's time, at least :data:`FLAP_MIN_PERIOD_S` (so at most about a
    quarter of it: a harsher flap is an outage, not a slow link)."""
    if not 0.0 < severity < 1.0:
        raise ValueError(f"severity {severity} is not in (0, 1)")
    return max(FLAP_MIN_PERIOD_S, FLAP_COST_S / severity)


def corrected_period(period: float, extra_s: float, measured_s: float) -> float:
    """The flap period after one correction: unchanged within the dead band, else scaled by
    ``measured / target`` extra time (more flaps where they cost less than asked), within
    [1/2, 2]x, never under :data:`FLAP_MIN_PERIOD_S`."""
    if abs(measured_s - extra_s) <= DEADBAND * extra_s:
        return period
    scale = 0.5 if measured_s <= 0 else min(2.0, max(0.5, measured_s / extra_s))
    return max(FLAP_MIN_PERIOD_S, period * scale)


def burst_for(bytes_per_step: float) -> int:
    """The token bucket's size: 1/64 of a step's bytes, within [16 KiB, 64 KiB]."""
    return int(min(MAX_BURST_BYTES, max(MIN_BURST_BYTES, bytes_per_step / 64)))


def link_job_args(case: Case, ckpt_dir: Path) -> list[str]:
    """The job's arguments: a clean case's (same irregularities), printing every step."""
    clean = Case(cause=CLEAN, seed=case.seed, world_size=case.world_size, steps=case.steps)
    args = job_args(clean, ckpt_dir)
    args[args.index("--print-every") + 1] = "1"
    return args


def default_slow_host(case: Case, nodes: int) -> str:
    """The node whose link ``case`` slows on ``nodes`` nodes when none is named: node B on two;
    on more, node number ``1 + seed mod (nodes - 1)`` (node B, C, ... by seed; never node A, which
    hosts the rendezvous store and rank 0)."""
    names = node_hostnames(nodes)
    return names[1] if nodes == 2 else names[1 + case.seed % (nodes - 1)]


def _slow_host(case: Case, nodes: int, slow_host: str | None) -> str:
    """The slow host checked against the ``nodes`` nodes' names (:class:`Unsupported` if not)."""
    try:
        names = node_hostnames(nodes)
    except ValueError as exc:
        raise Unsupported(f"a link fault cannot run on {exc}") from exc
    slow = default_slow_host(case, nodes) if slow_host is None else slow_host
    if slow not in names:
        raise Unsupported(f"the slow host {slow!r} is not one of the nodes {', '.join(names)}")
    return slow


def prepare(case: Case, *, nodes: int = 2, slow_host: str | None = None) -> Case:
    """The case as injected here on ``nodes`` nodes, its hosts named (see the module doc);
    :class:`Unsupported` for shapes it cannot run, :class:`NetnsUnavailable` when the machine
    cannot host the nodes."""
    if case.cause != "link":
        raise Unsupported(f"{case.name} is not a link fault")
    slow = _slow_host(case, nodes, slow_host)
    if case.world_size < nodes or case.world_size % nodes:
        raise Unsupported(
            f"a link fault on {nodes} nodes runs a multiple of {nodes} ranks, not {case.world_size}"
        )
    if case.onset_step is None or case.onset_step < SKIP_STEPS + 3:
        raise Unsupported(f"a link fault needs an onset step >= {SKIP_STEPS + 3}")
    if case.onset_step >= case.steps - 5:
        raise Unsupported("a link fault needs 5 steps after its onset")
    if not case.severity:
        raise Unsupported("a link fault needs a severity > 0")
    reason = unavailable_reason(("tc",))
    if reason is not None:
        raise NetnsUnavailable(reason)
    return replace(case, hosts=node_hostnames(2) if nodes == 2 else (slow,))


def run_link_case(
    case: Case,
    workdir: Path,
    *,
    nodes: int = 2,
    slow_host: str | None = None,
    timeout_s: float = 600.0,
    auto_capture: str | None = None,
    stop_when: Callable[[Path, int], bool] | None = None,
) -> tuple[Case, list[Finding]]:
    """Run the link case ``case`` (see the module doc) on ``nodes`` nodes, ``slow_host``'s link
    limited (``None``: :func:`default_slow_host`), in ``workdir`` (the analyzer's run directory is
    ``workdir/run``) and return the case as run and ``diag triage``'s findings (JSON objects,
    ranked). ``auto_capture``: the analyzer's closed loop (on, observe, off; ``None``: its
    default, on). ``stop_when(run_dir, newest step done)``: once true, the job ends early (at the
    same step on every rank; ``case.steps`` is then the cap)."""
    from diag.diagnose.triage import triage
    from diag.selftest.netns import node_network
    from diag.store.run_store import RunStore

    case = prepare(case, nodes=nodes, slow_host=slow_host)
    slow = _slow_host(case, nodes, slow_host)
    workdir.mkdir(parents=True, exist_ok=True)
    logdir = workdir / "logs"
    logdir.mkdir(exist_ok=True)
    (workdir / "ckpt").mkdir(exist_ok=True)
    run_dir = workdir / "run"
    with node_network(nodes) as net:
        shaping = _run_job(
            case, net, net.node(slow), workdir, run_dir, logdir, timeout_s, auto_capture,
            stop_when,
        )  # fmt: skip
    (workdir / "link.json").write_text(json.dumps(asdict(shaping), indent=2) + "\n")
    case = replace(case, onset_step=shaping.onset_step)
    return case, list(triage(RunStore.open(run_dir)).findings)


def _run_job(
    case: Case,
    nodes: Nodes,
    slow: Node,
    workdir: Path,
    run_dir: Path,
    logdir: Path,
    timeout_s: float,
    auto_capture: str | None = None,
    stop_when: Callable[[Path, int], bool] | None = None,
) -> Shaping:
    """The analyzer and every node's ``diag run``; ``slow``'s link limited at the onset."""
    token = write_token(logdir / "diag.token")  # the nodes reach it over the bridge: a token
    analyzer, port = _start_analyzer(nodes, run_dir, logdir, auto_capture, token)
    procs: dict[str, subprocess.Popen[str]] = {}
    nproc = case.world_size // len(nodes.nodes)
    try:
        rdzv_port = nodes.free_port(nodes.nodes[0])
        for node in nodes.nodes:
            argv = [
                *_diag("run", "--analyzer", f"{nodes.bridge_ip}:{port}", "--live", "off"),
                "--out", str(workdir / node.hostname / "job"), "--",
                sys.executable, "-m", "torch.distributed.run",
                *_torchrun_args(nodes, node, rdzv_port, nproc),
                str(TRAIN_DDP), *link_job_args(case, workdir / "ckpt"),
            ]  # fmt: skip
            if stop_when is not None:  # train_ddp ends once the file exists
                argv += ["--stop-file", str(workdir / "stop")]
            with (logdir / f"{node.hostname}.out").open("w") as out:
                procs[node.hostname] = nodes.popen(
                    node,
                    argv,
                    env=_node_env(node, token),
                    cwd=REPO,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
        ender = None
        if stop_when is not None:
            ender = (lambda last: stop_when(run_dir, last), workdir / "stop")
        shaping = _watch(case, nodes, slow, procs, logdir, time.monotonic() + timeout_s, ender)
    finally:
        for proc in procs.values():
            stop(proc, timeout=5)
        nodes.kill_all()
        _stop_analyzer(analyzer)
    for name, proc in procs.items():
        if proc.returncode != 0:
            tail = (logdir / f"{name}.out").read_text().strip().splitlines()[-1:] or ["no output"]
            raise DiagError(f"{case.name}: {name}'s job exited {proc.returncode}: {tail[0]}")
    if shaping is None:
        raise DiagError(f"{case.name}: the job ended before step {case.onset_step}")
    return replace(shaping, num_nodes=len(nodes.nodes))


class _Steps:
    """The ranks' step lines as they appear: when each step was first seen done, and the bytes
    the limited veth had carried by then."""

    def __init__(self, files: list[Path], veth: str) -> None:
        self._files: list[IO[bytes]] = [f.open("rb") for f in files]
        self._rest = [b""] * len(files)
        self._counter = Path(f"/sys/class/net/{veth}/statistics/tx_bytes")
        self.seen: dict[int, tuple[float, int]] = {}  # step -> (monotonic s, tx bytes)
        self.last = -1

    def poll(self) -> int:
        """Read new lines; the newest step done (-1 before the first)."""
        now, tx = time.monotonic(), int(self._counter.read_text())
        for i, fh in enumerate(self._files):
            data = self._rest[i] + fh.read()
            *lines, self._rest[i] = data.split(b"\n")
            for line in lines:
                m = _STEP_LINE.match(line)
                if m and int(m[2]) not in self.seen:
                    self.seen[int(m[2])] = (now, tx)
                    self.last = max(self.last, int(m[2]))
        return self.last

    def mean(self, first: int, last: int) -> tuple[float, float]:
        """Mean step time (s) and bytes per step over steps ``first..last`` (``first - 1`` and
        ``last`` seen: only the two ends count, so the lag of each line's sighting cancels)."""
        if first > last or first - 1 not in self.seen or last not in self.seen:
            raise DiagError(f"steps {first - 1} and {last} were not both seen")
        (t0, b0), (t1, b1) = self.seen[first - 1], self.seen[last]
        n = last - first + 1
        return (t1 - t0) / n, (b1 - b0) / n

    def write(self, path: Path) -> None:
        """Each step's first sighting: ``step  monotonic_s  tx_bytes`` per line."""
        lines = [f"{k}\t{t:.6f}\t{b}" for k, (t, b) in sorted(self.seen.items())]
        path.write_text("".join(line + "\n" for line in lines))

    def close(self) -> None:
        for fh in self._files:
            fh.close()


def _watch(
    case: Case,
    nodes: Nodes,
    slow: Node,
    procs: dict[str, subprocess.Popen[str]],
    logdir: Path,
    deadline: float,
    ender: tuple[Callable[[int], bool], Path] | None = None,
) -> Shaping | None:
    """Follow the job; limit ``slow``'s link once step ``onset - 1`` is done, correct the rate
    while it settles; wait for the end (``None``: the job ended before the onset). ``ender``:
    (when, file): the file is made once ``when(newest step done)`` is true."""
    assert case.onset_step is not None
    steps = _Steps([logdir / f"{n.hostname}.out" for n in nodes.nodes], slow.veth)
    limiter: _Limiter | _Flapper | None = None
    kind = _Flapper if case.mechanism == "link.flap" else _Limiter
    try:
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs.values()]
            last = steps.poll()
            if limiter is None and last >= case.onset_step - 1:
                limiter = kind.start(case, slow, steps)
            elif limiter is not None:
                limiter.maybe_correct(steps)
            if ender is not None and not ender[1].exists() and ender[0](last):
                ender[1].touch()
            if all(c is not None for c in codes):
                break
            if any(c not in (None, 0) for c in codes):
                deadline = min(deadline, time.monotonic() + FAILED_PEER_GRACE_S)
            time.sleep(POLL_S)
        else:
            raise DiagError(f"{case.name}: the {len(nodes.nodes)}-node job did not finish in time")
        steps.poll()
    finally:
        if limiter is not None:
            limiter.stop()
        steps.close()
        steps.write(logdir / "steps.tsv")
    return None if limiter is None else limiter.result(steps)


class _Limiter:
    """The ``tbf`` limit on one veth: sized at the onset, corrected once (see the module doc)."""

    def __init__(
        self, node: Node, severity: float, base: float, nbytes: float, *, lossy: bool = False
    ) -> None:
        self.node = node
        self.base = base
        self.nbytes = nbytes
        self.extra = base * severity / (1.0 - severity)
        self.burst = burst_for(nbytes)
        self.lossy = lossy  # htb with a short drop-tail queue instead of tbf's deep one
        self.rates = [link_rate(severity, base, nbytes)]
        self.changed: list[int] = []  # the step in progress when each rate was set
        self._apply("add")

    @classmethod
    def start(cls, case: Case, node: Node, steps: _Steps) -> _Limiter:
        """Size the rate from the steps before the onset and put the qdisc in place."""
        assert case.onset_step is not None
        last = case.onset_step - 1
        base, nbytes = steps.mean(max(SKIP_STEPS + 1, last - CALIBRATE_STEPS + 1), last)
        lossy = case.mechanism == "link.lossy_htb"
        limiter = cls(node, case.severity, base, nbytes, lossy=lossy)
        limiter.changed.append(steps.poll() + 1)
        return limiter

    def maybe_correct(self, steps: _Steps) -> None:
        """Once :data:`SETTLE_STEPS` steps ran at the first rate, correct it (once)."""
        since = self.changed[-1]
        if len(self.changed) > 1 or steps.last < since + SETTLE_STEPS:
            return
        after, _ = steps.mean(since + 1, steps.last)
        self.rates.append(corrected_rate(self.rates[-1], self.extra, after - self.base))
        if self.rates[-1] != self.rates[-2]:
            self._apply("change")
        self.changed.append(steps.poll() + 1)

    def stop(self) -> None:
        """Nothing runs beside the qdisc (it goes with the network)."""

    def _apply(self, action: str) -> None:
        rate, dev = f"{int(self.rates[-1] * 8)}bit", self.node.veth
        if not self.lossy:
            self._tc(["qdisc", action, "dev", dev, "root", "tbf", "rate", rate, "burst",
                      str(self.burst), "latency", f"{TBF_LATENCY_MS}ms"])  # fmt: skip
            return
        cls = ["htb", "rate", rate, "ceil", rate, "burst", str(self.burst)]
        if action == "add":
            self._tc(["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"])
            self._tc(["class", "add", "dev", dev, "parent", "1:", "classid", "1:10", *cls])
            self._tc(["qdisc", "add", "dev", dev, "parent", "1:10", "handle", "10:", "pfifo",
                      "limit", str(LOSSY_QUEUE_PACKETS)])  # fmt: skip
        else:
            self._tc(["class", "change", "dev", dev, "parent", "1:", "classid", "1:10", *cls])

    def _tc(self, args: list[str]) -> None:
        cmd = ["tc", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
        if res.returncode != 0:
            raise DiagError(f"`{' '.join(cmd)}` failed: {res.stderr.strip()}")

    def result(self, steps: _Steps) -> Shaping:
        """What was applied, and the step time measured at the final rate."""
        return _shaping(
            self.node, self.changed, self.base, self.nbytes, steps,
            rates_bytes_per_s=tuple(self.rates), shaper="htb" if self.lossy else "tbf",
            burst_bytes=self.burst, latency_ms=TBF_LATENCY_MS,
        )  # fmt: skip


class _Flapper:
    """The flapping link (``link.flap``): the veth down :data:`FLAP_DOWN_S` every period, from
    a thread of its own; the period sized at the onset, corrected once (see the module doc)."""

    def __init__(self, node: Node, severity: float, base: float, nbytes: float) -> None:
        self.node = node
        self.base = base
        self.nbytes = nbytes
        self.extra = base * severity / (1.0 - severity)
        self.periods = [flap_period(severity)]
        self.changed: list[int] = []  # the step in progress when each period was set
        self._changed_at = time.monotonic()
        self._stop = threading.Event()
        self._error: str | None = None
        self._thread = threading.Thread(target=self._run, name="link-flap", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, case: Case, node: Node, steps: _Steps) -> _Flapper:
        assert case.onset_step is not None
        last = case.onset_step - 1
        base, nbytes = steps.mean(max(SKIP_STEPS + 1, last - CALIBRATE_STEPS + 1), last)
        flapper = cls(node, case.severity, base, nbytes)
        flapper.changed.append(steps.poll() + 1)
        return flapper

    def maybe_correct(self, steps: _Steps) -> None:
        """Once the steps done at the first period span :data:`SETTLE_STEPS` steps and
        :data:`FLAP_SETTLE_PERIODS` periods (so their mean holds that many flaps), correct it
        (once)."""
        if self._error is not None:
            raise DiagError(self._error)
        since = self.changed[-1]
        if len(self.changed) > 1 or steps.last < since + SETTLE_STEPS:
            return
        span = steps.seen[steps.last][0] - self._changed_at
        if span < FLAP_SETTLE_PERIODS * self.periods[-1]:
            return
        after, _ = steps.mean(since + 1, steps.last)
        self.periods.append(corrected_period(self.periods[-1], self.extra, after - self.base))
        self.changed.append(steps.poll() + 1)

    def _run(self) -> None:
        dev = self.node.veth
        while not self._stop.wait(self.periods[-1] - FLAP_DOWN_S):
            try:
                _ip_link(dev, "down")
                self._stop.wait(FLAP_DOWN_S)
                _ip_link(dev, "up")
            except DiagError as exc:
                self._error = str(exc)
                return

    def stop(self) -> None:
        """End the flapping with the link up."""
        self._stop.set()
        self._thread.join(timeout=5)
        with contextlib.suppress(DiagError):
            _ip_link(self.node.veth, "up")

    def result(self, steps: _Steps) -> Shaping:
        """What was applied, and the step time measured at the final period."""
        return _shaping(
            self.node, self.changed, self.base, self.nbytes, steps,
            rates_bytes_per_s=(), shaper="flap", burst_bytes=0, latency_ms=0,
            flap_periods_s=tuple(self.periods), flap_down_s=FLAP_DOWN_S,
        )  # fmt: skip


def _shaping(
    node: Node, changed: list[int], base: float, nbytes: float, steps: _Steps, **how: Any
) -> Shaping:
    """What a link fault applied (``how``: its shaper's fields), the steps it changed at, and
    the step time measured from the last change on."""
    first = changed[-1] + 1
    after = steps.mean(first, steps.last)[0] if steps.last >= first else None
    return Shaping(
        veth=node.veth,
        node=node.hostname,
        onset_step=changed[0],
        base_step_s=base,
        bytes_per_step=nbytes,
        rate_steps=tuple(changed),
        after_step_s=after,
        achieved_severity=None if after is None else 1.0 - base / after,
        **how,
    )


def _ip_link(dev: str, state: str) -> None:
    cmd = ["ip", "link", "set", "dev", dev, state]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    if res.returncode != 0:
        raise DiagError(f"`{' '.join(cmd)}` failed: {res.stderr.strip()}")


def _diag(*args: str) -> list[str]:
    return [sys.executable, "-m", "diag.cli.main", *args]


def _torchrun_args(nodes: Nodes, node: Node, port: int, nproc: int) -> list[str]:
    """torchrun options for one of the nodes: c10d rendezvous hosted on node A."""
    host = nodes.nodes[0]
    return [
        f"--nnodes={len(nodes.nodes)}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
        f"--rdzv-endpoint={host.ip}:{port}", f"--rdzv-id=link-{nodes.bridge}",
        f"--rdzv-conf=is_host={int(node is host)},join_timeout=60",
        f"--local-addr={node.ip}",  # the node's bridge address, not getfqdn() of its name
        "--max-restarts=0", "--monitor-interval=0.5",
    ]  # fmt: skip


def write_token(path: Path) -> Path:
    """A fresh random token in ``path`` (mode 600): what a multi-node run's analyzer requires."""
    import secrets

    path.write_text(secrets.token_urlsafe(32) + "\n")
    path.chmod(0o600)
    return path


def _node_env(node: Node, token: Path) -> dict[str, str]:
    env = node.env()
    env["DIAG_TOKEN_FILE"] = str(token)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["DIAG_HOOK_PROFILE_FIRST_STEP"] = str(PROFILE_EVERY)
    env["DIAG_HOOK_PROFILE_EVERY_STEPS"] = str(PROFILE_EVERY)
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    return env


def _start_analyzer(
    nodes: Nodes, run_dir: Path, logdir: Path, auto_capture: str | None, token: Path
) -> tuple[subprocess.Popen[bytes], int]:
    """The analyzer in the root namespace on the bridge address: it and its port."""
    port_file = logdir / "analyzer.port"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("DIAG_HOST", None)
    bind = f"{nodes.bridge_ip}:0"
    argv = _diag(
        "analyzer", "--run-dir", str(run_dir), "--bind", bind, "--port-file", str(port_file),
        "--token-file", str(token),
        *(("--auto-capture", auto_capture) if auto_capture else ()),
    )  # fmt: skip
    with (logdir / "analyzer.out").open("w") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + ANALYZER_START_S
    while time.monotonic() < deadline and proc.poll() is None:
        text = port_file.read_text().strip() if port_file.exists() else ""
        with contextlib.suppress(ValueError):
            return proc, int(text.rsplit(":", 1)[-1])
        time.sleep(0.1)
    _stop_analyzer(proc)
    log = (logdir / "analyzer.out").read_text().strip().splitlines()[-1:] or ["no output"]
    raise DiagError(f"the analyzer did not start: {log[0]}")


def _stop_analyzer(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (it folds what it holds into Parquet parts), SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
