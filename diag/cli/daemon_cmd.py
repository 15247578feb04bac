"""``diag daemon``: run the per-node daemon until SIGTERM or SIGINT, then flush and exit 0.

``diag run`` starts it as ``diag daemon --listen SOCK --analyzer HOST:PORT --spool DIR ...
--exit-with PID`` and waits for ``SOCK`` to exist: the daemon creates it atomically, already
listening. ``--exit-with`` ties it to the process that started it: when that one is gone (a
``diag run`` or ``diag attach`` killed with SIGKILL, which cannot stop its daemon), the daemon
flushes and exits as on SIGTERM instead of staying behind on the node. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from diag.cli.security_args import add_security_arguments, export_client_security
from diag.cli.service_args import add_metrics_arguments, write_port_file

OWNER_POLL_S = 1.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", metavar="SOCK", help="Unix socket the local hooks connect to")
    parser.add_argument("--analyzer", metavar="HOST:PORT", help="the analyzer's gRPC address")
    parser.add_argument("--spool", metavar="DIR", help="spool directory (kept across restarts)")
    parser.add_argument("--gpu-backend", choices=("nvml", "fake", "none"), help="GPU telemetry")
    parser.add_argument("--fake-gpus", type=int, metavar="N", help="devices of the fake backend")
    parser.add_argument("--job-id", metavar="ID", help="job id stamped on the daemon's events")
    parser.add_argument("--host", metavar="NAME", help="host name to report (default: DIAG_HOST)")
    parser.add_argument("--config", metavar="FILE", help="TOML file with a [daemon] table")
    parser.add_argument(
        "--collectives",
        choices=("raw", "summary", "auto"),
        help="ship every collective (raw), one summary per rank, step and group with the raw rows "
        "kept here for the analyzer to fetch (summary), or summary from 256 ranks up (auto, the "
        "default)",
    )
    parser.add_argument(
        "--exit-with", type=int, metavar="PID", help="flush and exit when process PID is gone"
    )
    add_metrics_arguments(parser, what="the node's ranks and GPUs (DCGM exporter names)")
    parser.add_argument(
        "--metrics-port-file", metavar="FILE", help="write the bound metrics port to this file"
    )
    add_security_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from diag.config import load_config
    from diag.daemon.daemon import Daemon

    export_client_security(args)
    cfg = load_config(
        "daemon",
        file=args.config,
        overrides={
            "listen_sock": args.listen,
            "analyzer": args.analyzer,
            "spool_dir": args.spool,
            "gpu_backend": args.gpu_backend,
            "fake_gpus": args.fake_gpus,
            "job_id": args.job_id,
            "host": args.host,
            "collectives": args.collectives,
            "metrics_port": args.metrics_port,
            "metrics_addr": args.metrics_addr,
        },
    )
    if not getattr(args, "verbose", False):
        logging.getLogger("diag").setLevel(logging.INFO)
    daemon = Daemon.from_config(cfg)
    if daemon.metrics_server is not None:
        logging.getLogger("diag").info("metrics on %s", daemon.metrics_server.url)
        if args.metrics_port_file:
            write_port_file(args.metrics_port_file, daemon.metrics_server.port)

    def _stop(signum: int, frame: FrameType | None) -> None:
        # Not inline: the main thread may hold the lock request_stop() takes when the signal lands.
        threading.Thread(target=daemon.request_stop, name="diag-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.exit_with:
        threading.Thread(
            target=watch_owner,
            args=(args.exit_with, daemon.request_stop),
            name="diag-owner",
            daemon=True,
        ).start()
    daemon.run()
    return 0


def watch_owner(pid: int, stop: Callable[[], None], poll_s: float = OWNER_POLL_S) -> None:
    """Call ``stop`` once process ``pid`` has exited (a pidfd where the kernel has them: no
    confusion with a later process given the same pid; else a signal-0 probe every ``poll_s``)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        stop()
        return
    except (AttributeError, OSError):
        fd = -1
    if fd >= 0:
        import select

        with select.epoll() as ep:
            ep.register(fd, select.EPOLLIN)
            while not ep.poll():
                pass
        os.close(fd)
        stop()
        return
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        except OSError:
            pass
        time.sleep(poll_s)
    stop()
