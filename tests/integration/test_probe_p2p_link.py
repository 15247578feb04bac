"""The point-to-point matrix names a slow link: two emulated nodes (network namespaces on a bridge,
:mod:`diag.selftest.netns`), two ranks each, node B's veth rate-limited with ``tc tbf``; ``diag
preflight --probes p2p --json`` under torchrun on both nodes must fail exactly the four rank pairs
that cross node-a <-> node-b and pass the two pairs inside a node. Needs root, ``ip netns`` and
``tc`` (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diag.selftest.netns import Node, TwoNodes, stop, two_node_network, unavailable_reason
from tests.fakes.paths import REPO

pytestmark = [pytest.mark.integration, pytest.mark.netns]

RATE = "40mbit"  # about 5 MB/s towards node B: far below loopback inside a node


def _torchrun(nodes: TwoNodes, node: Node, port: int, baseline: Path) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
        f"--rdzv-endpoint={nodes.a.ip}:{port}", f"--rdzv-id=p2p-{nodes.bridge}",
        f"--rdzv-conf=is_host={int(node is nodes.a)},join_timeout=60",
        f"--local-addr={node.ip}", "--max-restarts=0", "--monitor-interval=0.5",
        "-m", "diag.cli.main", "preflight", "--probes", "p2p", "--json",
        "--baseline", str(baseline),
    ]  # fmt: skip


def _env(node: Node) -> dict[str, str]:
    env = node.env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    return env


def test_p2p_matrix_names_the_rate_limited_link(tmp_path: Path) -> None:
    if (reason := unavailable_reason(("tc",))) is not None:
        pytest.skip(f"two-node network unavailable: {reason}")
    with two_node_network() as nodes:
        tbf = ["tc", "qdisc", "add", "dev", nodes.b.veth, "root", "tbf", "rate", RATE]
        subprocess.run([*tbf, "burst", "32kb", "latency", "2000ms"], check=True, timeout=10)
        port = nodes.free_port(nodes.a)
        procs = {}
        for node in nodes.nodes:
            out = (tmp_path / f"{node.hostname}.out").open("w")
            err = (tmp_path / f"{node.hostname}.err").open("w")
            argv = _torchrun(nodes, node, port, tmp_path / "baseline.json")
            procs[node.hostname] = nodes.popen(
                node, argv, env=_env(node), cwd=REPO, stdout=out, stderr=err
            )
        try:
            for proc in procs.values():
                proc.wait(180)
        finally:
            for proc in procs.values():
                stop(proc, timeout=5)
            nodes.kill_all()
    text = (tmp_path / "node-a.out").read_text()
    logs = (tmp_path / "node-a.err").read_text()[-2000:]
    line = next((ln for ln in text.splitlines() if ln.startswith("{")), None)
    assert line is not None, f"no JSON from node-a:\n{text}\n{logs}"
    results = json.loads(line)["results"]
    matrix = {r["device"]: (r["value"], r["verdict"]) for r in results}
    assert len(matrix) == 6 and all(r["status"] == "ok" for r in results), matrix
    for pair, (_, verdict) in matrix.items():
        crosses = "node-a" in pair and "node-b" in pair
        assert verdict == ("fail" if crosses else "pass"), f"{pair}: {matrix}"
    assert procs["node-a"].returncode != 0  # a failed verdict fails preflight
