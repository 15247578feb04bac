"""``diag replay`` on a synthetic run directory: the plan takes the run's heaviest GEMM shapes and
collective sizes; a slow suspect is confirmed, an equal one refuted; the outcome is written."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from diag import schema
from diag.cli.main import main
from diag.diagnose.triage import write_findings
from diag.errors import InputError
from diag.findings import Finding
from diag.replay.plan import ProbePlan, collective_sizes, gemm_shape, heaviest_gemm_shapes
from diag.replay.replay import Target, replay
from diag.store.run_store import RunStore
from probes.base import ProbeResult


def _env(i: int, rank: int) -> dict[str, object]:
    host = "h0" if rank < 2 else "h1"
    return {"ts_ns": 1000 + i, "host": host, "rank": rank, "source": f"{host}/rank{rank}", "seq": i}


def make_run(tmp_path: Path, cause: str = "node") -> Path:
    store = RunStore(tmp_path)
    events: list[schema.Event] = []
    for rank in range(4):
        events.append(
            schema.StepEvent(**_env(0, rank), step=1, start_ns=0, end_ns=10, duration_ns=10)  # type: ignore[arg-type]
        )
    kernels = [
        ("aten::addmm", 900, "[[256], [64, 512], [512, 256]]"),
        ("aten::mm", 500, "[[128, 32], [32, 16]]"),
        ("aten::relu", 9999, "[[64, 256]]"),
    ]
    for i, (name, total, shapes) in enumerate(kernels):
        events.append(
            schema.KernelSummary(
                **_env(10 + i, 3),  # type: ignore[arg-type]
                window_id="w",
                name=name,
                category="cpu_op",
                num_calls=1,
                total_ns=total,
                median_ns=total,
                max_ns=total,
                input_shapes=shapes,
            )
        )
    events.append(schema.CollectiveEvent(**_env(20, 3), op="allreduce", num_bytes=1 << 20))  # type: ignore[arg-type]
    store.append(events)
    store.flush()
    symptom = "hang" if cause == "data" else "slowdown"
    finding = Finding(
        id="f1", symptom=symptom, cause=cause, severity="warning", ranks=(3,), hosts=("h1",),
        confidence=0.8, summary="rank 3 is slow",
    )  # fmt: skip
    write_findings(tmp_path, (finding,))
    return tmp_path


def test_plan_uses_the_runs_shapes_and_sizes() -> None:
    assert gemm_shape("aten::addmm", "[[256], [64, 512], [512, 256]]") == (64, 512, 256)
    assert gemm_shape("aten::linear", "[[8, 4, 32], [16, 32]]") == (32, 32, 16)
    assert gemm_shape("aten::relu", "[[4, 4]]") is None
    kernels = pd.DataFrame(
        {
            "name": ["aten::mm", "aten::addmm"],
            "total_ns": [1, 2],
            "input_shapes": ["[[2, 3], [3, 4]]", "[[5], [6, 7], [7, 5]]"],
        }
    )
    assert heaviest_gemm_shapes(kernels) == ((6, 7, 5), (2, 3, 4))
    assert collective_sizes(pd.DataFrame({"num_bytes": [0, 8, 1 << 40, 8]})) == (8, 1 << 28)


def _runner(suspect_gflops: float, one_device: bool = False):  # type: ignore[no-untyped-def]
    seen: list[tuple[str, object]] = []

    def run(plan: ProbePlan, target: Target) -> list[ProbeResult]:
        seen.append((target.role, plan.params))
        device = "cpu" if one_device else f"cpu{target.rank}"
        if plan.probe == "numerics":
            return [
                ProbeResult(
                    probe="numerics",
                    device=device,
                    status="ok",
                    metric="checksum",
                    value=1.0,
                    detail="abc",
                )
            ]
        value = suspect_gflops if target.role == "suspect" else 100.0
        return [
            ProbeResult(
                probe="gemm",
                device=device,
                status="ok",
                metric="m",
                value=value,
                unit="GFLOP/s",
            )
        ]

    return run, seen


def test_slow_suspect_confirmed_and_written(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    runner, seen = _runner(60.0)
    result = replay(run_dir, None, runner)
    assert result.outcome == "confirmed"
    assert (result.suspect.rank, result.peer and result.peer.rank) == (3, 0)
    gemm_params = next(p for role, p in seen if role == "suspect")
    assert gemm_params.shapes == ((64, 512, 256), (128, 32, 16))  # type: ignore[attr-defined]
    written = json.loads((run_dir / "replay.json").read_text())
    assert written["outcome"] == "confirmed"
    replayed = [e for e in written["finding"]["evidence"] if e["metric"].startswith("replay gemm")]
    assert replayed[0]["value"] == 60.0 and replayed[0]["reference"] == 100.0


def test_equal_suspect_refuted_and_data_has_no_probe(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    assert replay(run_dir, "f1", _runner(99.0)[0]).outcome == "refuted"
    data_dir = make_run(tmp_path / "d", cause="data")
    assert replay(data_dir, None, _runner(1.0)[0]).outcome == "no probe"
    with pytest.raises(InputError, match="no finding 'nope'"):
        replay(run_dir, "nope", _runner(1.0)[0])


def test_suspect_and_peer_on_one_device_is_never_confirmed(tmp_path: Path) -> None:
    """Once, 24.8 against 34.0 GFLOP/s measured on the same CPU came out ``confirmed``."""
    run_dir = make_run(tmp_path)
    result = replay(run_dir, None, _runner(24.8 / 34.0 * 100, one_device=True)[0])
    assert result.outcome == "inconclusive" and "same device" in result.note
    assert "--via-analyzer" in result.note
    assert any(e.note.startswith("worse") for e in result.finding.evidence)  # shown, not judged


def test_cli_runs_locally(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = make_run(tmp_path, cause="link")
    assert main(["replay", str(run_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "inconclusive"  # link probes need ranks: unsupported in one process
    assert {r["probe"] for r in out["results"]} == {"p2p", "collective"}
    coll = next(r for r in out["results"] if r["probe"] == "collective")
    assert coll["params"]["sizes_bytes"] == [1 << 20]
