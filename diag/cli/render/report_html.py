"""``diag report RUN_DIR --html FILE``: one self-contained page of plots of a run (plotly).

plotly.js is inlined once in the page's head (no network needed to open it, ~4.8 MB); each figure
is a ``Plotly.newPlot`` call with its data as JSON (plotly escapes ``</`` in it, and every text
of ours outside the figures is HTML-escaped). Sections:

1. the findings, most important first, with their evidence;
2. step time per rank and step (heatmap), and compute vs peers per rank and step (the rank's
   compute over the median of the other ranks' in the same step: 1.0 typical, red above);
3. step time over the run (median and slowest rank per step) with each finding's onset marked;
4. compute, collective wait, data wait and checkpoint per rank (medians, stacked);
5. GPU telemetry per device over time (utilization, SM clock, temperature, power), where the run
   has NVML samples.

More than :data:`MAX_STEPS` steps are averaged into bins; more than :data:`MAX_RANKS` ranks keep
the findings' ranks and an even sample of the others (the page says so).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diag.api import Run
from diag.findings import Finding, factor_text, ranked
from diag.fsutil import atomic_write

MAX_STEPS = 400
MAX_RANKS = 256
_NS_PER_MS = 1e6
_NS_PER_S = 1e9
GPU_FIELDS = (
    ("util_pct", "utilization (%)"),
    ("sm_clock_mhz", "SM clock (MHz)"),
    ("temp_c", "temperature (C)"),
    ("power_w", "power (W)"),
)

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;
vertical-align:top;text-align:left}th{background:#f4f4f4}.note{color:#666;font-size:12px}
.critical{background:#ffe9e9}.warning{background:#fff4e5}.plot{min-height:380px}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _figure_html(fig: Any, div_id: str) -> str:
    import plotly.io as pio

    return str(
        pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    )


def _nulls(values: np.ndarray) -> list[Any]:
    """``values`` as plain lists with ``None`` (a gap in the plot) where not finite."""
    out = values.astype(object)
    out[~np.isfinite(values)] = None
    return list(out.tolist())


def _pick_ranks(ranks: Sequence[int], keep: set[int]) -> tuple[list[int], bool]:
    """At most :data:`MAX_RANKS` ranks: the ``keep`` ones and an even sample of the rest."""
    ranks = sorted(ranks)
    if len(ranks) <= MAX_RANKS:
        return ranks, False
    kept = [r for r in ranks if r in keep][:MAX_RANKS]
    rest = [r for r in ranks if r not in keep]
    room = MAX_RANKS - len(kept)
    if room > 0 and rest:
        idx = np.linspace(0, len(rest) - 1, room).round().astype(int)
        kept += [rest[int(i)] for i in sorted(set(idx))]
    return sorted(kept), True


def _binned(pivot: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Columns (steps) averaged into at most :data:`MAX_STEPS` bins; the bin width."""
    width = max(1, int(np.ceil(pivot.shape[1] / MAX_STEPS)))
    if width == 1:
        return pivot, 1
    groups = np.arange(pivot.shape[1]) // width
    out = pivot.T.groupby(groups).mean().T
    out.columns = [int(pivot.columns[i * width]) for i in range(out.shape[1])]
    return out, width


def step_matrices(steps: pd.DataFrame, keep: set[int]) -> dict[str, Any]:
    """Rank x step matrices of step time (ms) and compute vs peers, ready for heatmaps."""
    if steps.empty:
        return {}
    df = steps[steps["step"] >= 0][["rank", "step", "duration_ns", "compute_ns"]].copy()
    df = df.groupby(["rank", "step"], as_index=False).last()
    ranks, sampled = _pick_ranks(df["rank"].unique().tolist(), keep)
    step_ms = df.pivot(index="rank", columns="step", values="duration_ns") / _NS_PER_MS
    compute = df.pivot(index="rank", columns="step", values="compute_ns").astype(float)
    vs = compute_vs_peers(compute)
    step_ms, width = _binned(step_ms.loc[ranks])
    vs, _ = _binned(vs.loc[ranks])
    return {"ranks": ranks, "sampled": sampled, "width": width, "step_ms": step_ms, "vs": vs}


def compute_vs_peers(compute: pd.DataFrame) -> pd.DataFrame:
    """Each cell (rank x step) over the median of the other ranks in the same step (the rank
    itself left out, as ``diag report``'s ``compute_vs_peers``); beyond 64 ranks the step's
    median stands in for the leave-one-out one (they differ by less than one rank's share)."""
    if compute.shape[0] < 2:
        return compute * np.nan
    if compute.shape[0] > 64:
        return compute.div(compute.median(axis=0).replace(0, np.nan), axis=1)
    rows = {
        r: compute.loc[r] / compute.drop(index=r).median(axis=0).replace(0, np.nan)
        for r in compute.index
    }
    return pd.DataFrame(rows).T.reindex(compute.index)


def _heatmap(matrix: pd.DataFrame, title: str, label: str, **style: Any) -> Any:
    import plotly.graph_objects as go

    z = matrix.to_numpy(dtype=float)
    fig = go.Figure(
        go.Heatmap(
            z=_nulls(z),
            x=[int(c) for c in matrix.columns],
            y=[f"rank {r}" for r in matrix.index],
            colorbar={"title": {"text": label}},
            hovertemplate="%{y}, step %{x}: %{z:.3g}<extra></extra>",
            **style,
        )
    )
    fig.update_layout(
        title=title, xaxis_title="step", template="plotly_white",
        height=min(900, 240 + 14 * len(matrix.index)),
    )  # fmt: skip
    fig.update_yaxes(autorange="reversed")
    return fig


def _step_line(steps: pd.DataFrame, findings: Sequence[Finding]) -> Any:
    import plotly.graph_objects as go

    per = steps[steps["step"] >= 0].groupby("step")["duration_ns"]
    med, worst = per.median() / _NS_PER_MS, per.max() / _NS_PER_MS
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=med.index.tolist(), y=med.tolist(), name="median rank",
                             mode="lines"))  # fmt: skip
    fig.add_trace(go.Scatter(x=worst.index.tolist(), y=worst.tolist(), name="slowest rank",
                             mode="lines", line={"dash": "dot"}))  # fmt: skip
    for f in findings:
        if f.onset_step is not None:
            fig.add_vline(
                x=f.onset_step, line_dash="dash", line_color="#c0392b",
                annotation_text=f"{f.cause} onset ({f.id})"[:60], annotation_textangle=-90,
            )  # fmt: skip
    fig.update_layout(title="Step time over the run", xaxis_title="step",
                      yaxis_title="ms", template="plotly_white", height=420)  # fmt: skip
    return fig


def _phase_bars(steps: pd.DataFrame, ranks: Sequence[int]) -> Any:
    import plotly.graph_objects as go

    cols = {"compute_ns": "compute", "collective_wait_ns": "collective wait",
            "data_wait_ns": "data wait", "checkpoint_ns": "checkpoint"}  # fmt: skip
    med = steps[steps["rank"].isin(ranks)].groupby("rank")[list(cols)].median() / _NS_PER_MS
    fig = go.Figure()
    for col, name in cols.items():
        fig.add_trace(go.Bar(x=[f"rank {r}" for r in med.index], y=med[col].tolist(), name=name))
    fig.update_layout(barmode="stack", title="Where each rank's step goes (medians)",
                      yaxis_title="ms", template="plotly_white", height=420)  # fmt: skip
    return fig


def _gpu_lines(gpu: pd.DataFrame) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t0 = int(gpu["ts_ns"].min())
    fig = make_subplots(rows=len(GPU_FIELDS), cols=1, shared_xaxes=True,
                        subplot_titles=[label for _, label in GPU_FIELDS])  # fmt: skip
    for (host, index), dev in gpu.groupby(["host", "gpu_index"], sort=True):
        x = list((dev["ts_ns"] - t0) / _NS_PER_S)
        for row, (col, _) in enumerate(GPU_FIELDS, start=1):
            y = pd.to_numeric(dev[col], errors="coerce").astype(float)
            fig.add_trace(
                go.Scatter(x=x, y=_nulls(y.to_numpy()), mode="lines",
                           name=f"{host} gpu {index}", legendgroup=f"{host}/{index}",
                           showlegend=row == 1),
                row=row, col=1,
            )  # fmt: skip
    fig.update_xaxes(title_text="seconds since the first sample", row=len(GPU_FIELDS), col=1)
    fig.update_layout(title="GPU telemetry per device", template="plotly_white",
                      height=220 * len(GPU_FIELDS))  # fmt: skip
    return fig


def _findings_table(findings: Sequence[Finding]) -> str:
    if not findings:
        return "<p>No findings: diag saw nothing wrong in this run.</p>"
    rows = ["<tr><th>severity</th><th>cause</th><th>culprit</th><th>summary</th><th>onset</th>"
            "<th>confidence</th><th>evidence</th></tr>"]  # fmt: skip
    for f in findings:
        culprit = ", ".join(
            [f"ranks {','.join(map(str, f.ranks))}"] * bool(f.ranks)
            + [f"hosts {','.join(f.hosts)}"] * bool(f.hosts)
            + [f"kernel {f.kernel}"] * bool(f.kernel)
        )
        ev = "<br>".join(
            _e(f"{e.metric} {e.subject}: {e.value:.4g}{' ' + e.unit if e.unit else ''}"
               + (f" (reference {e.reference:.4g})" if e.reference is not None else "")
               + (f"; {e.note}" if e.note else ""))
            for e in f.evidence[:12]
        )  # fmt: skip
        slow = f" ({factor_text(f.slowdown)})" if f.slowdown and f.slowdown > 1 else ""
        rows.append(
            f'<tr class="{_e(f.severity)}"><td>{_e(f.severity)}</td><td>{_e(f.cause)}</td>'
            f"<td>{_e(culprit)}</td><td>{_e(f.summary + slow)}</td>"
            f"<td>{_e('' if f.onset_step is None else f.onset_step)}</td>"
            f"<td>{f.confidence:.2f}</td><td>{ev}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def render(run: Run, findings: Sequence[Finding]) -> str:
    """The page for ``run`` and its ``findings``."""
    from plotly.offline import get_plotlyjs

    findings = ranked(findings)
    summary = run.summary
    title = f"diag report: run {summary.run.id or run.path.name}"
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{_e(title)}</title><style>{_CSS}</style>",
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class='note'>{_e(summary.run.world_size)} ranks on "
        f"{_e(len(summary.run.hosts))} host(s), {_e(summary.run.steps)} steps; command: "
        f"{_e(summary.run.command)}</p>",
        "<h2>Findings</h2>",
        _findings_table(findings),
    ]
    steps = run.steps
    keep = {r for f in findings for r in f.ranks}
    mats = step_matrices(steps, keep)
    if mats:
        if mats["sampled"] or mats["width"] > 1:
            parts.append(
                f"<p class='note'>{len(mats['ranks'])} ranks shown (the findings' ranks and an "
                f"even sample of the rest); steps averaged in bins of {mats['width']}.</p>"
            )
        parts.append("<h2>Step time and compute vs peers, per rank and step</h2>")
        parts.append(_figure_html(_heatmap(mats["step_ms"], "Step time", "ms",
                                           colorscale="Viridis"), "step-heatmap"))  # fmt: skip
        vs = mats["vs"]
        parts.append(_figure_html(_heatmap(
            vs, "Compute vs peers (1.0 = typical)", "x peers", colorscale="RdBu_r", zmid=1.0,
            zmin=0.5, zmax=2.0), "compute-heatmap"))  # fmt: skip
        parts.append("<h2>Step time over the run</h2>")
        parts.append(_figure_html(_step_line(steps, findings), "step-line"))
        parts.append("<h2>Compute, wait, data and checkpoint per rank</h2>")
        parts.append(_figure_html(_phase_bars(steps, mats["ranks"]), "phases"))
    else:
        parts.append("<p>No step data in this run.</p>")
    gpu = run.gpu
    parts.append("<h2>GPU telemetry</h2>")
    if gpu.empty:
        parts.append("<p>No GPU telemetry in this run (no NVML on its nodes).</p>")
    else:
        parts.append(_figure_html(_gpu_lines(gpu), "gpu"))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(path: Path, run: Run, findings: Sequence[Finding]) -> Path:
    """Write the page to ``path`` (atomically); the path."""
    atomic_write(path, render(run, findings))
    return path


def figures(page: str) -> list[dict[str, Any]]:
    """The figures (``{"id", "data", "layout"}``) embedded in a page this module wrote: for
    checking a page without a browser."""
    out = []
    marker = "Plotly.newPlot("
    pos = page.find(marker)
    decoder = json.JSONDecoder()
    while pos >= 0:
        i = pos + len(marker)
        div, i = decoder.raw_decode(page, _skip(page, i))
        data, i = decoder.raw_decode(page, _skip(page, i + 1))
        layout, i = decoder.raw_decode(page, _skip(page, i + 1))
        out.append({"id": div, "data": data, "layout": layout})
        pos = page.find(marker, i)
    return out


def _skip(text: str, i: int) -> int:
    while text[i] in " \n\t,":
        i += 1
    return i
