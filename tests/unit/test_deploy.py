"""deploy/: the Kubernetes manifests, the Slurm script, the Prometheus rules and the Grafana
dashboard agree with diag itself (no cluster here: kubectl cannot validate without an API
server, so the manifests are checked as YAML against the rules that matter to them)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from diag import schema
from diag.analyzer.metrics import JobCollector
from diag.cli.main import COMMANDS, build_parser
from diag.daemon.metrics import NodeMetrics
from diag.diagnose.triage import TriageResult
from diag.findings import Finding
from tests.fakes.events import T0, Source
from tests.fakes.paths import REPO

DEPLOY = REPO / "deploy"
METRIC = re.compile(r"\b(diag_[a-z_]+|DCGM_FI_[A-Z_]+)\b")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _manifests() -> list[dict[str, Any]]:
    return [d for p in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in _docs(p)]


def _pod_specs() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, pod template) of every Deployment, DaemonSet and Job."""
    return [(d, d["spec"]["template"]) for d in _manifests()
            if d["kind"] in ("Deployment", "DaemonSet", "Job")]  # fmt: skip


def test_every_manifest_is_a_named_object() -> None:
    docs = _manifests()
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "DaemonSet", "Service", "PersistentVolumeClaim", "Job"} <= kinds
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"], d


def test_selectors_volumes_and_ports_line_up() -> None:
    docs = _manifests()
    for work, pod in _pod_specs():
        labels = pod["metadata"]["labels"]
        if work["kind"] != "Job":
            assert work["spec"]["selector"]["matchLabels"].items() <= labels.items()
        volumes = {v["name"] for v in pod["spec"].get("volumes", [])}
        for c in pod["spec"]["containers"]:
            assert c["name"] and c["image"]
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, (work["metadata"]["name"], m)
            for key in ("readinessProbe", "livenessProbe"):
                port = c.get(key, {}).get("tcpSocket", {}).get("port")
                if isinstance(port, str):
                    assert port in {p["name"] for p in c["ports"]}
    for svc in (d for d in docs if d["kind"] == "Service"):
        pods = [p for _, p in _pod_specs()
                if svc["spec"]["selector"].items() <= p["metadata"]["labels"].items()]  # fmt: skip
        assert pods, svc["metadata"]["name"]
        names = {p["name"] for pod in pods for c in pod["spec"]["containers"]
                 for p in c.get("ports", []) if "name" in p}  # fmt: skip
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort")
            assert not isinstance(target, str) or target in names, (svc["metadata"]["name"], port)


def _diag_commands() -> list[list[str]]:
    """Every diag command line in the manifests (command [diag] + args) and the Slurm script."""
    out = []
    for _, pod in _pod_specs():
        for c in pod["spec"]["containers"]:
            if c.get("command") == ["diag"]:
                out.append(list(c["args"]))
    script = (DEPLOY / "slurm" / "diag-train.sbatch").read_text().replace("\\\n", " ")
    for line in script.splitlines():
        if '"$DIAG" ' in line and not line.lstrip().startswith("#"):
            words = [w for w in shlex.split(_expand(line[line.index('"$DIAG" ') + 8 :])) if w]
            end = [i for i, w in enumerate(words) if w in ("--", "&", "||", "|", ";")]
            out.append(words[: end[0]] if end else words)
    return out


#: what Slurm and the script's first lines would set (the script's own defaults are read from it)
SLURM = {"SLURM_JOB_ID": "42", "SLURM_NNODES": "2", "HEAD": "node001",
         "TOKEN_FILE": "/runs/x.token", "DIAG_RUN_DIR": "/runs/x"}  # fmt: skip


def _expand(text: str) -> str:
    """Bash-like expansion of ``$X``, ``${X}``, ``${X:-default}`` (arrays expand to nothing)."""
    script = (DEPLOY / "slurm" / "diag-train.sbatch").read_text()
    known = {**dict(re.findall(r"^(\w+)=\$\{\w+:-([^}$]*)\}$", script, re.M)), **SLURM}

    def value(m: re.Match[str]) -> str:
        if m.group(3):  # ${ARRAY[@]}
            return ""
        name = m.group(1) or m.group(4)
        return known.get(name, (m.group(2) or "")[2:] or f"<{name}>")

    return re.sub(r"\$\{(\w+)(:-[^}]*)?\}|\$\{\w+(\[@\])\}|\$(\w+)", value, text)


def test_the_diag_command_lines_parse_with_diags_own_parser() -> None:
    commands = _diag_commands()
    assert {c[0] for c in commands} >= {"analyzer", "daemon", "run", "triage"}
    for argv in commands:
        # as diag's main() does: the chosen command's module adds its arguments
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        importlib.import_module(COMMANDS[argv[0]]).configure(sub.choices[argv[0]])
        if argv[0] == "run":
            argv = [*argv, "--", "torchrun", "x.py"]
        try:
            parser.parse_args(argv)
        except SystemExit:  # pragma: no cover - the message is on stderr
            pytest.fail(f"diag {' '.join(argv)}: not a valid diag command line")


def _served() -> set[str]:
    """The metric names diag's two endpoints serve, histogram series included."""
    node = NodeMetrics()
    src, daemon = Source("n0", 0), Source("n0")
    health = {
        f.name: 0
        for f in dataclasses.fields(schema.GpuSample)
        if f.name.startswith(("pcie_link", "retired_", "remapped_", "row_remap", "nvlink_"))
    }
    node.observe([src.step(0), daemon.gpu(T0, 0, temp_c=60.0, power_w=300.0, **health),
                  schema.HookHealth(**src.env(T0), pid=1)])  # fmt: skip
    text = node.text().decode()

    class Core:  # what JobCollector reads of an AnalyzerCore
        latest_triage = TriageResult(run={"id": "j"}, findings=(Finding(
            id="f", symptom="slowdown", cause="node", severity="warning", ranks=(1,),
            onset_step=3, detected_step=5, confidence=0.9, summary="s"),))  # fmt: skip
        latest_summary = None
        store = type("S", (), {"run_dir": Path("/r")})()

        def counters(self) -> dict[str, float]:
            keys = ("events", "duplicates", "rejected", "passes", "screened_passes", "fetches")
            keys += ("last_triage_s",)
            return dict.fromkeys(keys, 0)

    names = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    names |= {s.name for fam in JobCollector(Core()).collect() for s in fam.samples}  # type: ignore[arg-type]
    names |= {"diag_rank_straggler_score", "diag_job_dropped_events_total"}  # need a summary
    return names


def test_the_dashboard_and_the_rules_read_only_what_diag_serves() -> None:
    served = _served()
    board = json.loads((DEPLOY / "grafana" / "diag.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    rules = _docs(DEPLOY / "prometheus" / "alerts.yml")[0]
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert used and used <= served, sorted(used - served)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    scrape = _docs(DEPLOY / "prometheus" / "scrape.yml")[0]
    assert {j["job_name"] for j in scrape["scrape_configs"]} >= {"diag-node", "diag-job"}


def test_the_dashboard_is_what_the_script_writes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen_grafana", REPO / "scripts" / "gen_grafana.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert json.loads((DEPLOY / "grafana" / "diag.json").read_text()) == mod.dashboard()
