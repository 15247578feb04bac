"""The detector registry: name -> ``detect(features, cfg)``, and :func:`run_all`.

Explicit on purpose (nothing registers itself on import). ``run_all`` catches nothing: a detector
that raises on a run is a bug to see, not a finding to lose silently (detectors return ``[]``
on data too thin to judge).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from diag.diagnose.detectors import (
    checkpoint,
    contention,
    data,
    drift,
    gpu_wedged,
    hang,
    kernel,
    link,
    link_hosts,
    link_loss,
    link_probe,
    link_stall,
    node,
)
from diag.diagnose.features import Features
from diag.diagnose.reconcile import reconcile
from diag.errors import Cancelled
from diag.findings import Finding, ranked
from diag.store.memory import release_free_memory


def _link(features: Features, cfg: link.LinkConfig | None) -> list[Finding]:
    """Slow collective groups, each narrowed to the host (or host pair) whose connections
    queue or lose (:mod:`~diag.diagnose.detectors.link_hosts`); without one, a lossy link from
    the connections' retransmissions (:mod:`~diag.diagnose.detectors.link_loss`), else a link
    that stopped carrying data while the job stalled (:mod:`~diag.diagnose.detectors.link_stall`);
    then narrowed
    to what the closed loop's point-to-point probes named
    (:mod:`~diag.diagnose.detectors.link_probe`)."""
    found = link.detect(
        features.collectives,
        features.step_events,
        cfg or link.LinkConfig(),
        features.collective_summaries,
    )
    if features.tcp.empty and features.probes.empty:
        return found
    hosts = features.hosts_of()
    found = [link_hosts.refine(f, features.tcp, features.step_events, hosts) for f in found]
    if not found:
        found = link_loss.detect(features.tcp, features.step_events, hosts)
    if not found:
        found = link_stall.detect(features.tcp, features.step_events, hosts)
    return [
        link_probe.refine(f, features.probes, features.tcp, features.step_events, hosts)
        for f in found
    ]


def _classes(features: Features) -> Mapping[int, int] | None:
    layout = features.work_layout()
    return layout.work_class if layout.known else None


def _preempted(features: Features, classes: Mapping[int, int] | None) -> pd.DataFrame | None:
    """Per window and rank, the run-queue delay beyond what its peers' and its own demand
    explain (taken off its operators)."""
    if features.kernels.empty:
        return None
    return kernel.preempted(
        features.wide("cpu_wait_ms"), features.windows, classes, features.wide("compute_ms")
    )


def _kernel(features: Features, cfg: kernel.KernelConfig | None) -> list[Finding]:
    classes = _classes(features)
    return kernel.detect(
        features.kernels, features.windows, cfg or kernel.KernelConfig(), classes,
        _preempted(features, classes),
    )  # fmt: skip


#: detector name -> its function; each takes ``(features, cfg)`` and ``cfg=None`` means defaults.
DETECTORS: dict[str, Callable[[Features, Any], list[Finding]]] = {
    "node": node.detect,
    "contention": contention.detect,
    "data": data.detect,
    "checkpoint": checkpoint.detect,
    "link": _link,
    "kernel": _kernel,
    "hang": hang.detect,
    "drift": drift.detect,
    "gpu_wedged": gpu_wedged.detect,
}

#: The detectors that read ``Features.wide`` (step x rank tables the features keep once built:
#: ~60 MB each at 131,072 ranks x 50 steps, five of them). :func:`run_all` runs the others
#: first, so that their temporaries (drift's loss scan, ~0.5 GB there) never stack on those
#: tables; the findings keep :data:`DETECTORS`' order. A test holds the others to it.
WIDE_READERS = frozenset({"node", "contention", "data", "checkpoint", "kernel"})

#: detector name -> its default config (the typed dataclass its ``detect`` accepts).
DEFAULT_CONFIGS: dict[str, object] = {
    "node": node.NodeConfig(),
    "contention": contention.ContentionConfig(),
    "data": data.DataConfig(),
    "checkpoint": checkpoint.CheckpointConfig(),
    "link": link.LinkConfig(),
    "kernel": kernel.KernelConfig(),
    "hang": hang.HangConfig(),
    "drift": drift.DriftConfig(),
    "gpu_wedged": gpu_wedged.GpuWedgedConfig(),
}


def run_all(
    features: Features,
    cfg: Mapping[str, object] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> list[Finding]:
    """Every registered detector on ``features`` (``cfg``: name -> config, defaults otherwise),
    reconciled across detectors (:func:`~diag.diagnose.reconcile.reconcile`: a slow kernel that
    explains a slow rank is one kernel finding; a kernel the steps do not show is only info) and
    ranked by severity, then share of the job lost x confidence (:func:`~diag.findings.ranked`).
    ``cancelled`` is asked before each detector and before reconciling; once it says so the pass
    ends with :class:`~diag.errors.Cancelled` (a live pass when the analyzer closes: the run's
    final triage follows, and a thread left inside pandas at interpreter exit aborts it)."""
    cfg = cfg or {}
    unknown = sorted(set(cfg) - set(DETECTORS))
    if unknown:
        raise ValueError(f"no detector named {', '.join(unknown)}")
    found: dict[str, list[Finding]] = {}
    for name in sorted(DETECTORS, key=lambda n: n in WIDE_READERS):  # stable: registry order
        if cancelled is not None and cancelled():
            raise Cancelled(f"triage cancelled before the {name} detector")
        found[name] = DETECTORS[name](features, cfg.get(name, DEFAULT_CONFIGS[name]))
        if name in WIDE_READERS:  # its temporaries back to the system before the next one's
            release_free_memory()  # (a few ms; glibc keeps freed medium arrays otherwise)
    findings = [f for name in DETECTORS for f in found[name]]
    if cancelled is not None and cancelled():
        raise Cancelled("triage cancelled before reconciling")
    kernel_cfg = cfg.get("kernel", DEFAULT_CONFIGS["kernel"])
    assert isinstance(kernel_cfg, kernel.KernelConfig)

    def kernels_for(node: Finding) -> list[Finding]:
        """Kernel candidates in the windows after a slow rank's onset (reconcile decides)."""
        if node.onset_step is None:
            return []
        classes = _classes(features)
        return kernel.detect_for(
            features.kernels, features.windows, node.ranks, node.onset_step, kernel_cfg, classes,
            _preempted(features, classes),
        )  # fmt: skip

    return ranked(reconcile(findings, features, kernels_for=kernels_for))
