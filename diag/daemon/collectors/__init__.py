"""The daemon's collectors, by name: an explicit registry, nothing registers itself on import.

Each factory builds a collector from the daemon's config and may raise
:class:`~diag.errors.CollectorUnavailable` when its data source is absent on this machine. Only the
daemon (the composition root) decides which of them run.
"""

from __future__ import annotations

from collections.abc import Callable

from diag.config import DaemonConfig
from diag.daemon.collectors.base import Collector
from diag.daemon.collectors.gpu import GpuCollector
from diag.daemon.collectors.host import HostCollector
from diag.daemon.collectors.net import NetCollector
from diag.daemon.collectors.ranks import RankWatch

COLLECTORS: dict[str, Callable[[DaemonConfig], Collector]] = {
    "gpu": GpuCollector.from_config,
    "host": HostCollector.from_config,
    "net": NetCollector.from_config,
    "ranks": RankWatch.from_config,
}

__all__ = ["COLLECTORS", "Collector"]
