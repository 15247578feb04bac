"""One self-contained HTML page for ``diag triage --html``: inline CSS and SVG, no scripts, no
external assets; every piece of text from the inputs is escaped (:func:`_e`).

Sections: the top finding; a rank x step heatmap of compute time (where the run has step data);
the last collectives of each rank side by side (culprits first); the culprits' stacks; every
finding with its evidence; unreadable files and missing evidence.

Heatmap colour: each cell is the rank's compute time in that step over the median of all ranks
in that step (1.0 = typical, white; above, red, full at 2x; below, blue, full at 0.5x). More than
:data:`MAX_COLS` steps are averaged into bins; more than :data:`MAX_ROWS` ranks keep the culprits
and an even sample of the others.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from diag.findings import Finding
from diag.postmortem.records import FrEntry, RankDump, StackFrame
from diag.untrusted import printable

MAX_COLS = 200
MAX_ROWS = 128
MAX_RANK_COLUMNS = 24
LAST_ENTRIES = 8

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;
vertical-align:top;text-align:left}th{background:#f4f4f4}.top{background:#fff4e5;
border:1px solid #f0b000;padding:10px 14px;border-radius:4px}.culprit{background:#ffe9e9}
.done{color:#2a7a2a}.pending{color:#b06000;font-weight:600}pre{background:#f7f7f7;padding:8px;
overflow-x:auto;font-size:12px}.note{color:#666;font-size:12px}.scroll{overflow-x:auto}
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportData:
    """What the page shows: the triage result (its run section, ranked findings, unreadable
    files and missing evidence), per-(rank, step) compute times (columns ``rank``, ``step``,
    ``compute_ms``; empty without step data), per-rank records of collectives, and stacks by
    rank."""

    title: str
    run: Mapping[str, Any]
    findings: tuple[Finding, ...] = ()
    problems: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    dumps: tuple[RankDump, ...] = ()
    stacks: Mapping[int, tuple[StackFrame, ...]] = field(default_factory=dict)


def _e(value: object) -> str:
    """Text from the inputs as HTML text: markup escaped, and undecodable bytes of file names
    and control characters shown as ``\\xff`` (the page is UTF-8; a lone surrogate is not)."""
    return html.escape(printable(str(value), newlines=True), quote=True)


def render(data: ReportData) -> str:
    """The whole page as one string."""
    findings = data.findings
    culprits = findings[0].ranks if findings else ()
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{_e(data.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(data.title)}</h1>",
        _run(data.run),
        _top(findings),
        _heatmap(data.steps, culprits),
        _collectives(data.dumps, culprits),
        _stacks(data.stacks, culprits),
        _findings(findings),
        _lines("Unreadable files", data.problems),
        _lines("Missing evidence", data.missing),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _run(run: Mapping[str, Any]) -> str:
    keep = [(k, v) for k, v in run.items() if not isinstance(v, (dict, list))]
    if not keep:
        return ""
    return "<p class='note'>" + " | ".join(f"{_e(k)}: {_e(v)}" for k, v in keep) + "</p>"


def _top(findings: Sequence[Finding]) -> str:
    if not findings:
        return "<div class='top'>No findings.</div>"
    f = findings[0]
    ranks = ", ".join(str(r) for r in f.ranks) or "-"
    return (
        f"<div class='top'><b>{_e(f.summary)}</b><br>"
        f"ranks {_e(ranks)} | symptom {_e(f.symptom)} | cause {_e(f.cause)} | "
        f"confidence {_e(round(f.confidence, 4))}</div>"
    )


def _color(ratio: float) -> str:
    if not math.isfinite(ratio):
        return "#eeeeee"
    if ratio >= 1:
        t = min(1.0, ratio - 1.0)
        return f"rgb(255,{int(255 - 200 * t)},{int(255 - 200 * t)})"
    t = min(1.0, (1.0 - ratio) * 2)
    return f"rgb({int(255 - 180 * t)},{int(255 - 120 * t)},255)"


def _heatmap(steps: pd.DataFrame, culprits: Sequence[int]) -> str:
    if steps.empty or not {"rank", "step", "compute_ms"} <= set(steps.columns):
        return "<h2>Compute time per rank and step</h2><p class='note'>no step data</p>"
    table = steps.pivot_table(index="rank", columns="step", values="compute_ms", aggfunc="last")
    table = table.sort_index().sort_index(axis=1)
    ratio = table / table.median(axis=0)
    if ratio.shape[1] > MAX_COLS:
        bins = pd.Series(range(ratio.shape[1])) * MAX_COLS // ratio.shape[1]
        ratio = ratio.T.groupby(bins.to_numpy()).mean().T
        ratio.columns = [int(table.columns[i]) for i in bins.drop_duplicates().index]
    ranks = list(ratio.index)
    note = ""
    if len(ranks) > MAX_ROWS:
        others = [r for r in ranks if r not in culprits]
        step = len(others) / (MAX_ROWS - len(culprits))
        keep = set(culprits) | {others[int(i * step)] for i in range(MAX_ROWS - len(culprits))}
        ratio = ratio.loc[[r for r in ranks if r in keep]]
        note = f" ({len(ratio)} of {len(ranks)} ranks shown: culprits and an even sample)"
    nrows, ncols = ratio.shape
    cw, ch = max(2, min(14, 900 // max(ncols, 1))), max(3, min(14, 560 // max(nrows, 1)))
    left, top = 46, 16
    svg = [
        f"<svg width='{left + cw * ncols + 10}' height='{top + ch * nrows + 10}' font-size='10'>"
    ]
    titles = nrows * ncols <= 10_000
    for i, rank in enumerate(ratio.index):
        y = top + i * ch
        weight = " font-weight='bold' fill='#c00'" if rank in culprits else ""
        if ch >= 8 or rank in culprits:
            svg.append(f"<text x='2' y='{y + ch - 1}'{weight}>r{_e(rank)}</text>")
        for j, step in enumerate(ratio.columns):
            v = float(ratio.iat[i, j])
            tip = (
                f"<title>rank {_e(rank)} step {_e(step)}: {v:.2f}x median</title>" if titles else ""
            )
            svg.append(
                f"<rect x='{left + j * cw}' y='{y}' width='{cw}' height='{ch}' "
                f"fill='{_color(v)}'>{tip}</rect>"
            )
    svg.append(f"<text x='{left}' y='11'>steps {_e(ratio.columns[0])} .. {_e(ratio.columns[-1])}")
    svg.append("</text></svg>")
    legend = "white = median of the step, red = 2x, blue = 0.5x" + note
    return (
        "<h2>Compute time per rank and step</h2><div class='scroll'>"
        + "".join(svg)
        + f"</div><p class='note'>{_e(legend)}</p>"
    )


def _cell(e: FrEntry) -> str:
    cls = "done" if e.state == "completed" else "pending"
    seq = f"p2p {e.p2p_seq_id}" if e.is_p2p else f"seq {e.seq_id}"
    group = e.pg_desc or f"pg {e.pg_name}"
    return (
        f"<span class='{cls}'>{_e(e.op)} {_e(seq)}</span><br>"
        f"<span class='note'>{_e(group)} | {_e(e.state)}</span>"
    )


def _collectives(dumps: Sequence[RankDump], culprits: Sequence[int]) -> str:
    head = "<h2>Last collectives of each rank</h2>"
    if not dumps:
        return head + "<p class='note'>no Flight Recorder dumps or collective events</p>"
    ordered = sorted(dumps, key=lambda d: (d.rank not in culprits, d.rank))
    shown = ordered[:MAX_RANK_COLUMNS]
    cols = [
        sorted(d.entries, key=lambda e: (e.created_ns, e.record_id))[-LAST_ENTRIES:] for d in shown
    ]
    rows = ["<tr>" + "".join(_th(d, culprits) for d in shown) + "</tr>"]
    for i in range(max((len(c) for c in cols), default=0)):
        cells = []
        for d, col in zip(shown, cols, strict=True):
            cls = " class='culprit'" if d.rank in culprits else ""
            cells.append(f"<td{cls}>{_cell(col[i]) if i < len(col) else ''}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    note = (
        f"<p class='note'>{len(dumps) - len(shown)} more ranks not shown</p>"
        if len(dumps) > len(shown)
        else ""
    )
    return head + "<div class='scroll'><table>" + "".join(rows) + "</table></div>" + note


def _th(d: RankDump, culprits: Sequence[int]) -> str:
    mark = " (culprit)" if d.rank in culprits else ""
    name = d.file.replace("\\", "/").rsplit("/", 1)[-1]
    return f"<th>rank {_e(d.rank)}{_e(mark)}<br><span class='note'>{_e(name)}</span></th>"


def _stacks(stacks: Mapping[int, tuple[StackFrame, ...]], culprits: Sequence[int]) -> str:
    head = "<h2>Culprit stack</h2>"
    shown = [r for r in culprits if stacks.get(r)]
    if not shown:
        return head + "<p class='note'>no stack for the culprits in the remains</p>"
    out = [head]
    for r in shown:
        lines = [f"{f.text()}" + (f"\n    {f.code}" if f.code else "") for f in stacks[r]]
        out.append(f"<p>rank {_e(r)}</p><pre>{_e(chr(10).join(lines))}</pre>")
    return "".join(out)


def _findings(findings: Iterable[Finding]) -> str:
    out = ["<h2>Findings and evidence</h2>"]
    for f in findings:
        ranks = ", ".join(str(r) for r in f.ranks) or "-"
        out.append(
            f"<h3>{_e(f.id)}: {_e(f.summary)}</h3><p class='note'>ranks "
            f"{_e(ranks)} | {_e(f.symptom)} | cause {_e(f.cause)} | "
            f"{_e(f.severity)} | confidence {_e(round(f.confidence, 4))}</p>"
        )
        rows = [
            "<tr><th>metric</th><th>subject</th><th>value</th><th>reference</th><th>note</th></tr>"
        ]
        for ev in f.to_json()["evidence"]:  # numbers as the JSON shows them (rounded, null)
            ref = "" if ev["reference"] is None else ev["reference"]
            rows.append(
                f"<tr><td>{_e(ev['metric'])}</td><td>{_e(ev['subject'])}</td>"
                f"<td>{_e(ev['value'])} {_e(ev['unit'])}</td><td>{_e(ref)}</td>"
                f"<td>{_e(ev['note'])}</td></tr>"
            )
        out.append("<table>" + "".join(rows) + "</table>")
    return "".join(out)


def _lines(title: str, lines: Sequence[str]) -> str:
    if not lines:
        return ""
    return f"<h2>{_e(title)}</h2><ul>" + "".join(f"<li>{_e(s)}</li>" for s in lines) + "</ul>"
