"""``diag analyzer``: serve the analyzer over gRPC into a run directory until SIGTERM/SIGINT.

Prints ``analyzer listening on HOST:PORT`` on stdout once it accepts connections (and writes the
port to ``--port-file``, atomically, for scripts that bound port 0). On SIGTERM or SIGINT it stops
taking requests, folds everything into Parquet parts, records what the closed loop's pending
requests came to (``auto_capture.jsonl``; a final triage, only when one is pending) and exits 0.
Logs go to stderr (warnings) and ``RUN_DIR/logs/analyzer.log`` (info).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from diag.cli.run_cmd import add_auto_capture_argument
from diag.cli.security_args import add_security_arguments
from diag.cli.service_args import (
    add_alert_arguments,
    add_metrics_arguments,
    alert_overrides,
    write_port_file,
)
from diag.config import AnalyzerConfig, load_config
from diag.errors import InputError

if TYPE_CHECKING:
    from diag.analyzer.core import AnalyzerCore

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-dir", required=True, metavar="RUN_DIR", help="run directory (created if missing)"
    )
    parser.add_argument(
        "--bind", default=None, metavar="HOST:PORT", help="listen here (default 127.0.0.1:0)"
    )
    parser.add_argument(
        "--port-file", default=None, metavar="FILE", help="write the bound port to this file"
    )
    parser.add_argument(
        "--config", default=None, metavar="FILE.toml", help="config file ([analyzer] table)"
    )
    add_auto_capture_argument(parser)
    parser.add_argument(
        "--detector-config",
        default=None,
        metavar="FILE.toml",
        help="detector thresholds for the live triage ([node] min_ratio = 1.1, ...)",
    )
    add_metrics_arguments(parser, what="the job (findings, straggler scores, ingest)")
    parser.add_argument(
        "--metrics-port-file", metavar="FILE", help="write the bound metrics port to this file"
    )
    add_alert_arguments(parser)
    add_security_arguments(parser, server=True)


def _log_to_file(run_dir: Path) -> logging.Handler:
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(logs / "analyzer.log")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    diag_logger = logging.getLogger("diag")
    diag_logger.addHandler(handler)
    if diag_logger.getEffectiveLevel() > logging.INFO:
        # Record INFO for the file, while the console handlers keep the level they had.
        root_level = logging.getLogger().getEffectiveLevel()
        for h in logging.getLogger().handlers:
            if h.level < root_level:
                h.setLevel(root_level)
        diag_logger.setLevel(logging.INFO)
    return handler


def run(args: argparse.Namespace) -> int:
    cfg: AnalyzerConfig = load_config(
        "analyzer",
        file=args.config,
        overrides={
            "run_dir": args.run_dir,
            "bind": args.bind,
            "auto_capture": args.auto_capture,
            "token_file": args.token_file,
            "tls_cert": args.tls_cert,
            "tls_key": args.tls_key,
            "tls_ca": args.tls_ca,
            "insecure": args.insecure,
            "metrics_port": args.metrics_port,
            "metrics_addr": args.metrics_addr,
            **alert_overrides(args),
        },
    )
    detectors = None
    if args.detector_config:
        from diag.diagnose.detector_config import load_detector_config

        detectors = load_detector_config(args.detector_config)
    run_dir = Path(cfg.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"{run_dir} is not a directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    handler = _log_to_file(run_dir)
    from diag.analyzer.service import join_background, serve  # grpc, pandas: this command only
    from diag.transport.security import is_loopback

    host = cfg.bind.rsplit(":", 1)[0]
    if not is_loopback(host) and not cfg.token_file and cfg.insecure:
        log.warning(
            "binding %s with --insecure: the analyzer accepts events from any machine", cfg.bind
        )
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    try:
        server, port, core = serve(cfg, detectors=detectors)
        previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            if core.recovery.num_wal_files or core.recovery.corrupt_parts:
                log.info("start-up recovery: %s", core.recovery)
            if args.port_file:
                write_port_file(args.port_file, port)
            if core.metrics_url:
                print(f"metrics on {core.metrics_url}", flush=True)
                if args.metrics_port_file:
                    write_port_file(args.metrics_port_file, core.metrics_port)
            print(f"analyzer listening on {host}:{port}", flush=True)
            log.info("analyzer listening on %s:%d, run dir %s", host, port, run_dir)
            stop.wait()
            log.info("stopping")
        finally:
            server.stop(grace=2.0).wait()
            core.close()
            join_background(core)
            _settle(core)
            core.release()
            for s, h in previous.items():
                signal.signal(s, h)
    finally:
        logging.getLogger("diag").removeHandler(handler)
        handler.close()
    return 0


def _settle(core: AnalyzerCore) -> None:
    """The closed loop's pending requests recorded as decided (or not back) before the
    analyzer exits; a failure is one line in the log, the run's data is already stored."""
    try:
        if core.settle():
            log.info("settled the closed loop's pending requests")
    except Exception as exc:
        log.warning("could not settle the closed loop's pending requests: %s", exc)
