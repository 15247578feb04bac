"""``diag attach [PID | --job RUN_ID] [--duration S] [--steps N] [--out DIR] [--analyzer ADDR]``.

Composition root of an attach on one node: find the torchrun workers of the job
(:mod:`diag.attach.discover`), start an analyzer (embedded unless one is given) and a node daemon
as ``diag run`` does (:mod:`diag.cli.runtime`), inject the hook into every worker
(:mod:`diag.attach.inject`), show the live view, and detach at the end of ``--duration``, once
every attached rank has recorded ``--steps`` steps (the amount of evidence, whatever the pace: a
job on a loaded machine takes longer to give it), on Ctrl-C or SIGTERM, or when the job ends,
whichever comes first. The job is never stopped or signalled: it runs to its own exit code.

Exit status: 0 after a detach; 2 with one line when nothing could be attached (not a torchrun job,
a PID that vanished, permission, no injector); the workers already injected are detached then.
On a multi-node job, run ``diag attach`` on each node with the same ``--analyzer``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from diag.attach import AttachError, discover, inject
from diag.cli import runtime
from diag.cli.run_cmd import add_auto_capture_argument, new_run_id
from diag.cli.security_args import add_security_arguments, export_client_security
from diag.cli.service_args import add_alert_arguments, add_metrics_arguments
from diag.config import HookConfig, default_host, load_config

STATUS_WAIT_S = 10.0  # the most an injected worker may take to report that its hook runs
DETACH_WAIT_S = 5.0  # the most detaching may take (watcher poll + final flush)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pid", nargs="?", type=int, metavar="PID", help="the torchrun agent's or a worker's pid"
    )
    parser.add_argument("--job", metavar="RUN_ID", help="every worker with this run id instead")
    parser.add_argument(
        "--duration",
        type=float,
        default=0.0,
        metavar="S",
        help="detach after S seconds (default: at Ctrl-C)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=0,
        metavar="N",
        help="detach once every attached rank has recorded N steps (default: no step limit)",
    )
    parser.add_argument(
        "--out", type=Path, metavar="RUN_DIR", help="run directory (default runs/attach-<run id>)"
    )
    parser.add_argument(
        "--analyzer", metavar="HOST:PORT", help="ship to this analyzer instead of an embedded one"
    )
    add_auto_capture_argument(parser)
    add_security_arguments(parser)
    add_metrics_arguments(
        parser, what="the node's ranks and GPUs on PORT and of the job (findings) on PORT+1"
    )
    add_alert_arguments(parser)
    parser.add_argument(
        "--hang-min-s",
        type=float,
        default=None,
        help="report a hang after this long without progress (default: the hook's hang_min_s)",
    )
    parser.add_argument(
        "--live", choices=("auto", "on", "off"), default="auto", help="live view (auto: terminal)"
    )


def run(args: argparse.Namespace) -> int:
    export_client_security(args)
    workers = discover.find_workers(args.pid, job=args.job)
    injector = inject.choose(inject.target_version(workers[0].pid))
    out: Path = args.out or Path("runs") / f"attach-{new_run_id()}"
    if (out / "store").exists() and args.analyzer is None:
        raise AttachError(f"{out} already holds a run; choose another --out")
    return attach(workers, injector, args, out)


def attach(
    workers: Sequence[discover.Worker],
    injector: inject.Injector,
    args: argparse.Namespace,
    out: Path,
    *,
    inject_fn: Callable[[inject.Injector, int, str], None] = inject.inject,
) -> int:
    """Attach to ``workers`` until the duration ends, Ctrl-C or the job ends; 0, or
    :class:`AttachError` after detaching whatever was attached."""
    run_id = out.resolve().name
    (out / "logs").mkdir(parents=True, exist_ok=True)
    host = default_host()
    command = _agent_command(workers[0].pid)
    runtime.write_run_json(
        out, run_id=run_id, command=command, host=host, attached_to=[w.pid for w in workers]
    )
    tmp = Path(tempfile.mkdtemp(prefix="diag-attach-"))
    os.chmod(tmp, 0o755)  # the workers may run as another user
    sock_path, stop_file = str(tmp / "daemon.sock"), tmp / "detach"
    hook_cfg = load_config(
        "hook",
        overrides={
            "daemon_sock": sock_path,
            "job_id": run_id,
            "trace_dir": str((out / "traces").resolve()),
            "crash_dir": str((out / "crash").resolve()),
            "hang_min_s": args.hang_min_s,
        },
    )
    deadline = time.time() + args.duration + DETACH_WAIT_S if args.duration > 0 else 0.0
    runtime.build_opstats(out)
    launcher = runtime.Launcher(host=host, job_id=run_id)
    analyzer: runtime.EmbeddedAnalyzer | None = None
    daemon = None
    target = args.analyzer
    injected: list[discover.Worker] = []
    node_metrics, job_metrics = runtime.metrics_ports(args)
    with _detach_on_signals():
        try:
            if target is None:
                analyzer = runtime.EmbeddedAnalyzer.start(
                    out,
                    auto_capture=getattr(args, "auto_capture", None) or "on",
                    settings=runtime.analyzer_settings(args, job_metrics),
                )
                target = analyzer.target
            daemon = runtime.start_daemon(
                listen_sock=sock_path,
                analyzer=target,
                spool_dir=out / "spool",
                log_path=out / "logs" / "daemon.log",
                job_id=run_id,
                gpu_backend="nvml",
                fake_gpus=0,
                metrics_port=node_metrics,
                metrics_addr=getattr(args, "metrics_addr", None),
            )
            if daemon is None:
                raise AttachError(
                    f"the node daemon did not start (see {out / 'logs' / 'daemon.log'})"
                )
            launcher.send(sock_path, runtime.run_event(launcher, "start", command=command))
            for w in workers:
                if not discover.still_running(w):
                    raise AttachError(f"pid {w.pid} (rank {w.rank}) vanished before the attach")
                spec = _spec(hook_cfg, tmp, w, stop_file, deadline)
                inject_fn(injector, w.pid, inject.payload(spec))
                injected.append(w)
            states = _wait_states(tmp, injected, ("attached", "reused", "failed"), STATUS_WAIT_S)
            _report_states(injected, states)
            _watch(workers, runtime.SummarySource(analyzer, args.analyzer), args)
        finally:
            stop_file.touch()
            _wait_states(tmp, injected, ("detached", "reused", "failed"), DETACH_WAIT_S)
            if daemon is not None:
                runtime.stop_daemon(daemon)
            spooled = out / "spool" if daemon is not None else None
            summary = analyzer.stop(spooled) if analyzer is not None else None
            shutil.rmtree(tmp, ignore_errors=True)
    if summary is None and target is not None:
        summary = runtime.SummarySource(None, target).get()
    _print_final(summary, out, workers)
    return 0


@contextlib.contextmanager
def _detach_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT both mean "detach now" while attached (``KeyboardInterrupt`` in the main
    thread: the watch ends and the hooks are detached), SIGINT also where it arrived ignored (a
    background job of a non-interactive shell starts with SIGINT ignored, and Python then leaves
    it so: a CI run's ``kill -INT`` left a job hooked). A stop must never leave hooks in a job.
    The first signal interrupts; later ones are ignored while the hooks detach (each hook also
    detaches by itself when this process is gone). No-op off the main thread (signal handlers can
    only be set there)."""
    fired: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise KeyboardInterrupt

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, interrupt)
    except ValueError:
        pass
    try:
        yield
    finally:
        for old, handler in previous.items():
            signal.signal(old, handler)


def _spec(
    cfg: HookConfig, tmp: Path, w: discover.Worker, stop_file: Path, deadline: float
) -> dict[str, Any]:
    return {
        "hook": dataclasses.asdict(cfg),
        "status": str(tmp / f"{w.pid}.json"),
        "stop_file": str(stop_file),
        "owner_pid": os.getpid(),
        "deadline": deadline,
    }


def _agent_command(worker_pid: int) -> list[str]:
    """The torchrun agent's command line (for the run's record), else ``torchrun``."""
    try:
        ppid = int(Path(f"/proc/{worker_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        raw = Path(f"/proc/{ppid}/cmdline").read_bytes()
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a] or ["torchrun"]
    except (OSError, IndexError, ValueError):
        return ["torchrun"]


def _wait_states(
    tmp: Path, workers: Sequence[discover.Worker], wanted: tuple[str, ...], timeout_s: float
) -> dict[int, dict[str, Any]]:
    """Each worker's last status ({} if none) once all are in ``wanted`` or gone (or timeout)."""
    deadline = time.monotonic() + timeout_s
    states: dict[int, dict[str, Any]] = {}
    while True:
        for w in workers:
            try:
                states[w.pid] = json.loads((tmp / f"{w.pid}.json").read_text())
            except (OSError, ValueError):
                states.setdefault(w.pid, {})
        pending = [
            w
            for w in workers
            if states[w.pid].get("state") not in wanted and discover.still_running(w)
        ]
        if not pending or time.monotonic() >= deadline:
            return states
        time.sleep(0.05)


def _report_states(workers: Sequence[discover.Worker], states: dict[int, dict[str, Any]]) -> None:
    attached = [w for w in workers if states[w.pid].get("state") == "attached"]
    for w in workers:
        state = states[w.pid]
        if state.get("state") == "reused":
            print(
                f"diag attach: rank {w.rank} (pid {w.pid}) already has a hook (job "
                f"{state.get('job_id') or '?'}): reused, its events go to its own daemon",
                file=sys.stderr,
            )
        elif state.get("state") != "attached":
            why = state.get("error") or (
                "vanished" if not discover.still_running(w) else "no answer from the injected hook"
            )
            raise AttachError(f"pid {w.pid} (rank {w.rank}): hook not started: {why}")
    ranks = ",".join(str(w.rank) for w in attached) or "none"
    print(
        f"diag attach: hooked ranks {ranks} of job {workers[0].run_id} ({len(attached)} "
        f"of {len(workers)} on this node)",
        file=sys.stderr,
    )


def _watch(
    workers: Sequence[discover.Worker], source: runtime.SummarySource, args: argparse.Namespace
) -> None:
    """Until ``--duration`` ends, every rank has ``--steps`` steps, Ctrl-C, or every worker is
    gone; live view on a terminal."""
    live = args.live == "on" or (args.live == "auto" and sys.stdout.isatty())
    start = time.monotonic()
    end = start + args.duration if args.duration > 0 else float("inf")
    want = max(0, int(getattr(args, "steps", 0) or 0))
    checked = [start]

    def enough_steps() -> bool:
        if not want or time.monotonic() - checked[0] < 1.0:
            return False
        checked[0] = time.monotonic()
        return fewest_steps(source.get(), len(workers)) >= want

    def going() -> bool:
        return (
            time.monotonic() < end
            and any(discover.still_running(w) for w in workers)
            and not enough_steps()
        )

    try:
        if not live:
            while going():
                time.sleep(0.2)
            return
        from rich.live import Live

        from diag.cli.render import tables
        from diag.cli.render.console import stdout_console

        history: list[tuple[float, int]] = []  # (time, steps) of the last ~10 s: the rate
        initial = tables.live(None, elapsed_s=0, steps_per_s=None)
        with Live(initial, console=stdout_console()) as view:
            while going():
                time.sleep(1.0)
                summary, now = source.get(), time.monotonic()
                history = [
                    *history[-10:],
                    (now, int((summary or {}).get("run", {}).get("steps", 0) or 0)),
                ]
                (t0, s0), (t1, s1) = history[0], history[-1]
                rate = (s1 - s0) / (t1 - t0) if t1 > t0 else None
                view.update(tables.live(summary, elapsed_s=now - start, steps_per_s=rate))
    except KeyboardInterrupt:
        print("diag attach: detaching", file=sys.stderr)


def fewest_steps(summary: dict[str, Any] | None, num_ranks: int) -> int:
    """The fewest steps any of the ``num_ranks`` attached ranks has recorded (0 while a rank has
    reported none)."""
    ranks = (summary or {}).get("ranks") or []
    counts = [int(r.get("steps") or 0) for r in ranks if isinstance(r, dict)]
    if len(counts) < num_ranks:
        return 0
    return min(counts, default=0)


def _print_final(
    summary: dict[str, Any] | None, out: Path, workers: Sequence[discover.Worker]
) -> None:
    from diag.cli.render import tables
    from diag.cli.render.console import stdout_console

    console = stdout_console()
    if summary:
        console.print(tables.report(summary))
    else:
        console.print("diag: no summary available (the analyzer was not reachable)")
    running = sum(discover.still_running(w) for w in workers)
    console.print(f"run directory: {out}   detached; {running} worker(s) still running")
