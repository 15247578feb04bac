"""Pure functions from a run summary (the ``diag report --json`` object) to rich renderables.

Nothing here prints or reads files: the commands pass the summary in and print what comes back,
and tests render into a ``Console(file=io.StringIO())`` to check what a user sees.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from diag.findings import Finding, factor_text, findings_from_json
from diag.untrusted import printable

#: A rank whose median compute time is this far above its peers' is highlighted.
SLOW_RATIO = 1.10
#: Why hooks dropped events (the run summary's counts, from ``HookHealth``), as the report says it.
DROP_REASONS: dict[str, str] = {
    "num_undelivered": "daemon unreachable",
    "num_queue_dropped": "queue full",
    "num_fr_dropped": "Flight Recorder overwritten",
    "num_unencodable": "unencodable",
    "num_oversize": "oversize",
}


def _ms(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{float(value):.1f}"


def _loss(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{float(value):.4g}"


def plain(value: object, style: str = "") -> Text:
    """A cell or line of data as plain text: never read as rich markup (a ``[/x]`` in a path
    stays as written), control characters and undecodable bytes escaped."""
    return Text(printable(str(value)), style=style)


def slowest_rank(ranks: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The rank whose compute stands out (``compute_vs_peers >= SLOW_RATIO``), if one does."""
    scored = [r for r in ranks if isinstance(r.get("compute_vs_peers"), (int, float))]
    if len(scored) < 2:
        return None
    top = max(scored, key=lambda r: float(r["compute_vs_peers"]))
    return top if float(top["compute_vs_peers"]) >= SLOW_RATIO else None


#: The ranks table's columns, left out in this order (first the least needed) when the table
#: does not fit the width it is drawn at; rank, step, compute and vs peers always stay.
RANKS_DROP_ORDER = ("ckpt ms", "loss", "host", "steps", "data ms", "wait ms")


class Fitted:
    """A table that fits the width it is drawn at: ``build(left_out, width)`` lays it out in
    ``width`` columns or returns None; while it cannot, the next column of ``drop_order`` is left
    out (and the caption says which) instead of cutting headers and numbers to "comp…"."""

    def __init__(
        self,
        build: Callable[[frozenset[str], int | None], Table | None],
        drop_order: Sequence[str],
    ):
        self.build = build
        self.drop_order = tuple(drop_order)

    def fit(self, width: int) -> Table:
        left: list[str] = []
        table = self.build(frozenset(), width)
        for name in self.drop_order:
            if table is not None:
                break
            left.append(name)
            table = self.build(frozenset(left), width)
        if table is None:  # narrower than the narrowest layout: rich does what it can
            table = self.build(frozenset(left), None)
            assert table is not None
        if left:
            note = (
                f"left out to fit {width} columns: {', '.join(left)} (a wider terminal shows "
                "them; piped, set COLUMNS)"
            )
            table.caption = f"{table.caption}\n{note}" if table.caption else note
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.fit(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.fit(options.max_width))


def _widths(columns: Sequence[Sequence[str]]) -> tuple[list[int], list[int]]:
    """For cells ``columns[i]`` (header first): each column's natural width (its widest cell)
    and its width with the header wrapped at its spaces (its longest header word or widest
    value)."""
    natural = [max(len(c) for c in col) for col in columns]
    wrapped = [
        max([max(map(len, col[0].split()), default=1), *(len(c) for c in col[1:])])
        for col in columns
    ]
    return natural, wrapped


def fixed_widths(columns: Sequence[Sequence[str]], width: int | None) -> list[int] | None:
    """Column widths (text only) for cells ``columns[i]`` (header first) in ``width`` columns
    of a bordered table: the natural widths if they fit, else the wrapped ones (:func:`_widths`);
    None when even those do not fit. ``width`` None: the natural widths."""
    natural, wrapped = _widths(columns)
    if width is None:
        return natural
    frame = 3 * len(columns) + 1  # a border and one space of padding each side, per column
    for fixed in (natural, wrapped):
        if sum(fixed) + frame <= width:
            return fixed
    return None


def ranks_table(summary: Mapping[str, Any], *, title: str | None = None) -> Fitted:
    """Per-rank medians: step, compute, collective wait, data wait; the slow rank in bold red.
    Narrower than its columns, it leaves some out (:data:`RANKS_DROP_ORDER`)."""
    return Fitted(lambda left, width: _ranks_table(summary, title, left, width), RANKS_DROP_ORDER)


def _ranks_table(
    summary: Mapping[str, Any], title: str | None, left: frozenset[str], width: int | None
) -> Table | None:
    ranks = list(summary.get("ranks", []))
    slow = slowest_rank(ranks)
    columns: list[tuple[str, str, Callable[[Mapping[str, Any]], str]]] = [
        ("rank", "right", lambda r: str(r.get("rank"))),
        ("host", "left", lambda r: printable(str(r.get("host", "")))),
        ("steps", "right", lambda r: str(r.get("steps", 0))),
        ("step ms", "right", lambda r: _ms(r.get("step_ms_median"))),
        ("compute ms", "right", lambda r: _ms(r.get("compute_ms_median"))),
        ("wait ms", "right", lambda r: _ms(r.get("wait_ms_median"))),
        ("data ms", "right", lambda r: _ms(r.get("data_ms_median"))),
        ("ckpt ms", "right", lambda r: _ms(r.get("checkpoint_ms_total"))),
        ("vs peers", "right", lambda r: _ratio(r.get("compute_vs_peers"))),
        ("loss", "right", lambda r: _loss(r.get("loss_last"))),
    ]
    columns = [c for c in columns if c[0] not in left]
    rows = [[cell(r) for _, _, cell in columns] for r in ranks]
    widths = fixed_widths(
        [[name, *(row[i] for row in rows)] for i, (name, _, _) in enumerate(columns)], width
    )
    if widths is None:
        return None
    parts = [
        ("step, compute, wait, data: per-step medians", True),
        ("ckpt: the run's total", "ckpt ms" not in left),
        ("vs peers: its compute against the other ranks' median", True),
        ("loss: the last", "loss" not in left),
    ]
    table = Table(
        title=title, title_justify="left", header_style="bold", caption_justify="left",
        caption="; ".join(text for text, shown in parts if shown),
    )  # fmt: skip
    for (name, justify, _), w in zip(columns, widths, strict=True):
        table.add_column(name, justify=justify, width=w)  # type: ignore[arg-type]
    for r, row in zip(ranks, rows, strict=True):
        is_slow = slow is not None and r.get("rank") == slow.get("rank")
        table.add_row(*(Text(c) for c in row), style="bold red" if is_slow else None)
    return table


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}x"


def gpu_table(summary: Mapping[str, Any]) -> Table | None:
    """Latest sample per GPU, when the run has GPU telemetry."""
    hosts = summary.get("gpus") or {}
    rows = [(host, g) for host, gpus in hosts.items() for g in gpus]
    if not rows:
        return None
    table = Table(title="GPUs (latest sample)", title_justify="left", header_style="bold")
    for col in ("host", "gpu", "name", "util %", "SM MHz", "temp C", "power W", "throttle"):
        table.add_column(col, justify="left" if col in ("host", "name", "throttle") else "right")
    for host, g in rows:
        table.add_row(
            plain(host),
            str(g.get("gpu_index")),
            plain(g.get("name", "")),
            _ms(g.get("util_pct")),
            str(g.get("sm_clock_mhz") if g.get("sm_clock_mhz") is not None else "-"),
            _ms(g.get("temp_c")),
            _ms(g.get("power_w")),
            plain(g.get("throttle_reasons") or "-"),
        )
    return table


def headline(summary: Mapping[str, Any]) -> Text:
    """One line: run id, world size, steps, exit code, and the slow rank if one stands out."""
    run = summary.get("run", {})
    parts = [
        f"run {run.get('id') or '?'}",
        f"world size {run.get('world_size', '?')}",
        f"steps {run.get('steps', 0)}",
    ]
    if run.get("in_progress"):
        parts.append(f"in progress (analyzer pid {run.get('writer_pid')} writing)")
    if run.get("exit_code") is not None and run.get("exit_code", -1) >= 0:
        parts.append(f"exit code {run['exit_code']}")
    if run.get("num_dropped"):
        parts.append(hook_drops(run))
    text = Text(" | ".join(parts))
    if silent := run.get("silent_ranks"):
        ranks = ", ".join(str(r) for r in silent)
        who = f"hook of rank {ranks}" if len(silent) == 1 else f"hooks of ranks {ranks}"
        text.append(
            f"\nthe {who} went silent (its thread died or is stuck): the events it would have "
            "sent since are missing.",
            style="bold red",
        )
    if untimed := run.get("nccl_untimed_ranks"):
        text.append(
            f"\nNCCL collective timing is off on {len(untimed)} rank(s) (TORCH_NCCL_ENABLE_TIMING "
            "unset when the job started): collectives have arrivals but no durations; diag run "
            "sets it, a job started without it keeps it off."
        )
    if unsettled := run.get("unsettled_ranks"):
        ranks = ", ".join(str(r) for r in unsettled)
        text.append(
            f"\na profiler window on rank {ranks} stopped while a gloo worker thread was still "
            "ending a collective's record (torch's profiler race; DIAG_HOOK_PROFILE_SETTLE_S "
            "bounds diag's wait for it): that late write may have corrupted the process's memory.",
            style="bold yellow",
        )
    slow = slowest_rank(list(summary.get("ranks", [])))
    if slow is not None:
        text.append(
            f"\nrank {slow.get('rank')} on {slow.get('host')} computes "
            f"{factor_text(float(slow['compute_vs_peers']))} as long as its peers' median "
            f"({_ms(slow.get('compute_ms_median'))} ms per step); the others wait for it.",
            style="bold red",
        )
    return text


def hook_drops(run: Mapping[str, Any]) -> str:
    """``"hook dropped 12 events: 8 daemon unreachable, 4 unencodable"`` (the reasons a hook of
    schema 1.9 on reports; an older one gives the total only)."""
    reasons = [f"{run[k]} {label}" for k, label in DROP_REASONS.items() if run.get(k)]
    line = f"hook dropped {run['num_dropped']} events"
    return f"{line}: {', '.join(reasons)}" if reasons else line


def culprit(finding: Finding) -> str:
    """Who a finding blames, shortest first: a kernel on ranks, a link, ranks on hosts."""
    ranks = ", ".join(f"r{r}" for r in finding.ranks)
    hosts = ", ".join(finding.hosts)
    if finding.link is not None:
        return f"link {' <-> '.join(finding.link.hosts)} ({finding.link.group or '?'})"
    who = f"{ranks} ({hosts})" if ranks and hosts else ranks or hosts or "-"
    if finding.kernel:
        return f"{finding.kernel} on {who}"
    return who


#: Evidence items shown per finding under the triage table (all of them are in --json/--html).
MAX_EVIDENCE_LINES = 4


def _num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def details(findings: Sequence[Finding], *, limit: int = 3) -> list[Text]:
    """Under the table, for the first ``limit`` findings: when (onset, detected) and the first
    evidence items (value against reference), one line each."""
    out: list[Text] = []
    for i, f in enumerate(findings[:limit], 1):
        when = "from the start" if f.onset_step is None else f"onset step {f.onset_step}"
        if f.detected_step is not None:
            when += f", detected at step {f.detected_step}"
        out.append(plain(f"{i}. {culprit(f)} ({f.cause}, {f.severity}): {when}", style="bold"))
        for e in f.evidence[:MAX_EVIDENCE_LINES]:
            ref = f" against {_num(e.reference)}" if e.reference is not None else ""
            note = f" ({e.note})" if e.note else ""
            out.append(plain(f"   {e.metric} of {e.subject}: {_num(e.value)}{ref} {e.unit}{note}"))
        if len(f.evidence) > MAX_EVIDENCE_LINES:
            out.append(plain(f"   (+{len(f.evidence) - MAX_EVIDENCE_LINES} more: --json, --html)"))
    return out


#: the share of the run's step time its stalls must cost before a verdict tells them
STALL_NOTE_SHARE = 0.10


def stall_note(run: Mapping[str, Any]) -> str:
    """What a verdict without findings adds about the whole job's stalls (``run``: a summary's
    or a triage's run section, :class:`~diag.store.summary.RunInfoSummary`); "" when they cost
    under :data:`STALL_NOTE_SHARE` of its step time."""
    from diag.store.summary import STALL_FACTOR  # pandas: only where a verdict is written

    try:
        count, share = int(run.get("num_stall_steps") or 0), float(run.get("stall_share") or 0)
    except (TypeError, ValueError):
        return ""
    if count <= 0 or not share >= STALL_NOTE_SHARE:
        return ""
    steps = "1 step" if count == 1 else f"{count} steps"
    return (
        f"; yet {steps} took {STALL_FACTOR:g}x the median step or longer for the whole job "
        f"({min(share, 1.0):.0%} of its step time): a pause that no comparison of ranks can "
        "place (the network, storage, the hosts); diag trace shows when"
    )


def verdict_line(
    findings: Sequence[Finding],
    num_steps: int,
    num_ranks: int,
    run: Mapping[str, Any] | None = None,
) -> Text:
    """The run in one sentence: the top finding, or that none was found in how much (and what
    the whole job's stalls cost, from ``run``: :func:`stall_note`)."""
    if findings:
        top = findings[0]
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        return plain(f"verdict: {top.severity} {top.cause}: {top.summary}{more}", style="bold")
    stalls = stall_note(run or {})
    if num_ranks:
        return plain(f"verdict: no problem found in {num_steps} steps of {num_ranks} ranks{stalls}")
    return plain(f"verdict: no problem found{stalls}")


#: The findings table's columns left out, in this order, when the summary would get fewer than
#: :data:`MIN_SUMMARY` columns (headers wrapped first).
FINDINGS_DROP_ORDER = ("conf", "step lost", "severity")
MIN_SUMMARY = 24


def findings_table(findings: Sequence[Finding], *, title: str = "Findings") -> Fitted:
    """Findings, as ranked: culprit, cause, severity, confidence, the share of each step lost
    (the finding's ``slowdown``), summary. The summary takes the width the others leave: the
    short columns never wrap, the culprit folds beyond a sixth of the width; with less than
    :data:`MIN_SUMMARY` columns left for it, some are left out (:data:`FINDINGS_DROP_ORDER`)."""
    return Fitted(
        lambda left, width: _findings_table(findings, title, left, width), FINDINGS_DROP_ORDER
    )


def _findings_table(
    findings: Sequence[Finding], title: str, left: frozenset[str], width: int | None
) -> Table | None:
    def lost(f: Finding) -> str:
        return "-" if f.slowdown is None or math.isnan(f.slowdown) else f"{f.slowdown:.1%}"

    columns: list[tuple[str, Callable[[Finding], str]]] = [
        ("culprit", lambda f: printable(culprit(f))),
        ("cause", lambda f: printable(f.cause)),
        ("severity", lambda f: printable(f.severity)),
        ("conf", lambda f: f"{f.confidence:.2f}"),
        ("step lost", lost),
    ]
    columns = [c for c in columns if c[0] not in left]
    rows = [[cell(f) for _, cell in columns] for f in findings]
    summaries = [printable(f.summary) for f in findings]
    cells = [[name, *(row[i] for row in rows)] for i, (name, _) in enumerate(columns)]
    widths: list[int | None] = [None] * (len(columns) + 1)
    if width is not None:
        frame = 3 * (len(columns) + 1) + 1
        cap = max(len("culprit"), width // 6)  # the culprit folds beyond a sixth of the width
        want = min(MIN_SUMMARY, max(map(len, summaries), default=0))
        for fixed in _widths(cells):  # headers wrapped at their spaces only if need be
            fixed = [min(fixed[0], cap), *fixed[1:]]
            room = width - frame - sum(fixed)
            if room >= want:
                widths = [*fixed, room]
                break
        else:
            return None
    table = Table(title=title, title_justify="left", header_style="bold", caption_justify="left")
    for (name, _), w in zip(columns, widths, strict=False):
        table.add_column(name, overflow="fold", width=w)
    table.add_column("summary", overflow="fold", width=widths[-1])
    for f, row, text in zip(findings, rows, summaries, strict=True):
        style = {"critical": "bold red", "warning": "yellow"}.get(f.severity)
        table.add_row(*(Text(c) for c in row), Text(text), style=style)
    return table


def summary_findings(summary: Mapping[str, Any]) -> tuple[Finding, ...]:
    """The findings a run summary carries (the analyzer's live triage), typed."""
    return findings_from_json(summary.get("findings") or [])


def report(summary: Mapping[str, Any]) -> Group:
    """The whole ``diag report`` view (with findings when the summary carries them)."""
    parts: list[Any] = [headline(summary), ranks_table(summary)]
    gpus = gpu_table(summary)
    if gpus is not None:
        parts.append(gpus)
    if findings := summary_findings(summary):
        parts.append(findings_table(findings))
    return Group(*parts)


def live(
    summary: Mapping[str, Any] | None, *, elapsed_s: float, steps_per_s: float | None
) -> Group:
    """The live view of ``diag run``: progress line, per-rank table, GPU table."""
    rate = "-" if steps_per_s is None else f"{steps_per_s:.2f}"
    line = Text(f"diag: {elapsed_s:.0f}s elapsed | {rate} steps/s", style="bold")
    if summary is None:
        return Group(line, Text("waiting for the first events..."))
    parts: list[Any] = [line, ranks_table(summary)]
    gpus = gpu_table(summary)
    if gpus is not None:
        parts.append(gpus)
    if findings := summary_findings(summary):
        parts.append(findings_table(findings[:5], title="Findings (live)"))
    return Group(*parts)


#: Up to this many ranks the kernel table has a column per rank; beyond, min/median/max.
MAX_RANK_COLUMNS = 16


def _kernel_name(name: str, width: int = 60) -> str:
    """A kernel name short enough for a table: no ``void`` or parameter list, ellipsized."""
    name = name.removeprefix("void ")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:  # "f(int*)" loses its parameters; "Memcpy HtoD (Pinned)" does not
                name = name[:i] if i > 0 and name[i - 1] != " " else name
                break
    return name if len(name) <= width else name[: width - 1] + "…"


def _spread(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}x"


def kernel_table(
    kernels: Sequence[Mapping[str, Any]], *, title: str | None = "Kernels by rank"
) -> Table:
    """The cross-rank kernel table (``diag report --json``'s ``"kernels"`` rows): per kernel its
    ms on each rank (min/median/max beyond :data:`MAX_RANK_COLUMNS` ranks), ``spread`` = slowest
    rank / median rank, and the slowest rank, in bold red when ``spread >= SLOW_RATIO``."""
    ranks = sorted({int(r) for k in kernels for r in k.get("ms_by_rank", {})})
    per_rank = len(ranks) <= MAX_RANK_COLUMNS
    table = Table(title=title, title_justify="left", header_style="bold")
    table.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=48)
    table.add_column("cat")
    for col in [f"r{r} ms" for r in ranks] if per_rank else ["min ms", "median ms", "max ms"]:
        table.add_column(col, justify="right")
    table.add_column("spread", justify="right")
    table.add_column("slowest", justify="right")
    for k in kernels:
        spread = k.get("spread")
        slow = spread is not None and float(spread) >= SLOW_RATIO
        slowest = k.get("slowest_rank")
        red = "bold red" if slow else None
        by_rank = k.get("ms_by_rank", {})
        if per_rank:
            cells = [
                Text(_ms(by_rank.get(str(r))), style=(red or "") if r == slowest else "")
                for r in ranks
            ]
        else:
            cells = [Text(_ms(k.get(f))) for f in ("min_ms", "median_ms")]
            cells.append(Text(_ms(k.get("max_ms")), style=red or ""))
        table.add_row(
            plain(_kernel_name(str(k.get("name", "")))),
            plain(k.get("category", "")),
            *cells,
            _spread(spread),
            Text(str(slowest), style=red or ""),
        )
    return table


def trace_table(summary: Mapping[str, Any], *, top: int | None = None) -> Table:
    """One Kineto trace's heaviest kernels (GPU activity, else CPU operators): calls, total,
    median and max ms per call, and share of the traced span (``kineto.summary_json`` rows)."""
    rank = summary.get("rank")
    head = f"rank {rank}" if rank is not None else str(summary.get("path", ""))
    busy = summary.get("gpu_busy_ms") or 0.0
    span = summary.get("span_ms") or 0.0
    gpu = f", GPU busy {busy:.1f} ms ({busy / span:.0%})" if busy and span else ""
    rows = list(summary.get("top", []))[:top]
    share = float(summary.get("top_share", 0.0))
    title = f"{head}: {_ms(span)} ms traced{gpu}; top {len(rows)} = {share:.1%} of it"
    if share > 1:
        title += " (CPU ops nest and overlap)"
    table = Table(title=plain(title), title_justify="left", header_style="bold")
    table.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=40)
    for col in ("cat", "device", "calls", "total ms", "median ms", "max ms", "share"):
        table.add_column(col, justify="left" if col in ("cat", "device") else "right", no_wrap=True)
    for k in rows:
        table.add_row(
            plain(_kernel_name(str(k.get("name", "")))),
            plain(k.get("category", "")),
            plain(k.get("device", "")),
            str(k.get("num_calls", 0)),
            _ms(k.get("total_ms")),
            f"{float(k.get('median_us', 0.0)) / 1000:.3f}",
            f"{float(k.get('max_us', 0.0)) / 1000:.3f}",
            f"{float(k.get('step_share', 0.0)):.1%}",
        )
    return table
