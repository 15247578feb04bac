"""``diag run [--out DIR] [--analyzer HOST:PORT] -- torchrun ... script.py args``.

Composition root of a diagnosed run on one node: an analyzer (embedded unless one is given), a node
daemon (a subprocess, so that its failure cannot take the job down), the hook injected into every
torchrun worker through ``sitecustomize``, a live view, and the run directory. Exits with the job's
exit code. diag's own failures are reported and the job runs on without diagnostics.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diag.cli import exit_report, runtime
from diag.cli.security_args import add_security_arguments, export_client_security
from diag.cli.service_args import add_alert_arguments, add_metrics_arguments
from diag.config import default_host
from diag.errors import ConfigError

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- torchrun ... script.py args")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``diag run`` and ``diag demo``."""
    parser.add_argument(
        "--out", type=Path, metavar="RUN_DIR", help="run directory (default runs/<run id>)"
    )
    parser.add_argument(
        "--analyzer", metavar="HOST:PORT", help="ship to this analyzer instead of an embedded one"
    )
    parser.add_argument(
        "--gpu-backend",
        choices=("nvml", "fake", "none"),
        default="nvml",
        help="GPU telemetry source of the node daemon (default nvml; 'fake' simulates GPUs)",
    )
    parser.add_argument(
        "--fake-gpus", type=int, default=0, metavar="N", help="devices of the fake backend"
    )
    parser.add_argument(
        "--detector-config",
        type=Path,
        metavar="FILE.toml",
        help="detector thresholds for the embedded analyzer's triage ([node] min_ratio = 1.1)",
    )
    add_auto_capture_argument(parser)
    add_security_arguments(parser)
    add_metrics_arguments(
        parser, what="the node's ranks and GPUs on PORT and of the job (findings) on PORT+1"
    )
    add_alert_arguments(parser)
    parser.add_argument(
        "--triage-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="run the live triage every S seconds (default 5)",
    )
    parser.add_argument(
        "--live",
        choices=("auto", "on", "off"),
        default="auto",
        help="live view while the job runs (auto: only on a terminal)",
    )


def add_auto_capture_argument(parser: argparse.ArgumentParser) -> None:
    """``--auto-capture``: ``diag run``, ``diag attach``, ``diag analyzer``."""
    parser.add_argument(
        "--auto-capture",
        choices=("on", "observe", "off"),
        default=None,
        help="fetch the evidence a live finding lacks (a profiler window on the suspect and its "
        "peers, at most one per 2 minutes): on (default), observe (only log what it would "
        "request), off",
    )


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ConfigError(
            "nothing to run: give the job after --, e.g. diag run -- torchrun ... x.py"
        )
    return run_job(command, args)


def run_job(
    command: list[str],
    args: argparse.Namespace,
    on_triage: Callable[[Any], None] | None = None,
) -> int:
    """Run ``command`` under diag with the options of :func:`add_run_arguments`;
    ``on_triage`` sees every live triage result of the embedded analyzer (none with
    ``--analyzer``)."""
    detectors = _detector_config(args)
    export_client_security(args)
    if shutil.which(command[0]) is None:
        raise ConfigError(f"cannot start {command[0]!r}: no such command")
    if not is_torchrun(command):
        print(
            f"diag run: warning: {Path(command[0]).name!r} is not torchrun: diag hooks the "
            "workers torchrun starts (LOCAL_RANK set); another process is watched only if it "
            "calls diag.hook.install() itself",
            file=sys.stderr,
        )
    out: Path = args.out or Path("runs") / new_run_id()
    run_id = out.resolve().name
    if (out / "store").exists() and args.analyzer is None:
        raise ConfigError(f"{out} already holds a run; choose another --out")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    host = default_host()
    runtime.write_run_json(out, run_id=run_id, command=command, host=host)
    sock_dir = Path(tempfile.mkdtemp(prefix="diag-"))
    sock_path = str(sock_dir / "daemon.sock")
    launcher = runtime.Launcher(host=host, job_id=run_id)
    analyzer: runtime.EmbeddedAnalyzer | None = None
    daemon = None
    target = args.analyzer
    exit_code = 1
    node_metrics, job_metrics = runtime.metrics_ports(args)
    try:
        if target is None:
            try:
                analyzer = runtime.EmbeddedAnalyzer.start(
                    out,
                    detectors,
                    auto_capture=getattr(args, "auto_capture", None) or "on",
                    triage_interval_s=getattr(args, "triage_interval", 5.0),
                    settings=runtime.analyzer_settings(args, job_metrics),
                )
                target = analyzer.target
                if on_triage is not None:
                    analyzer.listen(on_triage)
            except Exception as exc:  # diag failing must not stop the job
                print(f"diag run: analyzer failed ({exc}); running without it", file=sys.stderr)
        daemon = runtime.start_daemon(
            listen_sock=sock_path,
            analyzer=target or "127.0.0.1:1",
            spool_dir=out / "spool",
            log_path=out / "logs" / "daemon.log",
            job_id=run_id,
            gpu_backend=args.gpu_backend,
            fake_gpus=args.fake_gpus,
            metrics_port=node_metrics,
            metrics_addr=getattr(args, "metrics_addr", None),
        )
        if daemon is not None:
            runtime.write_run_json(out, daemon_pid=daemon.pid, analyzer=target)
            launcher.send(sock_path, runtime.run_event(launcher, "start", command=command))
        exit_code, duration_ns = _run_and_watch(command, args, out, sock_path, run_id, analyzer)
        if daemon is not None:
            # Exit statuses of failed ranks, from torchrun's report: only the launcher has them.
            exits = exit_report.rank_exits(
                exit_report.read_failures(out / "logs" / "job.log"),
                host=host, job_id=run_id, source=launcher.source, next_seq=launcher.next_seq,
            )  # fmt: skip
            launcher.send(
                sock_path,
                *exits,
                runtime.run_event(
                    launcher, "end", command=command, exit_code=exit_code, duration_ns=duration_ns
                ),
            )
        runtime.write_run_json(out, exit_code=exit_code, duration_ns=duration_ns)
    finally:
        if daemon is not None:
            runtime.stop_daemon(daemon)
        spooled = out / "spool" if daemon is not None else None
        summary = analyzer.stop(spooled) if analyzer is not None else None
        shutil.rmtree(sock_dir, ignore_errors=True)
    if summary is None and target is not None:
        summary = runtime.SummarySource(None, target).get()
    runtime.print_final(summary, out=out, exit_code=exit_code)
    return exit_code


def is_torchrun(command: list[str]) -> bool:
    """Whether ``command`` starts torchrun (``torchrun ...``, ``python -m torch.distributed.run``
    or ``.launch``), possibly behind ``env``/``nice``/``numactl``-style wrappers."""
    for i, arg in enumerate(command):
        name = Path(arg).name
        if name == "torchrun":
            return True
        if arg == "-m" and i + 1 < len(command):
            return command[i + 1] in ("torch.distributed.run", "torch.distributed.launch")
    return False


def _detector_config(args: argparse.Namespace) -> dict[str, object] | None:
    """The ``--detector-config`` file, read before anything starts (a bad one: exit 2)."""
    if args.detector_config is None:
        return None
    if args.analyzer is not None:
        raise ConfigError(
            f"--detector-config {args.detector_config} sets the embedded analyzer's detectors; "
            "with --analyzer give it to diag analyzer instead"
        )
    from diag.diagnose.detector_config import load_detector_config

    return load_detector_config(args.detector_config)


def _run_and_watch(
    command: list[str],
    args: argparse.Namespace,
    out: Path,
    sock_path: str,
    run_id: str,
    analyzer: runtime.EmbeddedAnalyzer | None,
) -> tuple[int, int]:
    """Start the job with the hook injected, show it until it ends: (exit code, wall time ns)."""
    env = runtime.worker_env(
        os.environ,
        daemon_sock=sock_path,
        job_id=run_id,
        trace_dir=out / "traces",
        crash_dir=out / "crash",
    )
    live = args.live == "on" or (args.live == "auto" and sys.stdout.isatty())
    runtime.build_opstats(out)
    start = time.monotonic()
    job = runtime.Job.start(command, env=env, log_path=out / "logs" / "job.log")
    previous = {s: signal.signal(s, job.forward_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        source = runtime.SummarySource(analyzer, args.analyzer)
        exit_code = runtime.watch(job, source, live=live)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return exit_code, int((time.monotonic() - start) * 1e9)
