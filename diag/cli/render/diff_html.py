"""One self-contained HTML page for ``diag diff --html``: inline CSS and SVG, no scripts, no
external assets, every text from the runs escaped (the triage page's style,
:mod:`diag.cli.render.html`).

Sections: the verdict; the two runs; the loss curves of both runs on one plot (the job mean per
step on run A's step numbers; run A solid blue, run B dashed orange), the gradient-norm curves
likewise when both runs have them, each with the divergent step marked by a red line (and the
first step outside the band by a grey one when earlier); the numerics, phase and kernel tables.
More than :data:`MAX_POINTS` steps are thinned to every n-th step; a non-finite value breaks the
curve.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from diag.cli.render.diff import nonfinite_lines
from diag.cli.render.html import _CSS as TRIAGE_CSS
from diag.compare.curves import CurveDiff
from diag.compare.diff import RunDiff
from diag.errors import InputError
from diag.fsutil import atomic_write

MAX_POINTS = 2000
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 900, 260, 64, 16, 24, 34
_CSS = TRIAGE_CSS + ".equivalent{background:#eaf7ea;border-color:#2a7a2a}"
_COLORS = {"a": "#1f77b4", "b": "#ff7f0e"}


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def render(diff: RunDiff) -> str:
    """The whole page as one string."""
    out = diff.to_json()
    verdict = out["verdict"]
    title = f"diag diff: {diff.a.id} vs {diff.b.id}"
    cls = "top equivalent" if verdict["kind"] == "equivalent" else "top"
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<div class='{cls}'><b>{_e(verdict['kind'])}</b>: {_e(verdict['summary'])}</div>",
        _runs(out),
        _curve_section("Loss", diff.loss),
        _curve_section("Gradient norm", diff.grad_norm) if diff.grad_norm else "",
        _numerics(out),
        _phases(out["phases"]),
        _kernels(out["kernels"]),
        "".join(f"<p class='pending'>{_e(line)}</p>" for line in nonfinite_lines(out)),
        _params(out["params"]),
        "".join(f"<p class='note'>note: {_e(n)}</p>" for n in out["notes"]),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _numerics(out: Mapping[str, Any]) -> str:
    head = ["metric", "by", "rtol", "atol", "compared", "outside", "first outside"]
    head += ["diverged at", "max |b-a|", "max rel"]
    rows = []
    for c in (out["loss"], out["grad_norm"]):
        if c:
            rows.append(
                [
                    *(c[k] for k in ("metric", "mode", "rtol", "atol", "num_compared")),
                    *(c[k] for k in ("num_outside", "first_outside_step", "divergent_step")),
                    f"{c['max_abs_dev']:.3g}",
                    f"{c['max_rel_dev']:.3g}",
                ]
            )
    return _table("Numerics", head, rows)


def _phases(phases: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            p["phase"],
            f"{p['a_ms']:.2f}",
            f"{p['b_ms']:.2f}",
            f"{p['delta_ms']:+.2f}",
            f"{p['pct_of_step']:+.1f}",
            f"{p['noise_ms']:.2f}",
        ]
        for p in phases
    ]
    head = ["phase", "A", "B", "B - A", "% of step", "noise"]
    return _table("Step time by phase (median ms)", head, rows)


def _kernels(kernels: Sequence[Mapping[str, Any]]) -> str:
    if not kernels:
        return ""
    rows = [
        [
            k["name"],
            k["category"],
            f"{k['a_ms']:.3f}",
            f"{k['b_ms']:.3f}",
            f"{k['delta_ms']:+.3f}",
            "-" if k["ratio"] is None else f"{k['ratio']:.2f}",
        ]
        for k in kernels
    ]
    head = ["kernel", "category", "A", "B", "B - A", "B / A"]
    return _table("Kernel time per step (ms)", head, rows)


def _params(params: Mapping[str, Any] | None) -> str:
    if not params:
        return ""
    first = params["first_different_step"]
    text = (
        f"parameters bitwise identical at all {params['num_compared']} compared points"
        if first is None
        else f"parameters (checksums) first differ at step {first}"
    )
    return f"<p>{_e(text)}</p>"


def _runs(out: Mapping[str, Any]) -> str:
    align = out["alignment"]
    rows = [
        [name.upper(), r["id"], r["path"], r["world_size"], r["steps"],
         f"{r['first_step']}..{r['last_step']}", r["exit_code"]]
        for name, r in (("a", out["a"]), ("b", out["b"]))
    ]  # fmt: skip
    note = (
        f"<p class='note'>B's step s is A's step s + {_e(align['b_offset'])}: {_e(align['how'])}; "
        f"{_e(align['common_steps'])} steps in common</p>"
    )
    return _table("Runs", ["run", "id", "path", "ranks", "steps", "first..last", "exit"], rows) + (
        note
    )


def _table(title: str, head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e('-' if v is None else v)}</td>" for v in row) + "</tr>"
        for row in rows
    )
    return f"<h2>{_e(title)}</h2><table><tr>{cells}</tr>{body}</table>"


def _curve_section(title: str, curve: CurveDiff | None) -> str:
    head = f"<h2>{_e(title)}</h2>"
    if curve is None or curve.curve.empty:
        return head + "<p class='note'>nothing to plot</p>"
    note = (
        f"job mean over ranks per step; A solid blue, B dashed orange; band |b - a| <= "
        f"{curve.band.atol:g} + {curve.band.rtol:g} x |a|"
    )
    return head + plot(curve) + f"<p class='note'>{_e(note)}</p>"


def plot(curve: CurveDiff) -> str:
    """An inline SVG of both runs' curves with the divergence marked."""
    data = curve.curve.sort_values("step")
    if len(data) > MAX_POINTS:
        data = data.iloc[:: math.ceil(len(data) / MAX_POINTS)]
    steps = data["step"].to_numpy(dtype="float64")
    values = np.concatenate([data["a"].to_numpy(dtype="float64"), data["b"].to_numpy("float64")])
    finite = values[np.isfinite(values)]
    if not len(steps) or not len(finite):
        return "<p class='note'>no finite values to plot</p>"
    x0, x1 = float(steps.min()), float(steps.max())
    y0, y1 = float(finite.min()), float(finite.max())
    pad = (y1 - y0) * 0.05 or abs(y0) * 0.05 or 1.0
    y0, y1 = y0 - pad, y1 + pad
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def sx(s: float) -> float:
        return _LEFT + (s - x0) / ((x1 - x0) or 1.0) * pw

    def sy(v: float) -> float:
        return _TOP + (1 - (v - y0) / (y1 - y0)) * ph

    svg = [f"<svg width='{_W}' height='{_H}' font-size='11'>"]
    svg.append(
        f"<rect x='{_LEFT}' y='{_TOP}' width='{pw}' height='{ph}' fill='none' stroke='#ccc'/>"
    )
    for v in nice_ticks(y0, y1):
        y = sy(v)
        svg.append(f"<line x1='{_LEFT - 4}' x2='{_LEFT}' y1='{y:.1f}' y2='{y:.1f}' stroke='#888'/>")
        svg.append(f"<text x='{_LEFT - 6}' y='{y + 4:.1f}' text-anchor='end'>{v:.6g}</text>")
    for s in nice_ticks(x0, x1, integer=True):
        svg.append(
            f"<text x='{sx(s):.1f}' y='{_H - _BOTTOM + 16}' text-anchor='middle'>{s:.0f}</text>"
        )
    svg.append(f"<text x='{_LEFT + pw / 2:.0f}' y='{_H - 4}' text-anchor='middle'>step (A)</text>")
    marks = [(curve.divergent_step, "#d00", "diverged at step")]
    if curve.first_outside_step is not None and curve.first_outside_step != curve.divergent_step:
        marks.append((curve.first_outside_step, "#999", "first outside the band at step"))
    for step, color, label in marks:
        if step is None:
            continue
        x = sx(float(step))
        svg.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{_TOP}' y2='{_TOP + ph}' stroke='{color}' "
            f"stroke-width='1.5'><title>{_e(label)} {_e(step)}</title></line>"
            f"<text x='{x + 3:.1f}' y='{_TOP + 12}' fill='{color}'>{_e(label)} {_e(step)}</text>"
        )
    for run, dash in (("a", ""), ("b", " stroke-dasharray='5,3'")):
        for seg in _segments(steps, data[run].to_numpy(dtype="float64")):
            pts = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in seg)
            svg.append(
                f"<polyline points='{pts}' fill='none' stroke='{_COLORS[run]}' "
                f"stroke-width='1.5'{dash}/>"
            )
    for i, run in enumerate(("a", "b")):
        x = _LEFT + pw - 90 + i * 45
        svg.append(
            f"<line x1='{x}' x2='{x + 16}' y1='{_TOP - 8}' y2='{_TOP - 8}' "
            f"stroke='{_COLORS[run]}' stroke-width='2'/>"
            f"<text x='{x + 19}' y='{_TOP - 4}'>{run.upper()}</text>"
        )
    svg.append("</svg>")
    return "<div class='scroll'>" + "".join(svg) + "</div>"


def nice_ticks(lo: float, hi: float, n: int = 5, *, integer: bool = False) -> list[float]:
    """About ``n`` round tick values inside [lo, hi]: multiples of 1, 2, 2.5 or 5 x 10^k."""
    span = hi - lo
    if not span > 0:
        return [lo]
    raw = span / n
    unit = 10 ** math.floor(math.log10(raw))
    step = next(m * unit for m in (1, 2, 2.5, 5, 10) if m * unit >= raw)
    if integer:
        step = max(1.0, float(round(step)))
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _segments(steps: np.ndarray, values: np.ndarray) -> list[list[tuple[float, float]]]:
    """Runs of consecutive finite points (a NaN, Inf or missing step breaks the line)."""
    out: list[list[tuple[float, float]]] = [[]]
    for s, v in zip(steps, values, strict=True):
        if math.isfinite(v):
            out[-1].append((float(s), float(v)))
        elif out[-1]:
            out.append([])
    return [seg for seg in out if seg]


def write_report(out: Path, diff: RunDiff) -> Path:
    """Write the page to ``out`` (atomically); :class:`InputError` if it cannot."""
    page = render(diff)
    try:
        atomic_write(out, page)
    except OSError as exc:
        raise InputError(f"{out}: cannot write the HTML report ({exc.strerror or exc})") from None
    return out
