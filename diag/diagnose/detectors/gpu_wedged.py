"""A GPU driver that stopped answering: ``node``, named by the host whose daemon saw it.

The daemon runs every NVML call under a deadline (:mod:`diag.gpu.deadline`); a call that does not
return is reported as a failed GPU collector cycle whose message says the driver is wedged (a
``CollectorError``). One such report is the evidence: NVML calls take milliseconds on a healthy
driver, and a driver that blocks them has lost a device (DCGM and ``nvidia-smi`` hang the same
way). The finding names the host and the ranks on it; it is a ``hang`` when none of those ranks
finished a step after the first report, else a ``slowdown`` (the job goes on, the device's state
is unknown). Critical either way: the node needs draining.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from diag.diagnose.features import Features
from diag.findings import Evidence, Finding

#: the collector the daemon names in its error events for GPU telemetry, and the word its
#: deadline's message carries (:data:`diag.gpu.deadline.WEDGED`; diagnosis imports no backend).
GPU_COLLECTOR = "gpu"
WEDGED = "wedged"


@dataclass(frozen=True, slots=True)
class GpuWedgedConfig:
    """``min_reports``: wedged reports from one host before it is a finding."""

    min_reports: int = 1


def detect(features: Features, cfg: GpuWedgedConfig | None = None) -> list[Finding]:
    cfg = cfg or GpuWedgedConfig()
    errors = features.collector_errors
    if errors.empty or not {"collector", "message", "host", "ts_ns"} <= set(errors.columns):
        return []
    wedged = errors[
        (errors["collector"] == GPU_COLLECTOR)
        & errors["message"].astype(str).str.contains(WEDGED, regex=False)
    ]
    hosts = features.hosts_of() if not features.steps.empty else {}
    out = []
    for host, rows in wedged.groupby("host", sort=True):
        if len(rows) < cfg.min_reports:
            continue
        first_ns = int(rows["ts_ns"].min())
        ranks = tuple(sorted(r for r, h in hosts.items() if h == host))
        stepped = _stepped_after(features.step_events, ranks, first_ns)
        symptom = "slowdown" if stepped else "hang"
        first = " ".join(str(rows.sort_values("ts_ns")["message"].iloc[0]).split())[:200]
        who = f"ranks {', '.join(map(str, ranks))} on it" if ranks else "no rank seen on it"
        out.append(
            Finding(
                id=f"gpu-wedged:{host}",
                symptom=symptom,
                cause="node",
                severity="critical",
                ranks=ranks,
                hosts=(str(host),),
                confidence=0.8,
                summary=(
                    f"the GPU driver on {host} stopped answering ({who}"
                    f"{'' if stepped else ', no step finished since'}): drain the node"
                ),
                evidence=(
                    Evidence(
                        metric="gpu_driver_wedged",
                        subject=str(host),
                        value=float(len(rows)),
                        unit="reports",
                        note=first,
                    ),
                ),
            )
        )
    return out


def _stepped_after(steps: pd.DataFrame, ranks: tuple[int, ...], ts_ns: int) -> bool:
    if not ranks or steps.empty or not {"rank", "end_ns"} <= set(steps.columns):
        return False
    mine = steps[steps["rank"].isin(ranks)]
    return bool((mine["end_ns"] > ts_ns).any())
