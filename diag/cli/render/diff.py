"""Pure functions from the ``diag diff --json`` object to rich renderables (nothing printed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

_STYLE = {
    "equivalent": "bold green",
    "diverged": "bold red",
    "slower": "bold yellow",
    "incomplete": "bold magenta",
}


def _num(value: Any, fmt: str = ".4g") -> str:
    return "-" if value is None else format(value, fmt)


def verdict_text(verdict: Mapping[str, Any]) -> Text:
    """One line: the verdict's kind, styled, and its summary."""
    kind = str(verdict.get("kind", ""))
    text = Text(kind.upper(), style=_STYLE.get(kind, "bold"))
    text.append(f"  {verdict.get('summary', '')}")
    return text


def runs_table(out: Mapping[str, Any]) -> Table:
    """The two runs and how their steps were aligned."""
    align = out.get("alignment", {})
    table = Table(header_style="bold")
    for col in ("run", "id", "ranks", "steps", "first..last", "exit"):
        table.add_column(col, justify="right" if col in ("steps", "exit") else "left")
    for name in ("a", "b"):
        r = out.get(name, {})
        shift = f" (+{align.get('b_offset')})" if name == "b" and align.get("b_offset") else ""
        table.add_row(
            name.upper(),
            str(r.get("id", "")),
            str(r.get("world_size", "")),
            str(r.get("steps", "")),
            f"{r.get('first_step')}..{r.get('last_step')}{shift}",
            _num(r.get("exit_code"), "d"),
        )
    return table


def alignment_text(out: Mapping[str, Any]) -> Text:
    """How B's steps were put on A's step numbers."""
    align = out.get("alignment", {})
    return Text(
        f"steps aligned: {align.get('how', '')}; {align.get('common_steps', 0)} steps in common"
    )


def numerics_table(out: Mapping[str, Any]) -> Table | None:
    """Loss and gradient norm: band, points compared and outside, divergence, deviations."""
    curves = [c for c in (out.get("loss"), out.get("grad_norm")) if c]
    if not curves:
        return None
    table = Table(
        title="numerics (outside the band: |b - a| > atol + rtol x |a|)",
        title_justify="left",
        header_style="bold",
    )
    table.add_column("metric")
    table.add_column("by")
    for col in ("rtol", "atol", "points", "outside", "1st out", "div. at", "rank"):
        table.add_column(col, justify="right")
    table.add_column("max |b-a|", justify="right")
    table.add_column("max rel", justify="right")
    for c in curves:
        div = c.get("divergent_step")
        table.add_row(
            str(c.get("metric")),
            str(c.get("mode")),
            f"{c.get('rtol'):g}",
            f"{c.get('atol'):g}",
            str(c.get("num_compared")),
            str(c.get("num_outside")),
            _num(c.get("first_outside_step"), "d"),
            _num(div, "d"),
            _num(c.get("divergent_rank"), "d"),
            _num(c.get("max_abs_dev"), ".3g"),
            _num(c.get("max_rel_dev"), ".3g"),
            style="red" if div is not None else None,
        )
    return table


def phases_table(phases: Sequence[Mapping[str, Any]], slowest: str | None = None) -> Table:
    """Median step time by phase in each run, the delta, and the runs' own noise."""
    table = Table(title="step time by phase (median ms)", title_justify="left", header_style="bold")
    table.add_column("phase")
    for col in ("A", "B", "B - A", "% of step", "noise"):
        table.add_column(col, justify="right")
    for p in phases:
        table.add_row(
            str(p.get("phase")),
            f"{p.get('a_ms', 0):.2f}",
            f"{p.get('b_ms', 0):.2f}",
            f"{p.get('delta_ms', 0):+.2f}",
            f"{p.get('pct_of_step', 0):+.1f}",
            f"{p.get('noise_ms', 0):.2f}",
            style="bold yellow" if p.get("phase") == slowest else None,
        )
    return table


def kernels_table(kernels: Sequence[Mapping[str, Any]]) -> Table | None:
    """The kernels whose time per step changed most."""
    if not kernels:
        return None
    table = Table(title="kernel time per step (ms)", title_justify="left", header_style="bold")
    table.add_column("kernel")
    table.add_column("category")
    for col in ("A", "B", "B - A", "B / A"):
        table.add_column(col, justify="right")
    for k in kernels:
        table.add_row(
            str(k.get("name")),
            str(k.get("category")),
            f"{k.get('a_ms', 0):.3f}",
            f"{k.get('b_ms', 0):.3f}",
            f"{k.get('delta_ms', 0):+.3f}",
            _num(k.get("ratio"), ".2f"),
        )
    return table


def nonfinite_lines(out: Mapping[str, Any]) -> list[str]:
    """Each run's first NaN/Inf event, on its own step numbers."""
    lines = []
    for name in ("a", "b"):
        nf = out.get(name, {}).get("first_nonfinite")
        if nf:
            module = f" {nf['module']}" if nf.get("module") else ""
            lines.append(
                f"run {name.upper()}: first NaN/Inf at its step {nf['step']} (rank {nf['rank']}, "
                f"{nf['where']}{module})"
            )
    return lines


def diff_renderables(out: Mapping[str, Any]) -> list[RenderableType]:
    """Everything ``diag diff`` prints, in order."""
    verdict = out.get("verdict", {})
    slowest = verdict.get("phase") if verdict.get("kind") == "slower" else None
    items: list[RenderableType | None] = [
        verdict_text(verdict),
        runs_table(out),
        alignment_text(out),
        numerics_table(out),
        phases_table(out.get("phases", []), slowest),
        kernels_table(out.get("kernels", [])),
    ]
    params = out.get("params")
    if params:
        first = params.get("first_different_step")
        items.append(
            Text(
                "parameters bitwise identical at every compared step"
                if first is None
                else f"parameters first differ at step {first}"
            )
        )
    items.extend(Text(line, style="red") for line in nonfinite_lines(out))
    items.extend(Text(f"note: {n}", style="dim") for n in out.get("notes", []))
    return [i for i in items if i is not None]
