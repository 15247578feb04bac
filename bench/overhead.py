"""Step-time overhead of the always-on hook, A/B interleaved in one process.

A world-size-1 gloo job (FileStore) trains a small DDP MLP whose forward also does calibrated real
compute, so a step takes about 50 ms (and, in a second series, about 5 ms). Every step runs DDP's
gradient all-reduce (C++) and one Python-level ``dist.all_reduce``. Blocks of steps alternate
between hook installed and uninstalled (ABBA order); the hook sends to a real Unix socket read by
a frame sink process (decoding, as the node daemon does, outside the job's process), so encoding
and sending are paid too.

Prints, per step size, the median step time with and without the hook, the median overhead
(relative to the no-hook median, and the median of per-block-pair overheads), and the worst case
(p99 and max). Then the figures a busy host blurs less: the training thread's CPU time per step
(``thread_time``: what the hook's wrappers cost it, whoever else wants the cores) with and
without the hook (and the median over block pairs of a block's median against the adjacent
no-hook block's, where the VM's drift between blocks cancels), and the hook thread's CPU time
per step (its own clock, read around each measured block, after the settle steps: harvests,
encoding, sending). The step sizes are calibrated on the training thread's CPU time, so
"~50 ms" is 50 ms of work however busy the host is. Each block installs the hook anew, so its
step count restarts and the default schedule's first profiler window (hook step 20) falls in
every block: the hook's steps are also split into the *steady state*, window steps and
after-window steps (the step after a window and every later one begun before the hook thread
had finished summarizing it: ``window_kinds``), and the steady state's median and p99 are set
against the no-hook arm's. Last, the bytes and
events the hook shipped to the daemon socket per step (framing included; its blocks' every
step, settle and windows too). Measured numbers only, no asserts.

Thread tier (``--tier thread``): the base tier's arms at a ~1 ms step in 30+ short blocks (60
steps each), for the figure the VM's drift blurs least: the training thread's CPU time per step
with and without the hook (its wrappers and callbacks; ``--vs capture_collectives=false`` takes
the collective wrapper and the Flight Recorder out of one arm).

Kernel tier (``--tier kernel``, ~50 ms step): the same A/B with periodic profiler windows on. The
default interval (a window every 1000 steps) would never fall inside a 100-step block, so this arm
takes a window every ``--window-every`` steps (default 50: two one-step windows per block, at the
hook's steps 20 and 70). It prints (a) the A/B overhead at that interval, (b) the step time of
window steps against the ordinary steps of the same blocks (and of the step right after a window,
when the hook thread summarizes it), and the cost per window: the window step's extra time
measured from outside (median window step - median ordinary step), what switching the profiler
cost the training thread as the hook timed it, and the hook thread's processing time (wall time of
summarizing + writing the trace, pauses included; an upper bound on its GIL time); the amortized
cost at the default interval is (window step extra + hook-thread time) / (1000 x median step).
The tier runs twice in one process: the periodic windows as shipped (their CPU operators counted
by diag's operator observer, :mod:`diag.hook.opstats`, built first where it is not yet) and with
Kineto (``profile_aggregate=false``; alone with ``--shapes``, which the observer does not record).

Numerics tier (``--tier numerics``, ~50 ms step): no hook, the hook without the numerics
checks and the hook with them at their default intervals, interleaved; plus the training
thread's cost of each numerics piece timed directly (:mod:`overhead_numerics`).

Metrics tier (``--tier metrics``, ~50 ms step): the hook sending to a real node daemon that serves
``/metrics`` and is scraped every second, against one that does not (:mod:`overhead_metrics`).

Attach (``--attach``): the base tier with the hook attached and detached as ``diag attach`` does
(:mod:`overhead_attach`), the Flight Recorder at torch's default size.

The closed loop's cost (idle, and its automatic windows under a persistent fault) needs real
jobs under ``diag run``: ``bench/overhead_autocapture.py``.

A second hook arm (``--vs FIELD=VALUE``, base tier) runs interleaved with the other two in the
same blocks' rotation (ABC CBA), so two hook configurations compare in one run, not across runs
of a VM whose speed drifts between them.

    .venv/bin/python bench/overhead.py [--reps 4] [--tier all|base|kernel|numerics|metrics]
        [--attach] [--set FIELD=VALUE ...] [--vs FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.config import HookConfig
from diag.hook import core as hook

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead_attach import Attacher
from overhead_metrics import metrics_tier
from overhead_numerics import numerics_tier

_SINK_CODE = """
import json, socket, sys, threading
from diag.transport import codec
from diag.transport import framing as frames
counts = [0, 0]  # bytes, events
kinds = {}  # event kind: [events, encoded bytes]
lock = threading.Lock()
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
server.listen()
def read(conn):
    decoder = frames.FrameDecoder()
    while data := conn.recv(1 << 16):
        n = 0
        seen = []
        for frame in decoder.feed(data):
            batch, events = codec.decode_batch(frame)
            n += len(events)
            for msg, ev in zip(batch.events, events):
                kind = type(ev).kind
                if kind == "collective" and ev.step < 0:
                    kind = "collective_before"  # the ring's history, harvested at an install
                seen.append((kind, msg.ByteSize()))
            for block in batch.columns:  # a harvest's collectives: one block, its bytes shared
                kind = block.WhichOneof("payload")
                rows = list(getattr(block, kind).step)
                each = block.ByteSize() / max(len(rows), 1)
                for step in rows:
                    before = kind == "collective" and step < 0
                    seen.append(("collective_before" if before else kind, each))
        with lock:
            counts[0] += len(data)
            counts[1] += n
            for kind, size in seen:
                got = kinds.setdefault(kind, [0, 0])
                got[0] += 1
                got[1] += size
def serve():
    while True:
        conn, _ = server.accept()
        threading.Thread(target=read, args=(conn,), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
print("ready", flush=True)
for _ in sys.stdin:
    with lock:
        print(counts[0], counts[1], json.dumps(kinds, separators=(",", ":")), flush=True)
"""


class FrameSink:
    """Accepts hook connections on a Unix socket and decodes every frame (counts events) in a
    process of its own, as the node daemon does: decoding in the job's process held the GIL
    the training thread waits for (a batch of a few hundred events, ~5-10 ms), the hook arm's
    steady-state tail up to 2026-12-06."""

    def __init__(self, path: str) -> None:
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SINK_CODE, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self._proc.stdout is not None and self._proc.stdout.readline().strip() == "ready"

    def start(self) -> None:
        """Kept for the callers: the process serves from its start."""

    def _counts(self) -> tuple[int, int]:
        nbytes, nevents, _ = self.tally()
        return nbytes, nevents

    def tally(self) -> tuple[int, int, dict[str, tuple[int, int]]]:
        """Bytes off the socket, events, and per event kind (events, their encoded bytes)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("?\n")
        self._proc.stdin.flush()
        nbytes, nevents, kinds = self._proc.stdout.readline().split(" ", 2)
        by_kind = {k: (int(v[0]), int(v[1])) for k, v in json.loads(kinds).items()}
        return int(nbytes), int(nevents), by_kind

    @property
    def num_bytes(self) -> int:
        """Frames as they came off the socket, framing included."""
        return self._counts()[0]

    @property
    def num_events(self) -> int:
        return self._counts()[1]


def window_kinds(
    indices: list[int], begun: list[int], costs: list[tuple[str, int, int, int]]
) -> list[str]:
    """Each step of a hook's block as "window" (a profiler window's step), "after" (the step
    after one, and every later step begun before the hook thread had finished that window's
    summary: ``costs``' done times) or "steady" (``indices``: the hook's step numbers,
    ``begun``: each step's ``perf_counter_ns`` at its start)."""
    done = {int(c[0][1:]): c[3] for c in costs}
    out = []
    for index, t0 in zip(indices, begun, strict=True):
        if index in done:
            out.append("window")
        elif any(w < index and (index == w + 1 or t0 < end) for w, end in done.items()):
            out.append("after")
        else:
            out.append("steady")
    return out


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def _observer() -> str:
    """Build (or find) diag's operator observer for this torch: its path, or why not."""
    from diag.hook import opstats

    try:
        built = opstats.build()
    except Exception as exc:
        return f"not built ({type(exc).__name__}: {exc})".splitlines()[0]
    return str(built) if built is not None else "another build is running"


def kernel_tier(step: Callable[[], int], cfg: HookConfig, reps: int) -> None:
    """A/B of the hook with periodic profiler windows; window steps against ordinary steps."""
    steps_per_block, settle = 100, 20
    default_every = HookConfig().profile_every_steps
    times: dict[bool, list[int]] = {True: [], False: []}
    window_t: list[int] = []
    after_t: list[int] = []
    ordinary_t: list[int] = []
    costs: list[tuple[str, int, int]] = []
    pairs: list[float] = []
    aggregated = False
    for rep in range(reps):
        order = (True, False) if rep % 2 == 0 else (False, True)
        block_median: dict[bool, float] = {}
        for on in order:
            h = hook.install(cfg) if on else None
            for _ in range(settle):
                step()
            block: list[int] = []
            indices: list[int] = []
            begun: list[int] = []
            for _ in range(steps_per_block):
                indices.append(h.tracker.step if h is not None else -1)
                begun.append(time.perf_counter_ns())
                block.append(step())
            if h is not None:
                hook.uninstall()
                aggregated = aggregated or h.profiler.opstats is not None
                measured = set(indices)  # a window cut short by the uninstall is left out
                mine = [c for c in h.thread.window_costs if int(c[0][1:]) in measured]
                costs.extend(mine)
                kinds = window_kinds(indices, begun, mine)
                for kind, t in zip(kinds, block, strict=True):
                    {"window": window_t, "after": after_t}.get(kind, ordinary_t).append(t)
            times[on].extend(block)
            block_median[on] = statistics.median(block)
        pairs.append(block_median[True] / block_median[False] - 1)
    med_on, med_off = statistics.median(times[True]), statistics.median(times[False])
    how = "diag's operator observer" if aggregated else "Kineto"
    print(
        f"kernel tier: step ~50 ms, a 1-step profiler window every {cfg.profile_every_steps} "
        f"steps, record_shapes={cfg.profile_record_shapes}, CPU operators counted by {how} "
        f"({len(times[True])} steps per arm, {reps} ABBA reps, {len(costs)} windows)"
    )
    print(f"  (a) median  off {med_off / 1e6:8.3f} ms  on {med_on / 1e6:8.3f} ms  "
          f"overhead {100 * (med_on / med_off - 1):+.3f} %  "
          f"(median of block pairs {100 * statistics.median(pairs):+.3f} %)")  # fmt: skip
    if not (costs and window_t and ordinary_t):
        print("  no window fell inside a measured block")
        return
    med_ord, med_win = statistics.median(ordinary_t), statistics.median(window_t)
    med_after = statistics.median(after_t) if after_t else float("nan")
    train_ns = statistics.median(c[1] for c in costs)
    thread_ns = statistics.median(c[2] for c in costs)
    extra = med_win - med_ord
    print(f"  (b) window step median {med_win / 1e6:8.3f} ms vs ordinary {med_ord / 1e6:8.3f} ms: "
          f"{100 * (med_win / med_ord - 1):+.2f} %   steps after a window (until summarized) "
          f"{med_after / 1e6:8.3f} ms ({100 * (med_after / med_ord - 1):+.2f} %)")  # fmt: skip
    print(f"  per window: step extra {extra / 1e6:.3f} ms, of which profiler enable+disable "
          f"{train_ns / 1e6:.3f} ms (hook's timing); hook-thread processing {thread_ns / 1e6:.3f} "
          "ms (wall, pauses included)")  # fmt: skip
    amortized = (extra + thread_ns) / (default_every * med_ord)
    print(f"  amortized at the default interval (every {default_every} steps): "
          f"{100 * amortized:+.4f} % of the step")  # fmt: skip


class _Arm:
    """What one arm of the base tier measured."""

    def __init__(self) -> None:
        self.times: list[int] = []
        self.cpus: list[int] = []
        self.hook_cpu_ns = self.hook_steps = 0
        self.shipped_bytes = self.shipped_events = self.shipped_steps = 0
        self.kinds: dict[str, list[int]] = {}  # event kind: [events, encoded bytes] shipped
        self.split: dict[str, list[int]] = {"steady": [], "window": [], "after": []}
        self.pairs: list[float] = []  # block median / the adjacent no-hook block's median - 1
        self.cpu_pairs: list[float] = []  # block median CPU - the adjacent no-hook block's (ns)


def base_tier(
    step: Callable[[], int],
    cpu: list[int],
    sink: FrameSink,
    arms: dict[str, HookConfig],
    attacher: Attacher | None,
    target_ms: float,
    steps_per_block: int,
    settle: int,
    reps: int,
) -> None:
    """Blocks of the no-hook arm and of each hook arm (``on``, and ``vs`` when asked),
    interleaved: ABBA with two arms, ABC CBA with three."""
    names = ["off", *arms]
    got = {name: _Arm() for name in names}
    for rep in range(reps):
        order = names if rep % 2 == 0 else names[::-1]
        block_median: dict[str, float] = {}
        block_cpu: dict[str, float] = {}
        for name in order:
            arm, hook_cfg = got[name], arms.get(name)
            if hook_cfg is not None:
                bytes0, events0, kinds0 = sink.tally()
                attacher.attach(hook_cfg) if attacher else hook.install(hook_cfg)
            # Settle after (un)installing: install's one-off work (thread start, the first
            # Flight Recorder dump) happens once per job, not per step; it is not measured.
            for _ in range(settle):
                step()
            installed = hook.installed() if hook_cfg is not None else None
            clock = None
            if installed is not None and installed.thread.ident is not None:
                clock = time.pthread_getcpuclockid(installed.thread.ident)
                arm.hook_cpu_ns -= time.clock_gettime_ns(clock)
            block, indices, begun, cpus = [], [], [], []
            for _ in range(steps_per_block):
                indices.append(installed.tracker.step if installed is not None else -1)
                begun.append(time.perf_counter_ns())
                block.append(step())
                cpus.append(cpu[0])
            arm.cpus.extend(cpus)
            block_cpu[name] = statistics.median(cpus)
            if clock is not None:
                arm.hook_cpu_ns += time.clock_gettime_ns(clock)
                arm.hook_steps += steps_per_block
            if hook_cfg is not None:
                attacher.detach() if attacher else hook.uninstall()
                time.sleep(0.2)  # the sink reads what the uninstall flushed
                bytes1, events1, kinds1 = sink.tally()
                arm.shipped_bytes += bytes1 - bytes0
                arm.shipped_events += events1 - events0
                for kind, (n1, b1) in kinds1.items():
                    n0, b0 = kinds0.get(kind, (0, 0))
                    got_kind = arm.kinds.setdefault(kind, [0, 0])
                    got_kind[0] += n1 - n0
                    got_kind[1] += b1 - b0
                arm.shipped_steps += settle + steps_per_block
            if installed is not None:  # each block restarts the hook's count: one window
                costs = list(installed.thread.window_costs)
                for kind, t in zip(window_kinds(indices, begun, costs), block, strict=True):
                    arm.split[kind].append(t)
            arm.times.extend(block)
            block_median[name] = statistics.median(block)
        for name in arms:
            got[name].pairs.append(block_median[name] / block_median["off"] - 1)
            got[name].cpu_pairs.append(block_cpu[name] - block_cpu["off"])
    off = got["off"]
    med_off, p99_off = statistics.median(off.times), percentile(off.times, 0.99)
    cpu_off = statistics.median(off.cpus)
    print(f"step ~{target_ms:.0f} ms ({len(off.times)} steps per arm, {reps} reps, arms "
          f"{' '.join(names)} interleaved)")  # fmt: skip
    for name, arm in ((n, got[n]) for n in arms):
        if name == "vs":
            print(f"  arm vs (the hook with {', '.join(_VS)}), against the same no-hook arm:")
        on_t = arm.times
        med_on, p99_on = statistics.median(on_t), percentile(on_t, 0.99)
        print(f"  median  off {med_off / 1e6:8.3f} ms  {name} {med_on / 1e6:8.3f} ms  "
              f"overhead {100 * (med_on / med_off - 1):+.3f} %  "
              f"(median of block pairs {100 * statistics.median(arm.pairs):+.3f} %, "
              f"{(med_on - med_off) / 1e3:+.1f} us)")  # fmt: skip
        print(f"  p99     off {p99_off / 1e6:8.3f} ms  {name} {p99_on / 1e6:8.3f} ms  "
              f"overhead {100 * (p99_on / p99_off - 1):+.3f} %")  # fmt: skip
        print(f"  max     off {max(off.times) / 1e6:8.3f} ms  {name} {max(on_t) / 1e6:8.3f} ms")
        steady = arm.split["steady"]
        if steady:
            med_s, p99_s = statistics.median(steady), percentile(steady, 0.99)
            print(f"  steady state (hook on, neither a window step nor one before its summary: "
                  f"{len(steady)} of {len(on_t)} steps)")  # fmt: skip
            print(f"    median {name} {med_s / 1e6:8.3f} ms  "
                  f"overhead {100 * (med_s / med_off - 1):+.3f} %   p99 {name} {p99_s / 1e6:8.3f} "
                  f"ms  overhead {100 * (p99_s / p99_off - 1):+.3f} %")  # fmt: skip
        for kind in ("window", "after"):
            if arm.split[kind]:
                m = statistics.median(arm.split[kind])
                print(f"  {kind + ' steps':>13} ({len(arm.split[kind])}): median {m / 1e6:8.3f} ms "
                      f"({100 * (m / med_off - 1):+.1f} % of the no-hook median)")  # fmt: skip
        if arm.shipped_steps:
            print(f"  shipped to the daemon socket: {arm.shipped_bytes / arm.shipped_steps:,.0f} "
                  f"bytes and {arm.shipped_events / arm.shipped_steps:.2f} events per step (all "
                  f"steps of the hook's blocks, windows included)")  # fmt: skip
            print("    " + shipped_split(arm.kinds, arm.shipped_steps))
        cpu_on = statistics.median(arm.cpus)
        cpu_pair = statistics.median(arm.cpu_pairs)
        print(f"  training-thread CPU per step (median)  off {cpu_off / 1e6:8.3f} ms  "
              f"{name} {cpu_on / 1e6:8.3f} ms  ({(cpu_on - cpu_off) / 1e3:+.1f} us; median of "
              f"block pairs {cpu_pair / 1e3:+.1f} us, {100 * cpu_pair / cpu_off:+.3f} % of the "
              "step)")  # fmt: skip
        if arm.hook_steps:
            per = arm.hook_cpu_ns / arm.hook_steps
            print(f"  hook-thread CPU per step  {per / 1e3:8.1f} us  "
                  f"({100 * per / cpu_off:.2f} % of the step's CPU)")  # fmt: skip


_VS: list[str] = []  # the --vs pairs, for the printout

#: what a block ships once whatever its length: the profiler window's report and summaries (one
#: window per block: each install restarts the hook's step count) and the install's
#: announcements: the rank, its process groups, and the Flight Recorder's entries from before
#: the install (step -1: the ring's history, up to its 512 entries, which the first harvest
#: ships; in this bench the earlier blocks' collectives, which their own hooks had shipped)
ONCE_KINDS = {"profile_window": "window", "kernel": "window", "rank_info": "announcements",
              "process_group": "announcements", "collective_before": "announcements"}  # fmt: skip


def shipped_split(kinds: dict[str, list[int]], steps: int) -> str:
    """The encoded event bytes per step, the steady state's (every kind a block does not ship
    once) apart from the window's and the announcements', with the steady kinds' shares."""
    parts: dict[str, int] = {"steady": 0, "window": 0, "announcements": 0}
    steady: list[tuple[int, str]] = []
    for kind, (_, nbytes) in kinds.items():
        part = ONCE_KINDS.get(kind, "steady")
        parts[part] += nbytes
        if part == "steady":
            steady.append((nbytes, kind))
    top = ", ".join(f"{kind} {nbytes / steps:.0f}" for nbytes, kind in sorted(steady)[::-1][:4])
    return (f"encoded events per step: steady state {parts['steady'] / steps:.0f} bytes ({top}), "
            f"window {parts['window'] / steps:.0f}, the install's announcements and the ring's "
            f"history {parts['announcements'] / steps:.0f} (framing and batch headers not "
            "counted)")  # fmt: skip


def _fields(pairs: list[str]) -> dict[str, object]:
    """``FIELD=VALUE`` pairs as HookConfig keyword arguments, each value of its field's type."""
    defaults = HookConfig()
    out: dict[str, object] = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        if not hasattr(defaults, name):
            raise SystemExit(f"--set {pair}: HookConfig has no field {name!r}")
        kind = type(getattr(defaults, name))
        if kind is bool:
            out[name] = text.strip().lower() in ("1", "true", "yes", "on")
        else:
            out[name] = kind(text)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=4, help="ABBA repetitions per step size")
    p.add_argument(
        "--tier",
        choices=("all", "base", "thread", "kernel", "numerics", "metrics"),
        default="all",
    )
    p.add_argument("--window-every", type=int, default=50, help="kernel tier: steps per window")
    p.add_argument("--trace-dir", default="", help="kernel tier: keep raw traces here")
    p.add_argument(
        "--shapes", action="store_true", help="kernel tier: periodic windows record input shapes"
    )
    p.add_argument(
        "--attach", action="store_true", help="base tier with the hook as diag attach installs it"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a HookConfig field for the hook arm (e.g. capture_collectives=false): which part "
        "of the hook a cost comes from",
    )
    p.add_argument(
        "--vs",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="base tier: a second hook arm with these HookConfig fields (on top of --set), "
        "interleaved with the no-hook arm and the first hook arm in the same run",
    )
    args = p.parse_args()
    _VS.extend(args.vs)

    tmp = tempfile.mkdtemp(prefix="diag-bench-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its sockets and store
    sink = FrameSink(os.path.join(tmp, "daemon.sock"))
    sink.start()
    cfg = HookConfig(daemon_sock=os.path.join(tmp, "daemon.sock"), **_fields(args.set))
    if args.set:
        print("hook arm with " + ", ".join(args.set))
    attacher = Attacher(cfg, tmp) if args.attach else None
    if attacher is None:
        hook.install(cfg)  # before the process group, so the Flight Recorder is sized
        hook.uninstall()

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(tmp, "store"), 1),
                            rank=0, world_size=1)  # fmt: skip
    burn_a = torch.randn(128, 128)
    iters = [0]

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = burn_a
            for _ in range(iters[0]):
                z = torch.tanh(z @ burn_a)
            return self.net(x)

    model = DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1))
    loader = iter(DataLoader(data, batch_size=32, shuffle=True))
    token = torch.zeros(1)
    cpu = [0]  # the training thread's CPU time in the last step (ns)

    def step() -> int:
        nonlocal loader
        t0 = time.perf_counter_ns()
        c0 = time.thread_time_ns()
        try:
            x, y = next(loader)
        except StopIteration:
            loader = iter(DataLoader(data, batch_size=32, shuffle=True))
            x, y = next(loader)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        dist.all_reduce(token)
        opt.step()
        cpu[0] = time.thread_time_ns() - c0
        return time.perf_counter_ns() - t0

    def cpu_step() -> int:
        step()
        return cpu[0]

    def calibrate(target_ms: float) -> None:  # on CPU time: a busy host stretches wall time
        iters[0] = 0
        base = statistics.median(cpu_step() for _ in range(20))
        iters[0] = 50
        per_iter = (statistics.median(cpu_step() for _ in range(10)) - base) / 50
        iters[0] = max(0, round((target_ms * 1e6 - base) / max(per_iter, 1.0)))

    if args.tier in ("all", "kernel"):
        calibrate(50.0)
        kcfg = dataclasses.replace(
            cfg, profile_first_step=20, profile_every_steps=args.window_every,
            trace_dir=args.trace_dir, profile_record_shapes=args.shapes,
        )  # fmt: skip
        # the periodic windows as shipped (diag's operator observer, where built), then Kineto's
        if kcfg.profile_aggregate and not args.shapes:
            print(f"diag's operator observer: {_observer()}")
            kernel_tier(step, kcfg, args.reps)
        kernel_tier(step, dataclasses.replace(kcfg, profile_aggregate=False), args.reps)
    if args.tier in ("all", "metrics"):
        calibrate(50.0)
        metrics_tier(step, cpu, cfg, args.reps)
    if args.tier in ("all", "numerics"):
        calibrate(50.0)
        sample = next(iter(DataLoader(data, batch_size=32)))
        numerics_tier(step, cfg, model, opt, sample, args.reps)
    # Blocks of ~5 s, so the hook thread's pacing settles as it does in a long job.
    sizes = ((50.0, 100, 20), (5.0, 1000, 200)) if args.tier in ("all", "base") else ()
    arms = {"on": cfg}
    if args.vs:
        arms["vs"] = dataclasses.replace(cfg, **_fields(args.vs))
    for target_ms, steps_per_block, settle in sizes:
        calibrate(target_ms)
        base_tier(step, cpu, sink, arms, attacher, target_ms, steps_per_block, settle, args.reps)
    if args.tier in ("all", "thread"):
        # The training thread's own cost, where the step is little more than the hook's work:
        # short blocks, many of them, so the VM's drift cancels out between the arms.
        calibrate(1.0)
        base_tier(step, cpu, sink, arms, attacher, 1.0, 60, 5, max(30, args.reps))
    print(f"events received by the sink: {sink.num_events}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
