"""Probes: one module per probe, a common base (:mod:`probes.base`), and the registry below.

``PROBES`` is the fixed registry ``diag preflight`` and ``diag replay`` choose from (nothing else
runs); ``DEFAULT_PROBES`` the set ``diag preflight`` runs without ``--probes``. Nothing registers
itself on import.
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

PROBES: dict[str, type[Probe]] = {
    "gemm": GemmProbe,
    "membw": MemBwProbe,
    "hostcopy": HostCopyProbe,
    "launch": LaunchProbe,
    "collective": CollectiveProbe,
    "p2p": P2pProbe,
    "numerics": NumericsProbe,
    "nvml": NvmlProbe,
}

DEFAULT_PROBES: tuple[str, ...] = tuple(PROBES)

__all__ = [
    "DEFAULT_PROBES",
    "PROBES",
    "Probe",
    "ProbeContext",
    "ProbeResult",
    "run_guarded",
]
