"""Per-run and per-rank numbers of a run directory: the object ``diag report --json`` prints.

Every number is computed from stored events; a number the events cannot give is ``None`` (JSON
``null``), never a made-up zero. Times are milliseconds (``*_ms``) or wall-clock nanoseconds since
the Unix epoch (``*_ns``).

Run facts come from the launcher's :class:`~diag.schema.RunEvent` (phase "start" and "end") and the
ranks' :class:`~diag.schema.RankInfo`; per-rank numbers from :class:`~diag.schema.StepEvent`,
:class:`~diag.schema.CollectiveEvent` and :class:`~diag.schema.CheckpointEvent`; the GPU section
from the latest :class:`~diag.schema.GpuSample` of each device.

Non-finite floats: JSON has no NaN. ``loss_last`` stays a number when finite and becomes the string
``"nan"``, ``"inf"`` or ``"-inf"`` otherwise (a NaN loss is a finding and must stay visible); any
other non-finite float (a GPU reading) becomes ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diag.store.dataframes import empty_frame
from diag.store.groupwise import last_by, medians_frame
from diag.store.run_store import RunStore

_NS_PER_MS = 1e6


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfoSummary:
    """The run as a whole.

    - ``id``: the launcher's run id (else a rank's, else the job id).
    - ``world_size``: ranks in the job as the ranks reported it (else ``nnodes * nproc_per_node``
      from the launcher, else the number of ranks seen).
    - ``steps``: the most optimizer steps any rank recorded.
    - ``exit_code``: the job's exit code; ``None`` until the launcher's end event.
    - ``start_ns``/``end_ns``: the launcher's start and end events; without them the first and
      the newest stored event (a live run's end is "now, as far as the store knows").
    - ``duration_ns``: the launcher's wall time, else ``end_ns - start_ns``.
    - ``num_events``: distinct events stored, all kinds.
    - ``num_dropped``: events the hooks lost (full queue, daemon away) and that never reached the
      store: the sum over hook processes of their latest :class:`~diag.schema.HookHealth` count.
      By reason, summed the same way (they add up to ``num_dropped`` for hooks of schema 1.9 on):
      ``num_queue_dropped`` (the training thread's queue was full), ``num_fr_dropped`` (Flight
      Recorder entries overwritten before a harvest), ``num_undelivered`` (the daemon was
      unreachable or slow, or they were unsent at exit), ``num_unencodable`` (a value the wire
      cannot hold: a bug in diag), ``num_oversize`` (an event larger than a frame).
    - ``num_hook_pauses`` and ``hook_paused_ns``: the hooks' pacing (schema 1.15), summed the
      same way: pauses their threads made so that the training threads got the GIL back, and
      their total length (0 for older hooks).
    - ``in_progress``: another process's analyzer is writing the run now (its ``writer_pid``):
      the job may still be running, and what is stored is the run so far.
    - ``silent_ranks``: the ranks whose hook went silent (:class:`~diag.schema.HookSilent`: its
      thread died or is stuck while the process ran) and sent no health after: their events from
      then on are missing.
    - ``nccl_untimed_ranks``: the NCCL ranks whose job runs without ``TORCH_NCCL_ENABLE_TIMING``
      (their hooks said so, schema 1.10): the Flight Recorder has each rank's arrival but no
      collective start and end times. ``diag run`` turns it on; it is read at the job's start.
    - ``unsettled_ranks``: the ranks with a profiler window that stopped while one of gloo's
      worker threads had not ended a collective's record yet (``ProfileWindow.unsettled``, schema
      1.16: torch's profiler race, :mod:`diag.hook.c10d_workers`): that record's late end wrote
      into freed memory, which can corrupt the process's heap.
    - ``num_stall_steps`` and ``stall_share``: a fact, not a finding. The steps after the first
      :data:`STALL_WARMUP` whose duration, the median over the ranks that ran them, was at least
      :data:`STALL_FACTOR` times the median such step; and the time they took beyond a median
      step, as a share of those steps' summed durations. In synchronous training a pause of the
      whole job (a network retransmission timeout, a shared filesystem) stretches every rank's
      step alike, so no detector that compares ranks may place it: the verdict then says what
      it cost (:func:`diag.cli.render.tables.stall_note`) rather than "no problem found" alone.
    """

    id: str
    command: str
    world_size: int
    nnodes: int
    nproc_per_node: int
    steps: int
    exit_code: int | None
    hosts: tuple[str, ...]
    start_ns: int | None
    end_ns: int | None
    duration_ns: int | None
    num_events: int
    num_dropped: int
    num_queue_dropped: int = 0
    num_fr_dropped: int = 0
    num_undelivered: int = 0
    num_unencodable: int = 0
    num_oversize: int = 0
    num_hook_pauses: int = 0
    hook_paused_ns: int = 0
    silent_ranks: tuple[int, ...] = ()
    in_progress: bool = False
    writer_pid: int | None = None
    nccl_untimed_ranks: tuple[int, ...] = ()
    unsettled_ranks: tuple[int, ...] = ()
    num_stall_steps: int = 0
    stall_share: float = 0.0


_DROP_REASONS = (
    "num_queue_dropped",
    "num_fr_dropped",
    "num_undelivered",
    "num_unencodable",
    "num_oversize",
)
#: the hooks' pacing counters (HookHealth, schema 1.15; absent from older runs' stores)
_PACING = ("num_gil_pauses", "gil_paused_ns")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankSummary:
    """One rank. Medians are over all of the rank's recorded steps (robust to warm-up steps).

    ``step_ms_median``: step duration. ``compute_ms_median``: the step minus collective wait,
    data wait and checkpoint time (``StepEvent.compute_ns``). ``wait_ms_median``: time blocked on
    collectives. ``data_ms_median``, ``forward_ms_median``, ``backward_ms_median``,
    ``optimizer_ms_median``: the step's phases. ``checkpoint_ms_total``: all checkpoint saves and
    loads of the rank (``CheckpointEvent``), summed. ``num_collectives``: collective records stored
    for the rank. ``loss_last``: the loss of the latest step that reported one.
    ``compute_vs_peers``: this rank's median compute / the median over its peers (every other
    rank) of their median compute; 1.0 is typical, 1.5 means 50% slower than its peers (``None``
    without steps or peers). The rank itself is left out of its reference: with it, a 2-rank
    job capped every ratio at 2x ("1.95x" for a rank 37x slower). In synchronous training the
    slow rank has the largest ratio and the smallest wait.
    """

    rank: int
    host: str
    steps: int
    last_step: int
    step_ms_median: float | None
    compute_ms_median: float | None
    wait_ms_median: float | None
    data_ms_median: float | None
    forward_ms_median: float | None
    backward_ms_median: float | None
    optimizer_ms_median: float | None
    checkpoint_ms_total: float
    num_checkpoints: int
    num_collectives: int
    loss_last: float | None
    compute_vs_peers: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSummary:
    """The latest sample of one GPU: utilization (0-100), SM clock and its maximum (MHz),
    temperature (C), power draw and limit (W), and the active slowdown reasons (comma-separated
    NVML names, "" when none). ``None`` where the device did not report the field."""

    host: str
    gpu_index: int
    uuid: str
    name: str
    ts_ns: int
    util_pct: float | None
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    temp_c: float | None
    power_w: float | None
    power_limit_w: float | None
    throttle_reasons: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """The run, its ranks (by rank) and its GPUs (by host, then index)."""

    run: RunInfoSummary
    ranks: tuple[RankSummary, ...]
    gpus: tuple[GpuSummary, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"run": {...}, "ranks": [...], "gpus": {host: [device, ...]}}``, strict JSON.

        ``gpus`` is ``{}`` when the run has no GPU telemetry; each device is a :class:`GpuSummary`
        without its ``host``.
        """
        run = self.run_json()
        ranks = []
        for r in self.ranks:
            row = {f: _json_value(getattr(r, f)) for f in RankSummary.__dataclass_fields__}
            row["loss_last"] = _loss_json(r.loss_last)
            ranks.append(row)
        gpus: dict[str, list[dict[str, Any]]] = {}
        for g in self.gpus:
            dev = {f: _json_value(getattr(g, f)) for f in GpuSummary.__dataclass_fields__}
            del dev["host"]
            gpus.setdefault(g.host, []).append(dev)
        return {"run": run, "ranks": ranks, "gpus": gpus}

    def run_json(self) -> dict[str, Any]:
        """``to_json()["run"]`` alone (without converting every rank's row: 16k ranks, ~0.7 s)."""
        return {f: _json_value(getattr(self.run, f)) for f in RunInfoSummary.__dataclass_fields__}


def _json_value(value: object) -> object:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _loss_json(loss: float | None) -> float | str | None:
    if loss is None or math.isfinite(loss):
        return loss
    return "nan" if math.isnan(loss) else ("inf" if loss > 0 else "-inf")


def _opt(value: object) -> Any:
    """A plain Python value, ``None`` for a missing one (pandas ``NA``)."""
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


def summarize(store: RunStore | str | Path) -> RunSummary:
    """The summary of a run store (or of the run directory at that path)."""
    if not isinstance(store, RunStore):
        store = RunStore.open(store)
    frames = {kind: store.resident_frame(kind) for kind in store.kinds()}
    ranks = _ranks(frames)
    run = _run(frames, ranks)
    writer = store.writer_pid()
    if writer is not None:
        run = replace(run, in_progress=True, writer_pid=writer)
    return RunSummary(run=run, ranks=ranks, gpus=_gpus(frames.get("gpu")))


def _ms(series: pd.Series) -> float | None:
    return None if series.empty else float(series.median()) / _NS_PER_MS


_MEDIANS = {
    "step_ms_median": "duration_ns",
    "compute_ms_median": "compute_ns",
    "wait_ms_median": "collective_wait_ns",
    "data_ms_median": "data_wait_ns",
    "forward_ms_median": "forward_ns",
    "backward_ms_median": "backward_ns",
    "optimizer_ms_median": "optimizer_ns",
}


def _collective_counts(colls: pd.DataFrame, sums: pd.DataFrame) -> dict[int, int]:
    """Collectives per rank: the raw rows its hook sent and those its daemon summed (schema 1.17;
    rows a daemon shipped again on a fetch are in its summaries already)."""
    if len(colls) and "source" in colls.columns:
        colls = colls[~colls["source"].astype(str).str.contains("/daemon/", regex=False)]
    counts = colls.groupby("rank").size()
    if len(sums):
        summed = (sums["num_collectives"] + sums["num_p2p"]).groupby(sums["rank"]).sum()
        counts = counts.add(summed, fill_value=0)
    return {int(r): int(n) for r, n in counts.items()}


def _ranks(frames: dict[str, pd.DataFrame]) -> tuple[RankSummary, ...]:
    """One summary per rank; every aggregate is one groupby over all ranks (16k ranks: ~1 s)."""
    steps = _ranked(frames, "step", ["rank", "step", "host", "loss"])
    colls = _ranked(frames, "collective", ["rank", "source"])
    ckpts = _ranked(frames, "checkpoint", ["rank", "duration_ns"])
    infos = _ranked(frames, "rank_info", ["rank", "host"])
    all_ranks = sorted({int(r) for df in (steps, infos) for r in df["rank"].unique()})
    by_rank = steps.groupby("rank")
    medians = _medians(frames["step"], list(_MEDIANS.values())) if len(steps) else None
    num_steps = by_rank.size().to_dict()
    last_step = by_rank["step"].max().to_dict()
    step_host = by_rank["host"].last().to_dict()
    info_host = infos.groupby("rank")["host"].last().to_dict()
    loss_last = _last_loss(steps)
    ck_ms = (ckpts.groupby("rank")["duration_ns"].sum() / _NS_PER_MS).to_dict()
    ck_count = ckpts.groupby("rank").size().to_dict()
    sums = _ranked(frames, "collective_summary", ["rank", "num_collectives", "num_p2p"])
    coll_count = _collective_counts(colls, sums)
    compute = (medians["compute_ns"] / _NS_PER_MS).to_dict() if medians is not None else {}
    peers = _peer_medians(compute)
    # rank -> {name: ms}: one conversion for all ranks (a .loc per rank was 1 s at 16k ranks)
    per_rank: dict[int, dict[str, float]] = {}
    if medians is not None:
        ms_frame = (medians[list(_MEDIANS.values())] / _NS_PER_MS).astype(float)
        ms_frame.columns = list(_MEDIANS)
        per_rank = {int(r): row for r, row in ms_frame.to_dict("index").items()}
    none: dict[str, float | None] = dict.fromkeys(_MEDIANS)
    out = []
    for rank in all_ranks:
        ms: dict[str, float | None] = dict(per_rank.get(rank, none))
        mine = ms["compute_ms_median"]
        loss = loss_last.get(rank)
        out.append(
            RankSummary(
                rank=rank,
                host=str(info_host.get(rank, step_host.get(rank, ""))),
                steps=int(num_steps.get(rank, 0)),
                last_step=int(last_step.get(rank, -1)),
                step_ms_median=ms["step_ms_median"],
                compute_ms_median=mine,
                wait_ms_median=ms["wait_ms_median"],
                data_ms_median=ms["data_ms_median"],
                forward_ms_median=ms["forward_ms_median"],
                backward_ms_median=ms["backward_ms_median"],
                optimizer_ms_median=ms["optimizer_ms_median"],
                checkpoint_ms_total=float(ck_ms.get(rank, 0.0)),
                num_checkpoints=int(ck_count.get(rank, 0)),
                num_collectives=int(coll_count.get(rank, 0)),
                loss_last=None if loss is None else float(loss),
                compute_vs_peers=_ratio(mine, peers.get(rank)),
            )
        )
    return tuple(out)


def _last_loss(steps: pd.DataFrame) -> dict[int, float]:
    """The last recorded loss per rank (rows in order), NaN/Inf kept (``groupby.last()`` would
    skip a NaN). From positions, not rows: a row filter and a group-by held ~0.5 GB at 131,072
    ranks x 50 steps."""
    loss = steps["loss"]
    pos = np.flatnonzero(loss.notna().to_numpy(dtype=bool))
    if not len(pos):
        return {}
    held, at = last_by(steps["rank"].to_numpy()[pos])
    return dict(zip(held.tolist(), loss.array.take(pos[at]).tolist(), strict=True))


def _peer_medians(values: dict[int, float]) -> dict[int, float]:
    """rank -> the median of every *other* rank's value (NaN values left out); one sort for all
    ranks (the median of a sorted list less one element is one or two lookups)."""
    finite = sorted((v, r) for r, v in values.items() if v == v)
    n = len(finite)
    out: dict[int, float] = {}
    if n < 2:
        return out
    vals = [v for v, _ in finite]
    m = n - 1  # the peers' count

    def at(j: int, i: int) -> float:  # the j-th of the sorted values without index i
        return vals[j] if j < i else vals[j + 1]

    for i, (_, rank) in enumerate(finite):
        if m % 2:
            out[rank] = at(m // 2, i)
        else:
            out[rank] = (at(m // 2 - 1, i) + at(m // 2, i)) / 2
    return out


def _ratio(mine: float | None, reference: float | None) -> float | None:
    if mine is None or reference is None or not reference > 0 or mine != mine:
        return None
    return mine / reference


def _medians(steps: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Per rank (``rank >= 0``), the median of each of ``columns`` (floats; index ``rank``)."""
    return medians_frame(steps, "rank", columns, np.flatnonzero(steps["rank"].to_numpy() >= 0))


def _ranked(frames: dict[str, pd.DataFrame], kind: str, columns: Sequence[str]) -> pd.DataFrame:
    """``columns`` of the rows of ``kind`` tied to a rank (``rank >= 0``), ordered by step then
    time (stable). The rows are chosen and ordered first and only those columns taken: a filter
    and then a sort of the whole frame held two copies of all of its columns where the rows were
    out of step order (at 131,072 ranks x 50 steps up to 2.5 GB of step rows, for a summary that
    reads 11 of 26 columns)."""
    df = frames.get(kind)
    if df is None:
        df = empty_frame(kind)
    rank = df["rank"].to_numpy()
    rows = np.flatnonzero(rank >= 0)
    chosen = rows[np.lexsort((df["ts_ns"].to_numpy()[rows], df["step"].to_numpy()[rows]))]
    if len(chosen) == len(df) and bool((chosen == np.arange(len(df))).all()):
        return df  # every row, already in order: nothing to copy
    # column by column: selecting the columns of a consolidated frame first copies them too
    return pd.DataFrame(
        {c: df[c].array.take(chosen) for c in columns if c in df.columns},
        index=df.index.take(chosen),
        copy=False,
    )


def _run(frames: dict[str, pd.DataFrame], ranks: tuple[RankSummary, ...]) -> RunInfoSummary:
    run = frames.get("run")
    start = run[run["phase"] == "start"] if run is not None else None
    end = run[run["phase"] == "end"] if run is not None else None
    infos = frames.get("rank_info")
    num_events = sum(len(df) for df in frames.values())
    hosts = sorted({h for df in frames.values() for h in df["host"].unique() if h})
    first_ts = min((int(df["ts_ns"].min()) for df in frames.values() if len(df)), default=None)
    last_ts = max((int(df["ts_ns"].max()) for df in frames.values() if len(df)), default=None)

    run_id = ""
    command = ""
    nnodes = nproc = 0
    if start is not None and len(start):
        s = start.iloc[-1]
        run_id, command = str(s["run_id"]), str(s["command"])
        nnodes, nproc = int(s["nnodes"]), int(s["nproc_per_node"])
    if not run_id and infos is not None and len(infos):
        run_id = next((str(x) for x in infos["run_id"] if x), "")
    if not run_id:
        run_id = next((str(x) for df in frames.values() for x in df["job_id"].unique() if x), "")

    world_size = int(infos["world_size"].max()) if infos is not None and len(infos) else 0
    if world_size <= 0:
        world_size = nnodes * nproc or len(ranks)

    start_ns = int(start["ts_ns"].iloc[0]) if start is not None and len(start) else first_ts
    exit_code = None
    duration_ns = None
    end_ns = last_ts
    if end is not None and len(end):
        e = end.iloc[-1]
        exit_code, end_ns = int(e["exit_code"]), int(e["ts_ns"])
        duration_ns = int(e["duration_ns"]) or None
    if duration_ns is None and start_ns is not None and end_ns is not None:
        duration_ns = end_ns - start_ns

    dropped = dict.fromkeys(("num_dropped", *_DROP_REASONS), 0)
    health = frames.get("hook_health")
    if health is not None and len(health):
        latest = health.sort_values(["source", "seq"]).groupby("source").tail(1)
        dropped = {name: int(latest[name].sum()) for name in dropped}
        paced = {name: int(latest[name].sum()) for name in _PACING if name in latest.columns}
    else:
        paced = {}

    return RunInfoSummary(
        id=run_id,
        command=command,
        world_size=world_size,
        nnodes=nnodes,
        nproc_per_node=nproc,
        steps=max((r.steps for r in ranks), default=0),
        exit_code=exit_code,
        hosts=tuple(hosts),
        start_ns=start_ns,
        end_ns=end_ns,
        duration_ns=duration_ns,
        num_events=num_events,
        num_dropped=dropped["num_dropped"],
        num_queue_dropped=dropped["num_queue_dropped"],
        num_fr_dropped=dropped["num_fr_dropped"],
        num_undelivered=dropped["num_undelivered"],
        num_unencodable=dropped["num_unencodable"],
        num_oversize=dropped["num_oversize"],
        num_hook_pauses=paced.get("num_gil_pauses", 0),
        hook_paused_ns=paced.get("gil_paused_ns", 0),
        silent_ranks=_silent_ranks(health, frames.get("hook_silent")),
        nccl_untimed_ranks=_nccl_untimed(infos),
        unsettled_ranks=_unsettled(frames.get("profile_window")),
        **_stalls(frames.get("step")),
    )


#: :attr:`RunInfoSummary.num_stall_steps`: a step this many times the median step or longer
STALL_FACTOR = 5.0
#: the job's first steps (allocation, autotuning, compilation), never counted as stalls
STALL_WARMUP = 5


def _stalls(steps: pd.DataFrame | None) -> dict[str, Any]:
    """``num_stall_steps`` and ``stall_share`` of :class:`RunInfoSummary` (one groupby)."""
    if steps is None or not len(steps):
        return {}
    rows = steps[steps["rank"] >= 0]
    if not len(rows):
        return {}
    first = int(rows["step"].min())
    rows = rows[rows["step"] >= first + STALL_WARMUP]
    if not len(rows):
        return {}
    per_step = rows.groupby("step")["duration_ns"].median().to_numpy(dtype=float)
    typical = float(np.median(per_step))
    if typical <= 0:
        return {}
    stalls = per_step[per_step >= STALL_FACTOR * typical]
    total = float(per_step.sum())
    return {
        "num_stall_steps": len(stalls),
        "stall_share": float((stalls - typical).sum() / total) if total > 0 else 0.0,
    }


def _unsettled(windows: pd.DataFrame | None) -> tuple[int, ...]:
    """Ranks with a window stopped while a gloo worker still held one of its records."""
    if windows is None or not len(windows) or "unsettled" not in windows.columns:
        return ()  # hooks before schema 1.16 did not wait nor say
    late = windows[windows["unsettled"].fillna(0).astype("int64") > 0]
    return tuple(sorted({int(r) for r in late["rank"] if int(r) >= 0}))


def _nccl_untimed(infos: pd.DataFrame | None) -> tuple[int, ...]:
    """Ranks whose latest announcement names an NCCL backend and NCCL timing off."""
    if infos is None or not len(infos) or "nccl_timing" not in infos.columns:
        return ()  # hooks before schema 1.10 did not say
    rows = infos[infos["rank"] >= 0].sort_values(["ts_ns", "seq"], kind="stable")
    latest = rows.groupby("rank").tail(1)
    nccl = latest["backend"].astype(str).str.lower().str.contains("nccl")
    off = ~latest["nccl_timing"].fillna(False).astype(bool)
    return tuple(sorted(int(r) for r in latest.loc[nccl & off, "rank"]))


def _silent_ranks(health: pd.DataFrame | None, silent: pd.DataFrame | None) -> tuple[int, ...]:
    """Ranks with a :class:`~diag.schema.HookSilent` after which their hook sent no health."""
    if silent is None or not len(silent):
        return ()
    last_seq: dict[str, int] = {}
    if health is not None and len(health):
        last_seq = health.groupby("source")["seq"].max().to_dict()
    ranks = {
        int(row.rank)
        for row in silent.itertuples()
        if last_seq.get(str(row.hook_source), -1) <= int(row.last_health_seq)
    }
    return tuple(sorted(ranks))


def _gpus(df: pd.DataFrame | None) -> tuple[GpuSummary, ...]:
    if df is None or not len(df):
        return ()
    latest = df.sort_values(["ts_ns", "seq"], kind="stable").groupby(["host", "gpu_index"]).tail(1)
    latest = latest.sort_values(["host", "gpu_index"], kind="stable")
    return tuple(
        GpuSummary(
            host=str(row["host"]),
            gpu_index=int(row["gpu_index"]),
            uuid=str(row["uuid"]),
            name=str(row["name"]),
            ts_ns=int(row["ts_ns"]),
            util_pct=_opt(row["util_pct"]),
            sm_clock_mhz=_opt(row["sm_clock_mhz"]),
            sm_clock_max_mhz=_opt(row["sm_clock_max_mhz"]),
            temp_c=_opt(row["temp_c"]),
            power_w=_opt(row["power_w"]),
            power_limit_w=_opt(row["power_limit_w"]),
            throttle_reasons=str(row["throttle_reasons"]),
        )
        for _, row in latest.iterrows()
    )
