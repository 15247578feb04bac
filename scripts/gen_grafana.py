"""Write deploy/grafana/diag.json: the Grafana dashboard on diag's metric names (run to refresh).

    .venv/bin/python scripts/gen_grafana.py

Panels: the job's findings and straggler scores (analyzer, :9401), step time, compute, wait and
data per rank and the step rate (node daemons, :9400), GPU telemetry under the DCGM exporter's
names (the same panels read dcgm-exporter's series where it runs), hook drops and ingest. Two
variables: the Prometheus data source and ``job_id`` (a diag run id). Checked by
``tests/unit/test_deploy.py`` (every metric a panel reads is one diag serves).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "diag.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
JOB = 'job_id=~"$job_id"'


def _panel(
    pid: int,
    title: str,
    targets: list[tuple[str, str]],
    x: int,
    y: int,
    *,
    w: int = 12,
    h: int = 8,
    kind: str = "timeseries",
    unit: str = "",
    desc: str = "",
) -> dict[str, Any]:
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right"}}
        if kind == "timeseries"
        else {},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _mean(name: str, by: str = "rank") -> str:
    return (
        f"sum by ({by}) (rate({name}_sum{{{JOB}}}[1m])) / "
        f"sum by ({by}) (rate({name}_count{{{JOB}}}[1m]))"
    )


def dashboard() -> dict[str, Any]:
    panels = [
        _panel(
            1,
            "Findings (cause, severity)",
            [(f"sum by (cause, severity) (diag_findings{{{JOB}}})", "{{severity}} {{cause}}")],
            0,
            0,
            w=8,
            kind="stat",
            desc="Current findings of the job's live triage",
        ),
        _panel(
            2,
            "Findings",
            [(f"diag_finding_confidence{{{JOB}}}", "{{id}}")],
            8,
            0,
            w=16,
            kind="table",
            unit="percentunit",
            desc="One row per finding: cause, severity, ranks, hosts, confidence",
        ),
        _panel(
            3,
            "Straggler score: compute vs peers",
            [(f"diag_rank_straggler_score{{{JOB}}}", "rank {{rank}} ({{host}})")],
            0,
            8,
            desc="The rank's median compute over its peers'; 1.0 typical",
        ),
        _panel(
            4,
            "Step time p50 per rank",
            [
                (
                    "histogram_quantile(0.5, sum by (le, rank) "
                    f"(rate(diag_step_seconds_bucket{{{JOB}}}[1m])))",
                    "rank {{rank}}",
                )
            ],
            12,
            8,
            unit="s",
        ),
        _panel(
            5,
            "Compute per step (mean)",
            [(_mean("diag_compute_seconds"), "rank {{rank}}")],
            0,
            16,
            w=8,
            unit="s",
        ),
        _panel(
            6,
            "Collective wait per step (mean)",
            [(_mean("diag_collective_wait_seconds"), "rank {{rank}}")],
            8,
            16,
            w=8,
            unit="s",
        ),
        _panel(
            7,
            "Data wait per step (mean)",
            [(_mean("diag_data_wait_seconds"), "rank {{rank}}")],
            16,
            16,
            w=8,
            unit="s",
        ),
        _panel(
            8,
            "Steps per second",
            [(f"sum by (rank) (rate(diag_step_seconds_count{{{JOB}}}[1m]))", "rank {{rank}}")],
            0,
            24,
            w=8,
        ),
        _panel(
            9,
            "Checkpoint time per step (mean)",
            [(_mean("diag_checkpoint_seconds"), "rank {{rank}}")],
            8,
            24,
            w=8,
            unit="s",
        ),
        _panel(
            10,
            "CPU run-queue delay per step (mean)",
            [(_mean("diag_cpu_wait_seconds"), "rank {{rank}}")],
            16,
            24,
            w=8,
            unit="s",
        ),
        _panel(
            11,
            "GPU SM clock",
            [("DCGM_FI_DEV_SM_CLOCK", "{{Hostname}} gpu {{gpu}}")],
            0,
            32,
            w=8,
            unit="hertz",
        ),
        _panel(
            12,
            "GPU temperature",
            [("DCGM_FI_DEV_GPU_TEMP", "{{Hostname}} gpu {{gpu}}")],
            8,
            32,
            w=8,
            unit="celsius",
        ),
        _panel(
            13,
            "GPU power",
            [("DCGM_FI_DEV_POWER_USAGE", "{{Hostname}} gpu {{gpu}}")],
            16,
            32,
            w=8,
            unit="watt",
        ),
        _panel(
            14,
            "GPU utilization",
            [("DCGM_FI_DEV_GPU_UTIL", "{{Hostname}} gpu {{gpu}}")],
            0,
            40,
            w=8,
            unit="percent",
        ),
        _panel(
            15,
            "XID errors (last)",
            [("DCGM_FI_DEV_XID_ERRORS", "{{Hostname}} gpu {{gpu}}")],
            8,
            40,
            w=8,
            kind="stat",
        ),
        _panel(
            16,
            "Hook drops",
            [
                (
                    f"sum by (rank, reason) (rate(diag_hook_events_dropped_total{{{JOB}}}[5m]))",
                    "rank {{rank}} {{reason}}",
                )
            ],
            16,
            40,
            w=8,
            desc="Events the hooks dropped: what the diagnosis does not see",
        ),
        _panel(
            17,
            "Analyzer ingest (events/s)",
            [
                (f"rate(diag_ingest_events_total{{{JOB}}}[1m])", "stored"),
                (f"rate(diag_ingest_duplicate_events_total{{{JOB}}}[1m])", "duplicates"),
            ],
            0,
            48,
        ),
        _panel(
            18,
            "Detection latency (steps after onset)",
            [(f"diag_finding_detection_latency_steps{{{JOB}}}", "{{id}}")],
            12,
            48,
            kind="stat",
        ),
    ]
    return {
        "uid": "diag-job",
        "title": "diag: training job",
        "tags": ["diag", "pytorch", "training"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                },
                {
                    "name": "job_id",
                    "type": "query",
                    "label": "diag run",
                    "datasource": DS,
                    "query": "label_values(diag_rank_step, job_id)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                },
            ]
        },
        "panels": panels,
    }


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
