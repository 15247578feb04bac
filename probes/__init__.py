"""Probes: one module per probe, a common base (:mod:`probes.base`), and the registry below.

``PROBES`` is the fixed registry ``diag preflight`` and ``diag replay`` choose from (nothing else
runs); ``DEFAULT_PROBES`` the set ``diag preflight`` runs without ``--probes`` (all but
``tcp_pair``, which the analyzer runs between two hosts' daemons). Nothing registers itself on
import.
"""

from __future__ import annotations

from probes.base import Probe, ProbeContext, ProbeResult, run_guarded
from probes.collective import CollectiveProbe
from probes.gemm import GemmProbe
from probes.hostcopy import HostCopyProbe
from probes.launch import LaunchProbe
from probes.membw import MemBwProbe
from probes.numerics import NumericsProbe
from probes.nvml_health import NvmlProbe
from probes.p2p import P2pProbe
from probes.tcp_pair import TcpPairProbe

PROBES: dict[str, type[Probe]] = {
    "gemm": GemmProbe,
    "membw": MemBwProbe,
    "hostcopy": HostCopyProbe,
    "launch": LaunchProbe,
    "collective": CollectiveProbe,
    "p2p": P2pProbe,
    "numerics": NumericsProbe,
    "nvml": NvmlProbe,
    "tcp_pair": TcpPairProbe,
}

#: ``tcp_pair`` needs a second host's daemon at the other end (the analyzer's link probe round).
DEFAULT_PROBES: tuple[str, ...] = tuple(n for n in PROBES if n != "tcp_pair")

__all__ = [
    "DEFAULT_PROBES",
    "PROBES",
    "Probe",
    "ProbeContext",
    "ProbeResult",
    "run_guarded",
]
