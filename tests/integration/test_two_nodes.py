"""Real two-node torchrun jobs on one machine (see ``netns.py``): gloo over a bridge, two hosts.

Each node runs its own ``torchrun --nnodes 2 --nproc-per-node 2`` inside its network namespace and
UTS namespace (host names ``node-a`` / ``node-b``); the c10d rendezvous and the gloo process group
run over the bridge. Needs root; skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from diag.selftest.link import write_token
from diag.selftest.workloads import TRAIN_DDP
from tests.fakes.netns import Node, TwoNodes, stop
from tests.fakes.paths import DATA, REPO

pytestmark = [pytest.mark.integration, pytest.mark.netns]

JOBS = DATA / "jobs"
#: Upper bound for one whole two-node job (both nodes).
JOB_TIMEOUT_S = 120.0
#: Once one node has failed, how long the other may still take before it is killed.
FAILED_PEER_GRACE_S = 15.0
#: How long the analyzer may take to write its port file.
ANALYZER_START_S = 30.0
STEPS = 20
#: Synchronous DDP: every rank's step ends within this of the others (analyzer clock). Generous:
#: 2 CPU cores run 4 workers, 2 agents, 2 daemons and the analyzer.
STEP_END_SPREAD_NS = 250_000_000
#: Rounding slack on the ClockSync error bound (rtt/2).
OFFSET_SLACK_NS = 1_000_000


def _torchrun() -> list[str]:
    exe = Path(sys.executable).parent / "torchrun"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def _torchrun_args(nodes: TwoNodes, node: Node, port: int, rdzv_id: str) -> list[str]:
    """torchrun options for one of the two nodes: c10d rendezvous hosted on node A."""
    is_host = int(node is nodes.a)
    return [
        "--nnodes=2",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={nodes.a.ip}:{port}",
        f"--rdzv-id={rdzv_id}",
        f"--rdzv-conf=is_host={is_host},join_timeout=60",
        # Advertise the node's bridge address, not getfqdn() of its host name.
        f"--local-addr={node.ip}",
        "--max-restarts=0",
        "--monitor-interval=0.5",
    ]


def _node_env(node: Node, token: Path | None) -> dict[str, str]:
    env = node.env()
    if token is not None:  # the analyzer listens on the bridge: it wants a token
        env["DIAG_TOKEN_FILE"] = str(token)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    return env


@dataclass
class NodeResult:
    node: Node
    returncode: int
    stdout: str
    stderr: str

    def tail(self, n: int = 40) -> str:
        lines = (self.stdout + "\n--- stderr ---\n" + self.stderr).splitlines()
        return f"== {self.node.hostname} rc={self.returncode} ==\n" + "\n".join(lines[-n:])


def _run_on_both(
    nodes: TwoNodes,
    argv: Mapping[str, Sequence[str]],
    logdir: Path,
    timeout: float = JOB_TIMEOUT_S,
    token: Path | None = None,
) -> dict[str, NodeResult]:
    """Run ``argv[hostname]`` on each node at once; wait for both (or kill everything)."""
    logdir.mkdir(parents=True, exist_ok=True)
    procs: dict[str, tuple[Node, subprocess.Popen[str], Path, Path]] = {}
    try:
        for node in nodes.nodes:
            out = logdir / f"{node.hostname}.out"
            err = logdir / f"{node.hostname}.err"
            with out.open("w") as fo, err.open("w") as fe:
                proc = nodes.popen(
                    node,
                    argv[node.hostname],
                    env=_node_env(node, token),
                    cwd=REPO,
                    stdout=fo,
                    stderr=fe,
                )
            procs[node.hostname] = (node, proc, out, err)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            codes = [p.poll() for _, p, _, _ in procs.values()]
            if all(c is not None for c in codes):
                break
            if any(c not in (None, 0) for c in codes):
                # One node failed: the other would only wait out its rendezvous/collectives.
                deadline = min(deadline, time.monotonic() + FAILED_PEER_GRACE_S)
            time.sleep(0.2)
    finally:
        timed_out = any(p.poll() is None for _, p, _, _ in procs.values())
        for _, proc, _, _ in procs.values():
            stop(proc, timeout=5)
        if timed_out:
            nodes.kill_all()  # workers run in their own sessions
    results = {
        name: NodeResult(node, proc.returncode, out.read_text(), err.read_text())
        for name, (node, proc, out, err) in procs.items()
    }
    if timed_out:
        tails = "\n".join(r.tail() for r in results.values())
        pytest.fail(f"two-node job did not finish within {timeout:.0f} s\n{tails}")
    return results


def _check_rank_placement(rank_hosts: Mapping[int, str]) -> None:
    """4 ranks on hosts node-a/node-b: ranks {0,1} on one, {2,3} on the other."""
    assert sorted(rank_hosts) == [0, 1, 2, 3], rank_hosts
    assert set(rank_hosts.values()) == {"node-a", "node-b"}, rank_hosts
    by_host: dict[str, set[int]] = {}
    for rank, host in rank_hosts.items():
        by_host.setdefault(host, set()).add(rank)
    assert sorted(map(sorted, by_host.values())) == [[0, 1], [2, 3]], by_host


def test_two_node_torchrun_plain(two_nodes: TwoNodes, tmp_path: Path) -> None:
    nodes = two_nodes
    port = nodes.free_port(nodes.a)
    rdzv_id = f"plain-{nodes.bridge}"
    script = str(JOBS / "two_node_job.py")
    argv = {
        node.hostname: [*_torchrun(), *_torchrun_args(nodes, node, port, rdzv_id), script]
        for node in nodes.nodes
    }
    t0 = time.monotonic()
    results = _run_on_both(nodes, argv, tmp_path / "logs")
    elapsed = time.monotonic() - t0
    tails = "\n".join(r.tail() for r in results.values())
    assert all(r.returncode == 0 for r in results.values()), tails

    rows: list[dict[str, object]] = []
    for res in results.values():
        node_rows = [
            json.loads(line.removeprefix("RESULT "))
            for line in res.stdout.splitlines()
            if line.startswith("RESULT ")
        ]
        assert len(node_rows) == 2, tails
        for row in node_rows:
            # The worker saw the node's own host name and the node's interface for gloo.
            assert row["hostname"] == res.node.hostname, (row, tails)
            assert row["gloo_ifname"] == res.node.ifname, row
        rows.extend(node_rows)

    assert {row["world_size"] for row in rows} == {4}
    rank_hosts = {int(str(row["rank"])): str(row["hostname"]) for row in rows}
    _check_rank_placement(rank_hosts)
    # all_reduce(SUM) of (rank + 1 + i) over 4 ranks = 10 + 4 i; summed over the rounds.
    expected = sum(10.0 + 4 * i for i in range(5))
    assert {row["sum"] for row in rows} == {expected}, rows
    # Every rank gathered every rank's host name: the same view everywhere.
    for row in rows:
        assert row["hosts"] == [rank_hosts[r] for r in range(4)], row
    print(f"two-node plain job: {elapsed:.1f} s, ranks->hosts {rank_hosts}")


# -- diag run on two nodes -----------------------------------------------------------------------


def _diag(*args: str) -> list[str]:
    return [sys.executable, "-m", "diag.cli.main", *args]


def _start_analyzer(
    nodes: TwoNodes, run_dir: Path, logdir: Path, token: Path
) -> tuple[subprocess.Popen[str], int]:
    """The analyzer in the root namespace, bound to the bridge address; returns it and its port."""
    port_file = logdir / "analyzer.port"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("DIAG_HOST", None)
    out = (logdir / "analyzer.out").open("w")
    proc = subprocess.Popen(
        _diag(
            "analyzer",
            "--run-dir",
            str(run_dir),
            "--bind",
            f"{nodes.bridge_ip}:0",
            "--port-file",
            str(port_file),
            "--token-file",
            str(token),
        ),
        cwd=REPO,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    out.close()
    deadline = time.monotonic() + ANALYZER_START_S
    while time.monotonic() < deadline:
        port = _analyzer_port(port_file, logdir / "analyzer.out")
        if port is not None:
            return proc, port
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop(proc, timeout=5)
    log = (logdir / "analyzer.out").read_text()
    pytest.fail(f"analyzer did not start (rc={proc.returncode}):\n{log[-4000:]}")


def _analyzer_port(port_file: Path, out: Path) -> int | None:
    """The analyzer's port from its port file ("PORT" or "HOST:PORT"), else from its
    "analyzer listening on HOST:PORT" line; None while neither is there (yet)."""
    texts = [port_file.read_text() if port_file.exists() else ""]
    texts += [m[1] for m in re.finditer(r"analyzer listening on (\S+)", out.read_text())]
    for text in texts:
        with contextlib.suppress(ValueError):
            return int(text.strip().rsplit(":", 1)[-1])
    return None


def _stop_analyzer(proc: subprocess.Popen[str], logdir: Path) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            stop(proc, timeout=1)
            log = (logdir / "analyzer.out").read_text()
            pytest.fail(f"analyzer did not exit on SIGTERM within 30 s:\n{log[-4000:]}")
    log = (logdir / "analyzer.out").read_text()
    assert proc.returncode in (0, -signal.SIGTERM), f"analyzer rc={proc.returncode}:\n{log[-4000:]}"


def test_two_node_diag_run(two_nodes: TwoNodes, tmp_path: Path) -> None:
    nodes = two_nodes
    run_dir = tmp_path / "run"
    logdir = tmp_path / "logs"
    logdir.mkdir()
    port = nodes.free_port(nodes.a)
    rdzv_id = f"diag-{nodes.bridge}"
    train = str(TRAIN_DDP)

    t0 = time.monotonic()
    token = write_token(logdir / "diag.token")
    analyzer, analyzer_port = _start_analyzer(nodes, run_dir, logdir, token)
    try:
        argv = {
            node.hostname: _diag(
                "run",
                "--analyzer",
                f"{nodes.bridge_ip}:{analyzer_port}",
                "--out",
                str(tmp_path / f"out-{node.hostname}"),
                "--",
                *_torchrun(),
                *_torchrun_args(nodes, node, port, rdzv_id),
                train,
                "--steps",
                str(STEPS),
            )
            for node in nodes.nodes
        }
        results = _run_on_both(nodes, argv, logdir, token=token)
    except BaseException:
        stop(analyzer, timeout=10)
        raise
    # Stop the analyzer first (it folds everything into Parquet parts), then judge the job.
    _stop_analyzer(analyzer, logdir)
    tails = "\n".join(r.tail() for r in results.values())
    assert all(r.returncode == 0 for r in results.values()), tails
    elapsed = time.monotonic() - t0

    report = subprocess.run(
        _diag("report", str(run_dir), "--json"),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert report.returncode == 0, report.stderr
    summary = json.loads(report.stdout)
    ranks = summary["ranks"]
    assert len(ranks) == 4, summary
    assert all(int(r["steps"]) == STEPS for r in ranks), ranks
    _check_rank_placement({int(r["rank"]): str(r["host"]) for r in ranks})

    _check_clock_alignment(run_dir)
    print(f"two-node diag run: {elapsed:.1f} s")


def _check_clock_alignment(run_dir: Path) -> None:
    """Per step, the 4 ranks' end_ns agree on the analyzer's clock (per-host ClockSync offsets)."""
    from diag.store.run_store import RunStore

    store = RunStore.open(run_dir)
    steps = store.frame("step")
    clock = store.frame("clock")
    assert not clock.empty, "no ClockSync events stored"
    # One offset per host: the one measured with the smallest round trip (tightest bound).
    best = clock.sort_values("rtt_ns").groupby("host", sort=False).first()
    offsets = {str(host): int(off) for host, off in best["offset_ns"].items()}
    assert set(offsets) == {"node-a", "node-b"}, offsets
    # Both "hosts" share this kernel's CLOCK_REALTIME (time namespaces do not virtualise it), so
    # the true offset is 0 and an NTP-style estimate must lie within its own error bound, rtt/2.
    for host, row in best.iterrows():
        bound = int(row["rtt_ns"]) // 2 + OFFSET_SLACK_NS
        assert abs(int(row["offset_ns"])) <= bound, (host, row.to_dict())

    steps = steps.assign(aligned_ns=steps["end_ns"] + steps["host"].map(offsets).astype("int64"))
    per_step = steps.groupby("step")
    counts = per_step["rank"].nunique()
    assert len(counts) == STEPS and (counts == 4).all(), counts.to_dict()
    spread = per_step["aligned_ns"].max() - per_step["aligned_ns"].min()
    worst = int(spread.max())
    assert worst <= STEP_END_SPREAD_NS, (
        f"step ends disagree by up to {worst / 1e6:.1f} ms after clock alignment "
        f"(offsets {offsets}):\n{(spread / 1e6).round(1).to_dict()}"
    )
