"""The preflight result table (pure: judged rows in, a rich renderable out)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from diag.preflight.rules import Judged

_STYLE = {"pass": "green", "fail": "bold red", "skip": "dim"}


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def results_table(judged: Sequence[Judged], *, multi_host: bool = False) -> Table:
    table = Table(title="Pre-flight probes")
    for col in ("probe", "device", "metric", "status", "value", "baseline", "verdict", "detail"):
        table.add_column(col, justify="right" if col in ("value", "baseline") else "left")
    for j in judged:
        r = j.result
        device = f"{j.host}: {r.device}" if multi_host else r.device
        row = j.to_json()
        table.add_row(
            r.probe,
            device,
            r.metric,
            r.status,
            f"{_num(r.value)} {r.unit}".strip(),
            _num(j.baseline),
            f"[{_STYLE[j.verdict]}]{j.verdict}[/]",
            row["detail"],
        )
    return table
