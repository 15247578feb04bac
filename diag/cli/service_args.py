"""Arguments the long-running commands share: a Prometheus endpoint and alerts.

``--metrics-port``/``--metrics-addr`` (``diag daemon``, ``diag analyzer``, ``diag run``,
``diag attach``): off unless asked, loopback unless told. ``--alert-webhook``/``--alert-command``
(``diag analyzer``, ``diag run``, ``diag attach``): where each new or escalated finding goes
(:mod:`diag.analyzer.alerts`).
"""

from __future__ import annotations

import argparse

from diag.fsutil import atomic_write


def add_metrics_arguments(parser: argparse.ArgumentParser, *, what: str) -> None:
    """``--metrics-port`` / ``--metrics-addr``: a Prometheus endpoint, off unless asked."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help=f"serve Prometheus metrics of {what} on http://ADDR:PORT/metrics (0: any free "
        "port; default: off)",
    )
    parser.add_argument(
        "--metrics-addr",
        metavar="ADDR",
        help="address the metrics endpoint binds (default 127.0.0.1; 0.0.0.0 for a scraper on "
        "another machine)",
    )


def add_alert_arguments(parser: argparse.ArgumentParser) -> None:
    """``--alert-webhook`` / ``--alert-command`` / ``--alert-severity`` / ``--alert-per-hour``."""
    parser.add_argument(
        "--alert-webhook",
        metavar="URL",
        help="POST each new or escalated finding (JSON: the triage object plus a one-line "
        "'text', as Slack-style incoming webhooks take) to URL",
    )
    parser.add_argument(
        "--alert-command",
        metavar="CMD",
        help="run CMD (sh -c) for each new or escalated finding, the same JSON on its stdin and "
        "the one line in DIAG_ALERT_TEXT",
    )
    parser.add_argument(
        "--alert-severity",
        choices=("info", "warning", "critical"),
        help="alert on findings at this severity or above (default warning)",
    )
    parser.add_argument(
        "--alert-per-hour",
        type=int,
        metavar="N",
        help="at most N alerts an hour (default 30); the ones held back are counted in the next",
    )


def alert_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The analyzer config overrides of the alert arguments (None: not given)."""
    return {
        "alert_webhook": getattr(args, "alert_webhook", None),
        "alert_command": getattr(args, "alert_command", None),
        "alert_severity": getattr(args, "alert_severity", None),
        "alert_per_hour": getattr(args, "alert_per_hour", None),
    }


def write_port_file(path: str, port: int) -> None:
    """Write ``port`` to ``path`` atomically (a reader never sees a partial file)."""
    atomic_write(path, f"{port}\n")
