"""What a user sees in ``diag report``: rendered into a plain-text console and read back."""

from __future__ import annotations

import io

from rich.console import Console

from diag.cli.render import tables as render


def _summary(slow_ratio: float) -> dict:
    ranks = []
    for r in range(4):
        ratio = slow_ratio if r == 2 else 0.95
        ranks.append(
            {
                "rank": r,
                "host": "node-a" if r < 2 else "node-b",
                "steps": 60,
                "step_ms_median": 80.0,
                "compute_ms_median": 40.0 * ratio,
                "wait_ms_median": 80.0 - 40.0 * ratio,
                "data_ms_median": 0.5,
                "checkpoint_ms_total": 12.0 if r == 0 else 0.0,
                "compute_vs_peers": ratio,
                "loss_last": "nan" if r == 3 else 0.25,
            }
        )
    return {"run": {"id": "r1", "world_size": 4, "steps": 60, "exit_code": 0}, "ranks": ranks}


def _text(renderable: object) -> str:
    buf = io.StringIO()
    Console(width=120, file=buf, color_system=None).print(renderable)
    return buf.getvalue()


def test_report_names_the_slow_rank_and_its_ratio() -> None:
    out = _text(render.report(_summary(1.9)))
    assert "rank 2 on node-b computes 1.90x as long as its peers' median" in out
    assert "world size 4" in out and "exit code 0" in out
    row = next(line for line in out.splitlines() if line.startswith("│") and "1.90x" in line)
    assert row.split("│")[1].strip() == "2"


def test_no_rank_is_blamed_when_compute_is_balanced() -> None:
    out = _text(render.report(_summary(1.02)))
    assert "typical rank" not in out
    assert render.slowest_rank(_summary(1.02)["ranks"]) is None


def test_non_finite_loss_is_shown_as_such() -> None:
    out = _text(render.ranks_table(_summary(1.0)))
    assert "nan" in out


def test_gpu_table_appears_only_with_gpu_samples() -> None:
    summary = _summary(1.0)
    assert render.gpu_table(summary) is None
    summary["gpus"] = {
        "node-a": [
            {"gpu_index": 0, "name": "H200", "util_pct": 97.0, "sm_clock_mhz": 1980,
             "temp_c": 61.0, "power_w": 540.0, "throttle_reasons": ""},
            {"gpu_index": 1, "name": "H200", "util_pct": 60.0, "sm_clock_mhz": 1100,
             "temp_c": 88.0, "power_w": 300.0, "throttle_reasons": "hw_thermal_slowdown"},
        ]
    }  # fmt: skip
    out = _text(render.report(summary))
    assert "hw_thermal_slowdown" in out and "1100" in out


def test_live_view_before_any_event() -> None:
    out = _text(render.live(None, elapsed_s=3.2, steps_per_s=None))
    assert "waiting for the first events" in out
