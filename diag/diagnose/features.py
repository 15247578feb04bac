"""Feature frames for the detectors: computed once per run from a :class:`RunStore`.

Every frame is built from ``RunStore.frame(kind)`` (itself built by :mod:`diag.store.dataframes`);
no other module turns events into frames. Times are milliseconds (``*_ms``) unless the column says
``*_ns`` (wall-clock nanoseconds since the Unix epoch).

Also here: the small per-step helpers the detectors share (a step x rank table, each rank's value
against its peers' median, and "persistent" = true in most of a sliding window of steps).

A rank's *peers* are the ranks doing the same work: its work class in the run's
:class:`~diag.diagnose.layout.Layout` (``Features.layout``: same pipeline stage and TP position,
other replicas), every other rank when the layout is unknown.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from diag.diagnose.layout import Layout
from diag.diagnose.layout_infer import infer, profiles_from_steps
from diag.store.groupwise import last_by
from diag.store.run_store import RunStore

_NS_PER_MS = 1e6

#: ``steps`` columns, one row per (rank, step).
STEP_COLUMNS = (
    "rank",  # global rank
    "step",  # optimizer step number
    "host",  # host the rank runs on
    "duration_ms",  # the whole step (StepEvent.duration_ns)
    # the rank's own compute: the step minus collective wait, data wait, checkpoint and the time
    # its training thread waited for a CPU (compute_ns - cpu_wait_ns): a rank descheduled on a
    # busy host is not a slow device
    "compute_ms",
    "cpu_wait_ms",  # run-queue delay of the training thread (cpu_wait_ns; 0 where unknown)
    "wait_ms",  # blocked on collectives (collective_wait_ns): large on ranks waiting for a slow one
    "data_ms",  # waiting for the data loader (data_wait_ns)
    "ckpt_ms",  # checkpoint save/load inside the step (checkpoint_ns)
    "start_ns",  # step start, wall clock
    "end_ns",  # step end, wall clock
)

#: ``ckpt`` columns, one row per CheckpointEvent.
CKPT_COLUMNS = (
    "rank",
    "host",
    "step",  # the step during (or after) which it ran; -1 if unknown
    "op",  # "save" or "load"
    "path",  # checkpoint path as the hook saw it
    "num_bytes",  # bytes written or read (0 if unknown)
    "start_ns",
    "duration_ms",
    "throughput_mb_s",  # num_bytes / 1e6 per second of duration; NaN without bytes or duration
)

#: ``host`` columns (HostSample): per-host CPU, memory and I/O samples.
HOST_COLUMNS = (
    "host",
    "ts_ns",
    "num_cpus",  # logical CPUs of the host
    "cpu_busy_pct",
    "cpu_iowait_pct",
    "load_1m",
    "disk_read_bytes_per_s",
)
#: ``proc`` columns (ProcSample): per-rank process samples (``last_cpu``: the CPU it last ran
#: on, -1 unknown; ``num_state_samples``, ``num_stopped``: how often its main thread's state was
#: read over the sample's ``interval_ns``, and found stopped).
PROC_COLUMNS = (
    "rank",
    "host",
    "ts_ns",
    "interval_ns",
    "cpu_pct",
    "rss_bytes",
    "read_bytes_per_s",
    "last_cpu",
    "num_state_samples",
    "num_stopped",
    "num_disk_wait",
    "run_delay_ns",  # the whole process's run-queue delay over the interval (NaN: unknown)
    "cpu_throttled_ns",  # its cgroup's CPU quota held it throttled this long (NaN: unknown)
    "cpu_limit_cores",  # the tightest CPU quota on its cgroup path, in cores (0: none, unknown)
)


@dataclass(frozen=True, slots=True)
class Features:
    """The frames every detector reads (see the ``*_COLUMNS`` tuples for what each column is).

    ``steps`` is sorted by (step, rank) and unique on (rank, step) (the latest event wins);
    ``ckpt`` is sorted by start time; ``host`` and ``proc`` by time.
    """

    steps: pd.DataFrame
    ckpt: pd.DataFrame
    host: pd.DataFrame
    proc: pd.DataFrame
    #: The stored frames as they are (columns = the schema's fields), for the detectors that work
    #: on events directly: link (step and collective events) and kernel (kernel summaries and
    #: profile windows). Empty frames when the run has none.
    step_events: pd.DataFrame = field(default_factory=pd.DataFrame)
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The node daemons' per (rank, step, group) summaries of the collectives (schema 1.17), as
    #: stored: at fleet scale they stand in for the raw rows of most steps (the link detector).
    collective_summaries: pd.DataFrame = field(default_factory=pd.DataFrame)
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    windows: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: GPU telemetry (GpuSample, keyed by host + ``gpu_index``), XID errors and the ranks'
    #: announcements (RankInfo: ``device`` says which GPU a rank uses), as stored: the node
    #: detector's corroboration reads them.
    gpu: pd.DataFrame = field(default_factory=pd.DataFrame)
    xid: pd.DataFrame = field(default_factory=pd.DataFrame)
    rank_info: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Hang and crash evidence, as stored (the hang detector reads them): the hooks' HangReports,
    #: thread stacks (StackDump: hook and py-spy), uncaught exceptions, rank exits (daemon and
    #: launcher) and the hooks' health reports (a ``final`` one: the process exited normally).
    hangs: pd.DataFrame = field(default_factory=pd.DataFrame)
    stacks: pd.DataFrame = field(default_factory=pd.DataFrame)
    exceptions: pd.DataFrame = field(default_factory=pd.DataFrame)
    exits: pd.DataFrame = field(default_factory=pd.DataFrame)
    hook_health: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Numerics (schema 1.4), as stored (the drift detector reads them): sampled gradient norms
    #: and loss scales (NumericsSample), first non-finite values (NonFinite), replica checksums
    #: (ParamFingerprint) and data-loader batch statistics (BatchStats).
    numerics: pd.DataFrame = field(default_factory=pd.DataFrame)
    nonfinite: pd.DataFrame = field(default_factory=pd.DataFrame)
    fingerprints: pd.DataFrame = field(default_factory=pd.DataFrame)
    batch_stats: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The parallel layout's raw signal (schema 1.6), as stored: every process group each rank's
    #: hook saw (ProcessGroupInfo: name, description, member ranks). Empty for older runs and
    #: timing tables (whose ``dp_rank``/``pp_rank``/``tp_rank`` columns say the same).
    process_groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Processes on the job's hosts that are not its ranks, with their CPU (HostProcess, schema
    #: 1.6), as stored: who competes with the ranks for CPU.
    host_processes: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The ranks' TCP connections per remote address (TcpPeerSample, schema 1.8), as stored:
    #: the link detector narrows a slow group to the host whose connections queue or lose.
    tcp: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Results of the probes the node daemons ran on request (ProbeResultEvent, schema 1.5), as
    #: stored: the link detector reads the closed loop's point-to-point round (``tcp_pair``).
    probes: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The daemons' collector failures (CollectorError), as stored: a GPU driver that stopped
    #: answering its deadline (:mod:`~diag.diagnose.detectors.gpu_wedged`).
    collector_errors: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Which ranks do the same work (:mod:`~diag.diagnose.layout`); None: not inferred yet
    #: (:meth:`work_layout` infers it from the frames above).
    layout: Layout | None = None
    #: What the detectors ask of ``steps`` again and again, built once: each column's step x
    #: rank table (nine reads of five columns rebuilt it each time: a pivot_table over 800k
    #: rows at 16k ranks, ~0.2 s each) and the ranks' hosts.
    _memo: dict[object, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_store(cls, store: RunStore) -> Features:
        """Features of a run store; :class:`~diag.errors.InputError` if a part is unreadable."""
        step_events = store.resident_frame("step")
        # the phase profiles before the steps table: their transients (~160 MB at 131,072 ranks x
        # 50 steps) were on top of it
        profiles = profiles_from_steps(step_events)
        probes = store.frame("probe_result")
        steps = without_probe_steps(_steps(step_events), probes)
        groups = store.frame("process_group")
        collectives = store.frame("collective")
        hosts = _rank_hosts(steps)
        made = cls(
            steps=steps,
            ckpt=_ckpt(store.frame("checkpoint")),
            host=_pick(store.frame("host"), HOST_COLUMNS),
            proc=_pick(store.frame("proc"), PROC_COLUMNS),
            step_events=step_events,
            collectives=collectives,
            collective_summaries=store.frame("collective_summary"),
            kernels=store.frame("kernel"),
            windows=store.frame("profile_window"),
            gpu=store.frame("gpu"),
            xid=store.frame("xid"),
            rank_info=store.frame("rank_info"),
            hangs=store.frame("hang"),
            stacks=store.frame("stack"),
            exceptions=store.frame("exception"),
            exits=store.frame("rank_exit"),
            hook_health=store.frame("hook_health"),
            numerics=store.frame("numerics"),
            nonfinite=store.frame("nonfinite"),
            fingerprints=store.frame("fingerprint"),
            batch_stats=store.frame("batch_stats"),
            process_groups=groups,
            host_processes=store.frame("host_process"),
            collector_errors=store.frame("collector_error"),
            tcp=store.frame("tcp_peer"),
            probes=probes,
            layout=_layout(step_events, groups, collectives, hosts, profiles),
        )
        made._memo["hosts"] = hosts
        return made

    def work_layout(self) -> Layout:
        """The run's layout: ``layout`` when set, else inferred from the process groups,
        the collectives and the step events' time profiles."""
        if self.layout is not None:
            return self.layout
        layout = self._memo.get("layout")
        if layout is None:
            layout = self._memo["layout"] = _layout(
                self.step_events, self.process_groups, self.collectives, self.hosts_of()
            )
        return layout

    def wide(self, column: str, warmup_steps: int = 0) -> pd.DataFrame:
        """``steps[column]`` as a step x rank table (float), steps after the first
        ``warmup_steps`` only; steps missing on some rank are dropped (a partial step cannot be
        compared across ranks)."""
        if self.steps.empty:
            return pd.DataFrame(dtype=float)
        table = self._memo.get(("wide", column))
        if table is None:
            if "grid" not in self._memo:
                self._memo["grid"] = _grid_of(self.steps)
            grid = self._memo["grid"]
            table = self._memo[("wide", column)] = _step_by_rank(self.steps, column, grid)
        return table.iloc[warmup_steps:]  # copy-on-write: the caller's to change

    def profiled_steps(self) -> np.ndarray:
        """The step indices inside diag's own profiler windows (a window's first step to its
        last, on any rank; sorted, unique). Their times measure the profiler as much as the job:
        torch's per-operator recording and the window's stop, which cost each rank its own (on
        four ranks sharing two cores, one rank's window steps ran 36 ms longer than its peers'
        on average, the other steps 0.2 ms)."""
        done = self._memo.get("profiled")
        if done is None:
            done = self._memo["profiled"] = _window_steps(self.windows)
        return done

    def hosts_of(self) -> dict[int, str]:
        """rank -> host (the latest step of each rank)."""
        hosts = self._memo.get("hosts")
        if hosts is None:
            hosts = self._memo["hosts"] = _rank_hosts(self.steps)
        return dict(hosts)


@dataclass(frozen=True, slots=True)
class _Grid:
    """Where each row of a steps table unique on (step, rank) goes in its step x rank tables:
    the sorted steps and ranks, and each row's cell (``None``: row ``i`` is cell ``i``, a table
    sorted by (step, rank) with every cell present, as :func:`_steps` builds a full run's).
    ``dense``: the number of leading steps that are such a block when the steps after them are
    all partial (a live pass's newest steps, which ranks' rows reach at different times): the
    tables are then those steps' rows, reshaped, wherever they hold no NaN."""

    step_ids: np.ndarray
    rank_ids: np.ndarray
    cell: np.ndarray | None
    dense: int = 0


def _grid_of(steps: pd.DataFrame) -> _Grid | None:
    """The cells of ``steps``' rows, once for every column (each column's own factorizing and
    scattering held ~9 arrays of a row each: the data and node detectors' peak at 131,072 ranks
    x 50 steps); ``None`` when a (step, rank) repeats (each column then picks its last value)."""
    step, rank = steps["step"].to_numpy(), steps["rank"].to_numpy()
    step_ids, rank_ids = np.sort(pd.unique(step)), np.sort(pd.unique(rank))
    num_steps, num_ranks = len(step_ids), len(rank_ids)
    if len(step) == num_steps * num_ranks and _block(step, rank, step_ids, rank_ids):
        return _Grid(step_ids, rank_ids, None, num_steps)
    step_codes, step_ids = pd.factorize(step, sort=True)
    rank_codes, rank_ids = pd.factorize(rank, sort=True)
    cell = step_codes.astype(np.int64) * len(rank_ids) + rank_codes
    del rank_codes
    size = len(step_ids) * len(rank_ids)
    per_step = np.bincount(step_codes, minlength=len(step_ids))
    del step_codes
    if np.bincount(cell, minlength=size).max(initial=0) > 1:
        return None
    # the complete steps first and only partial ones after them, in order: a block of rows
    full = per_step == len(rank_ids)
    dense = int(np.argmin(full)) if not full.all() else len(full)
    if full[dense:].any() or not _block(
        step[: dense * len(rank_ids)], rank[: dense * len(rank_ids)], step_ids[:dense], rank_ids
    ):
        dense = 0
    return _Grid(np.asarray(step_ids), np.asarray(rank_ids), cell, dense)


def _block(step: np.ndarray, rank: np.ndarray, step_ids: np.ndarray, rank_ids: np.ndarray) -> bool:
    """Whether rows (``step``, ``rank``) are every (step, rank) of the ids, sorted: checked a
    step at a time."""
    shape = (len(step_ids), len(rank_ids))
    return bool(
        (step.reshape(shape) == step_ids[:, None]).all()
        and (rank.reshape(shape) == rank_ids[None, :]).all()
    )


def _step_by_rank(steps: pd.DataFrame, column: str, cells: _Grid | None = None) -> pd.DataFrame:
    """``steps[column]`` as a step x rank table: each cell the last non-NaN value of its (step,
    rank) in frame order, steps missing on some rank dropped, sorted (as ``pivot_table(...,
    aggfunc="last").dropna()``, by one scatter into an array instead of a group-by). ``cells``:
    :func:`_grid_of` ``steps`` when it is unique on (step, rank): the scatter is then the only
    copy of the column."""
    col = steps[column]
    # a float column as it is (a read-only view; NaN is its missing value): a conversion with
    # ``na_value`` copies it
    values = col.to_numpy() if col.dtype == np.float64 else col.to_numpy(float, na_value=np.nan)
    valid = ~np.isnan(values)
    if not valid.any():
        table = steps.pivot_table(index="step", columns="rank", values=column, aggfunc="last")
        return table.dropna().astype(float).sort_index()
    if cells is not None and cells.cell is not None and cells.dense:
        block = values[: cells.dense * len(cells.rank_ids)]
        if not np.isnan(block).any():
            # the complete steps' rows, reshaped (a view): the partial steps after them have a
            # missing cell on some rank each, so the scatter below drops them, and with no NaN
            # among these every one of their steps and ranks stays, as it would there
            return pd.DataFrame(
                block.reshape(cells.dense, len(cells.rank_ids)),
                index=pd.Index(cells.step_ids[: cells.dense], name="step"),
                columns=pd.Index(cells.rank_ids, name="rank"),
                copy=False,
            )
    if cells is not None:
        num_steps, num_ranks = len(cells.step_ids), len(cells.rank_ids)
        if cells.cell is None:
            # the column itself, reshaped: no copy (at 131,072 ranks x 50 steps ~50 MB for each
            # of the five tables the detectors share). Read-only (``to_numpy`` of a column under
            # copy-on-write); the steps table is never changed once built, and :meth:`wide`
            # hands out slices that pandas copies before any write.
            flat = values
        else:
            flat = np.full(num_steps * num_ranks, np.nan)
            flat[cells.cell] = values  # a NaN value leaves its cell NaN, as no value would
        full = flat.reshape(num_steps, num_ranks)
        del flat
        # only the steps and ranks with a value, as the scatter of the valid rows has them
        present = ~np.isnan(full)
        rows, cols = present.any(axis=1), present.any(axis=0)
        del present
        if not (rows.all() and cols.all()):
            full = full[rows][:, cols]
        complete = ~np.isnan(full).any(axis=1)
        table = pd.DataFrame(
            full,
            index=pd.Index(cells.step_ids[rows], name="step"),
            columns=pd.Index(cells.rank_ids[cols], name="rank"),
            copy=False,  # the array is this table's own, or a view of the column (above)
        )
        return table if complete.all() else table[complete]
    values = values[valid]
    step_codes, step_ids = pd.factorize(steps["step"].to_numpy()[valid], sort=True)
    rank_codes, rank_ids = pd.factorize(steps["rank"].to_numpy()[valid], sort=True)
    size = len(step_ids) * len(rank_ids)
    cell = step_codes.astype(np.int64) * len(rank_ids) + rank_codes
    if np.bincount(cell, minlength=size).max() > 1:  # repeated (step, rank): the last one wins
        last = ~pd.Series(cell).duplicated(keep="last").to_numpy()
        cell, values = cell[last], values[last]
    flat = np.full(size, np.nan)
    flat[cell] = values
    grid = flat.reshape(len(step_ids), len(rank_ids))
    table = pd.DataFrame(
        grid,
        index=pd.Index(step_ids, name="step"),
        columns=pd.Index(rank_ids, name="rank"),
    )
    return table[~np.isnan(grid).any(axis=1)]


def _rank_hosts(steps: pd.DataFrame) -> dict[int, str]:
    """rank -> host, of each rank's latest step (its last row: ``steps`` is sorted by step)."""
    if steps.empty:
        return {}
    if steps["host"].isna().any():
        last = steps.groupby("rank")["host"].last()  # a null host skipped, as the group-by does
        return {int(r): str(h) for r, h in last.items()}
    ranks, rows = last_by(steps["rank"].to_numpy())
    hosts = steps["host"].array.take(rows)
    return {int(r): str(h) for r, h in zip(ranks.tolist(), hosts, strict=True)}


def _layout(
    step_events: pd.DataFrame,
    groups: pd.DataFrame,
    coll: pd.DataFrame,
    hosts: dict[int, str],
    profiles: pd.DataFrame | None = None,
) -> Layout:
    return infer(
        sorted(hosts),
        dict(hosts),
        groups=groups,
        collectives=coll,
        profiles=profiles_from_steps(step_events) if profiles is None else profiles,
    )


def _steps(df: pd.DataFrame) -> pd.DataFrame:
    """The ``steps`` table of a step events frame: the last event of each (step, rank) of a
    training rank, sorted by (step, rank). The rows are chosen first and each column is built
    from them at its final size: filtering, converting and then deduplicating the frame held
    two copies of every column (at 131,072 ranks x 50 steps the table is ~500 MB)."""
    rank = df["rank"].to_numpy()  # as the store holds them (int32 where they fit): no copy
    step = df["step"].to_numpy()
    idx = ranked_last_positions((step, rank), rank)

    def ns(name: str) -> np.ndarray:  # the chosen rows of an integer column, as floats
        return df[name].to_numpy()[idx].astype(float)  # exact: int32, or int64 under 2**53

    def ms(name: str) -> np.ndarray:  # ... in milliseconds: one array, divided in place
        out = ns(name)
        out /= _NS_PER_MS
        return out

    cpu_wait = ns("cpu_wait_ns")
    np.clip(cpu_wait, 0, None, out=cpu_wait)  # runs before schema 1.2: the default, 0
    compute = ns("compute_ns")
    compute -= cpu_wait
    if "cpu_wait_data_ns" in df.columns:  # schema 1.18: the delay met making a batch (or
        in_data = ns("cpu_wait_data_ns")  # writing a checkpoint) is not the compute's
        np.clip(in_data, 0, cpu_wait, out=in_data)
        compute += in_data
        del in_data
    compute /= _NS_PER_MS
    cpu_wait /= _NS_PER_MS
    host = df["host"] if df["host"].dtype == "category" else df["host"].astype(str)
    out = pd.DataFrame(
        {
            "rank": rank[idx],  # as the store holds them: int32 where they fit
            "step": step[idx],
            "host": host.array.take(idx),
            "duration_ms": ms("duration_ns"),
            "compute_ms": compute,
            "cpu_wait_ms": cpu_wait,
            "wait_ms": ms("collective_wait_ns"),
            "data_ms": ms("data_wait_ns"),
            "ckpt_ms": ms("checkpoint_ns"),
            "start_ns": df["start_ns"].to_numpy(dtype=np.int64)[idx],
            "end_ns": df["end_ns"].to_numpy(dtype=np.int64)[idx],
        },
        columns=list(STEP_COLUMNS),
        copy=False,
    )
    if "device_wait_ns" in df:  # schema 1.11: the device's split wins where the hook has it
        with_device_split(out, pd.Series(df["device_wait_ns"].array.take(idx)))
    return out


def with_device_split(steps: pd.DataFrame, device_wait_ns: pd.Series) -> None:
    """Set ``compute_ms`` and ``wait_ms`` of ``steps`` (in place) from the device's timing
    where the hook has it (``device_wait_ns``, one value or NA per row, in the rows' order)."""
    device = device_wait_ns.astype("Float64")
    timed = device.notna().to_numpy(dtype=bool)
    if timed.any():
        compute, wait = device_split(
            steps["duration_ms"].to_numpy(dtype=float)[timed],
            steps["data_ms"].to_numpy(dtype=float)[timed],
            steps["ckpt_ms"].to_numpy(dtype=float)[timed],
            device.to_numpy(dtype=float, na_value=np.nan)[timed] / _NS_PER_MS,
        )
        steps.loc[timed, "wait_ms"] = wait
        steps.loc[timed, "compute_ms"] = compute


def ranked_last_positions(keys: tuple[np.ndarray, np.ndarray], rank: np.ndarray) -> np.ndarray:
    """:func:`last_positions` of the two ``keys`` over the rows of a training rank
    (``rank >= 0``) only; where every row is one, of all of them, with no gathered copy of the
    keys (at 131,072 ranks x 50 steps each gather was ~50 MB)."""
    if not len(rank) or rank.min() >= 0:
        return last_positions(*keys)
    ranked = np.flatnonzero(rank >= 0)
    return ranked[last_positions(keys[0][ranked], keys[1][ranked])]


def last_positions(step: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The positions of the last row of each (step, rank) in input order, sorted by
    (step, rank): a de-duplication keeping the last and a sort that copy only the keys (any
    two key columns: the first sorts first)."""
    order = np.lexsort((rank, step))  # stable: equal keys keep input order
    s, r = step[order], rank[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (s[1:] != s[:-1]) | (r[1:] != r[:-1])
    return order[last]


def device_split(
    duration_ms: np.ndarray, data_ms: np.ndarray, ckpt_ms: np.ndarray, device_wait_ms: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A step's (compute_ms, wait_ms) from its device timing (schema 1.11): the collective wait
    the device measured, and the rest of the step less data and checkpoint as compute (at least
    0). NaN where ``device_wait_ms`` is (a step the hook did not time on the device). The one
    rule for the features and the live triage's screen."""
    busy = (duration_ms - device_wait_ms) - (data_ms + ckpt_ms)
    return np.maximum(busy, 0.0), device_wait_ms


def _window_steps(windows: pd.DataFrame) -> np.ndarray:
    """Every step a profile window covered, on any rank (``step`` .. ``step + num_steps - 1``)."""
    if windows.empty or not {"step", "num_steps"} <= set(windows.columns):
        return np.zeros(0, dtype=np.int64)
    first = windows["step"].to_numpy(dtype=np.int64)
    count = np.clip(windows["num_steps"].to_numpy(dtype=np.int64), 1, None)
    keep = first >= 0
    first, count = first[keep], count[keep]
    # each window's steps: its first step repeated, plus 0 .. count - 1
    offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return np.unique(np.repeat(first, count) + offsets)


def without_probe_steps(steps: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """``steps`` less every step that ran, on any rank, while diag's own probes ran on that
    rank's host (a ``probe_result``'s ``ts_ns - duration_ns`` to ``ts_ns``: from the daemon taking
    the request to the result; the closed loop's link round, ``diag replay --via-analyzer``).
    Those steps are not evidence about the job: on four emulated nodes on 2 cores a link probe
    round delayed one rank's CPU twice as much for 20 steps, and the contention detector named
    it. Steps of every rank go, so ranks stay comparable step by step."""
    need = {"host", "ts_ns", "duration_ns"}
    if steps.empty or probes.empty or not need <= set(probes.columns):
        return steps
    ran = probes[probes["duration_ns"] > 0]
    hit: set[int] = set()
    for host, g in ran.groupby("host", sort=False):
        mine = steps[steps["host"] == str(host)]
        if mine.empty:
            continue
        start, end = mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy()
        for hi, dur in zip(g["ts_ns"].to_numpy(), g["duration_ns"].to_numpy(), strict=True):
            overlap = (start <= hi) & (end >= hi - dur)
            hit.update(int(x) for x in mine["step"].to_numpy()[overlap])
    if not hit:
        return steps
    return steps[~steps["step"].isin(hit)].reset_index(drop=True)


def _ckpt(df: pd.DataFrame) -> pd.DataFrame:
    duration_ms = df["duration_ns"].astype(float) / _NS_PER_MS
    num_bytes = df["num_bytes"].astype("int64")
    seconds = duration_ms / 1e3
    throughput = (num_bytes.astype(float) / 1e6 / seconds).where((num_bytes > 0) & (seconds > 0))
    out = pd.DataFrame(
        {
            "rank": df["rank"].astype("int64"),
            "host": df["host"] if df["host"].dtype == "category" else df["host"].astype(str),
            "step": df["step"].astype("int64"),
            "op": df["op"].astype(str),
            "path": df["path"].astype(str),
            "num_bytes": num_bytes,
            "start_ns": df["start_ns"].astype("int64"),
            "duration_ms": duration_ms,
            "throughput_mb_s": throughput.astype(float),
        },
        columns=list(CKPT_COLUMNS),
    )
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _pick(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    return df.loc[:, list(columns)].reset_index(drop=True)


# -- helpers shared by the detectors -----------------------------------------------------------


def peer_median(wide: pd.DataFrame, classes: Mapping[int, int] | None = None) -> pd.DataFrame:
    """For each step and rank, the median of the *other* ranks' values at that step (the rank's
    peers); NaN with a single rank (and, as ``np.median``, NaN when a peer's value is NaN).
    With ``classes`` (rank -> work class) a rank's peers are the other ranks of its class
    (NaN for a rank alone in its class, or missing from ``classes``).

    Vectorized, linear per row: leaving out the value at sorted position ``p`` shifts the middle
    positions at or after ``p`` by one, so each rank's peer median is one or two of the row's
    order statistics around its middle (``np.partition``: no full sort; at 131,072 ranks the
    sort was a third of the node detector), picked by whether the rank sits at or before them
    (the same values, and the same arithmetic, as ``np.median`` of the row without that
    rank)."""
    # the array is the table's own: no copy of it (a step x rank table, ~50 MB at 131,072 ranks)
    return pd.DataFrame(
        peer_medians(wide, classes), index=wide.index, columns=wide.columns, copy=False
    )


def peer_medians(wide: pd.DataFrame, classes: Mapping[int, int] | None = None) -> np.ndarray:
    """:func:`peer_median` as an array of its own (a caller may work in it in place)."""
    if classes is not None:
        grouped = np.full(wide.shape, np.nan)
        members: dict[int, list[int]] = {}
        for j, col in enumerate(wide.columns):
            if int(col) in classes:
                members.setdefault(classes[int(col)], []).append(j)
        for cols in members.values():
            if len(cols) >= 2:
                grouped[:, cols] = peer_medians(wide.iloc[:, cols])
        return grouped
    values = wide.to_numpy(dtype=float)
    num_rows, n = values.shape
    if n < 2 or not num_rows:
        out = np.full_like(values, np.nan)
    else:
        # a block of rows at a time: each block's temporaries (its partition, masks, counts and
        # a second order statistic: ~4 tables' worth) are ~1 M cells, not the whole table's
        # (at 131,072 ranks x 50 steps they were ~200 MB on top of the result)
        out = np.empty_like(values)
        block = max(1, _PEER_BLOCK_CELLS // n)
        for start in range(0, num_rows, block):
            out[start : start + block] = _peer_rows(values[start : start + block])
    return out


#: Cells of the step x rank table :func:`peer_median` works on at a time.
_PEER_BLOCK_CELLS = 1 << 20


def _peer_rows(values: np.ndarray) -> np.ndarray:
    """:func:`peer_median` of the rows of ``values`` (at least two columns), a new array."""
    n = values.shape[1]
    m = n - 1  # peers per rank
    ks = [m // 2] if m % 2 else [m // 2 - 1, m // 2]
    picks = sorted({k for k in ks} | {k + 1 for k in ks})
    part = np.partition(values, picks, axis=1)  # NaNs last, as a sort puts them

    def peer_at(k: int) -> np.ndarray:  # k-th smallest peer value of every (row, rank)
        # A rank at sorted position p <= k leaves the k-th smallest of its peers at k + 1,
        # one after it at k. Positions follow a stable sort: values below s_k first, then
        # the values equal to s_k in column order.
        s_k, s_next = part[:, k : k + 1], part[:, k + 1 : k + 2]
        below = values < s_k
        equal = values == s_k
        # counts of at most n ranks: 32-bit (a 64-bit count per cell was a third of the
        # node detector's peak at 131,072 ranks)
        before = np.cumsum(equal, axis=1, dtype=np.int32)
        before += below.sum(axis=1, keepdims=True, dtype=np.int32) - 1
        at_or_before = below
        at_or_before |= equal & (before <= k)
        del before, equal
        return np.where(at_or_before, s_next, s_k)

    out = peer_at(ks[0])  # in place below: one table, not three
    if not m % 2:
        out += peer_at(ks[1])
        out /= 2.0
    isnan = np.isnan(values)
    num_nan = isnan.sum(axis=1)
    if num_nan.any():  # a NaN among a rank's peers makes its peer median NaN
        out[(num_nan[:, None] - isnan) > 0] = np.nan
    return out


def class_median(wide: pd.DataFrame, classes: Mapping[int, int] | None = None) -> pd.DataFrame:
    """For each step and rank, the median of its work class's values at that step, itself
    included (``classes``: rank -> class; None or a rank missing from it: every rank)."""
    if classes is None:
        med = np.median(wide.to_numpy(dtype=float), axis=1, keepdims=True)
        return pd.DataFrame(
            np.broadcast_to(med, wide.shape).copy(), index=wide.index, columns=wide.columns
        )
    values = wide.to_numpy(dtype=float)
    out = np.full(values.shape, np.nan)
    members: dict[int, list[int]] = {}
    for j, col in enumerate(wide.columns):
        members.setdefault(classes.get(int(col), -1), []).append(j)
    for cols in members.values():
        out[:, cols] = np.median(values[:, cols], axis=1, keepdims=True)
    return pd.DataFrame(out, index=wide.index, columns=wide.columns)


def persistent_columns(
    flags: np.ndarray,
    window: int,
    min_frac: float,
    run: int = 0,
    quick: np.ndarray | None = None,
) -> np.ndarray:
    """For a steps x columns bool table, which columns :func:`persistence` would find a
    persistent run in (``persistence(flags[:, j], ...) is not None``), all columns at once;
    ``quick``: :func:`quick_runs` of the same table (a quick run makes a column persistent)."""
    n = flags.shape[0]
    found = np.zeros(flags.shape[1], dtype=bool)
    sums = np.zeros((n + 1, flags.shape[1]), dtype=np.int32)  # counts of at most n steps
    np.cumsum(flags, axis=0, out=sums[1:])
    if 1 <= window <= n:
        counts = sums[window:] - sums[:-window]  # windows ending at position i + window - 1
        found |= (counts >= min_frac * window - 1e-9).any(axis=0)
    if 1 <= run <= n:
        found |= (sums[run:] - sums[:-run] >= run).any(axis=0)
    if quick is not None and len(quick):
        found |= (quick >= 0).any(axis=0)
    return np.asarray(found, dtype=bool)


#: Strength levels (multiples of the flag's own threshold) a quick run is tried at.
QUICK_LEVELS = (2.0, 3.0, 4.0, 6.0, 8.0)


def quick_runs(
    strength: np.ndarray,
    flags: np.ndarray,
    *,
    alpha: float,
    min_run: int,
    max_run: int,
    levels: tuple[float, ...] = QUICK_LEVELS,
) -> np.ndarray:
    """Where a step x column table holds a *quick run*: a few steps in a row, each far beyond
    the flag's threshold, that noise makes too rarely to wait for a whole window.

    ``strength`` (steps x columns): how far each step is beyond its flag's threshold (1: just
    flagged; NaN: unknown); ``flags``: the flags themselves (a quick step is flagged too).
    At a level ``S`` the chance that noise puts one step of column ``j`` at ``>= S`` is taken
    from the *other* columns' steps (add-one: a level no other step reached is ``1 / (N + 1)``;
    a slow column does not raise its own odds, other slow columns only make its runs longer);
    ``k`` steps in a row at ``>= S`` is then ``p ** k`` per position, and a run counts when
    that, over every position of the table and every level tried, is at most ``alpha``:
    ``k = max(min_run, ceil(log(alpha / (positions x levels)) / log(p)))``, levels needing more
    than ``max_run`` steps not tried (the plain run finds those as soon). Returns a steps x
    columns int32 table: at each position that ends a quick run, the run's first position (the
    earliest over the levels); -1 elsewhere. With fewer than two columns there are no others to
    judge by: no quick runs."""
    n, m = strength.shape
    out = np.full((n, m), -1, dtype=np.int32)  # positions of at most n steps
    if m < 2 or n < min_run:
        return out
    known = ~np.isnan(strength)
    positions = int(known.sum())
    budget = np.log(alpha / max(1, positions * len(levels)))
    others = positions - known.sum(axis=0)  # each column's count of the other columns' steps
    with np.errstate(invalid="ignore"):
        for level in levels:
            at = known & flags & (strength >= level)
            hits = at.sum(axis=0)
            p = (hits.sum() - hits + 1.0) / (others + 1.0)
            need = np.ceil(budget / np.log(np.minimum(p, 0.5)))  # p >= 0.5: never within max_run
            k = np.where(p < 0.5, np.maximum(min_run, need), max_run + 1).astype(np.int32)
            length = np.zeros(m, dtype=np.int32)
            for i in range(n):
                length = np.where(at[i], length + 1, 0)
                ends = (length >= k) & (k <= max_run)
                if ends.any():
                    start = i - k + 1
                    cur = out[i]
                    out[i] = np.where(ends & ((cur < 0) | (start < cur)), start, cur)
    return out


@dataclass(frozen=True, slots=True)
class Persistence:
    """Where a per-step flag holds persistently (in >= ``min_frac`` of a ``window``-step window).

    ``onset_pos``: position (0-based, in the analysed steps) of the first flagged step of the
    first persistent window; ``detected_pos``: position of that window's last step; ``end_pos``:
    the last flagged step of the last persistent window; ``consistency``: fraction of flagged
    steps from onset to end.
    """

    onset_pos: int
    detected_pos: int
    end_pos: int
    consistency: float


def persistence(
    flags: np.ndarray,
    window: int,
    min_frac: float,
    run: int = 0,
    quick: np.ndarray | None = None,
) -> Persistence | None:
    """The persistent run of ``flags`` (bool per analysed step), or ``None`` if there is none.

    Persistent: flagged in ``>= min_frac`` of a ``window``-step window, or (``run`` > 0) in
    ``run`` steps in a row, or (``quick``: this column of :func:`quick_runs`) in a quick run.
    The first two hold about as rarely on noise (6 in a row at a flag rate of 0.3 per step: 7e-4
    per position; 8 of 10: 1.6e-3), but a run says so sooner: a rank flagged on every step from
    its onset is found ``run`` steps in, not ``min_frac * window``; a quick run, a few steps far
    beyond the threshold, sooner still, but only when the column stays flagged like a window
    (``consistency >= min_frac``): a rank that stalls now and then also has a few bad steps in
    a row at times, and that is not a persistent slowdown."""
    found = _persistence(flags, window, min_frac, run, quick)
    if quick is not None and found is not None and found.consistency < min_frac:
        return _persistence(flags, window, min_frac, run, None)
    return found


def _persistence(
    flags: np.ndarray, window: int, min_frac: float, run: int, quick: np.ndarray | None
) -> Persistence | None:
    n = len(flags)
    f = flags.astype(float)
    ends: list[int] = []  # last positions of the passing windows
    if 1 <= window <= n:
        counts = np.convolve(f, np.ones(window), mode="valid")
        ends = [int(i) + window - 1 for i in np.flatnonzero(counts >= min_frac * window - 1e-9)]
    run_ends: list[int] = []  # last positions of the runs of ``run`` flagged steps
    if 1 <= run <= n:
        in_a_row = np.convolve(f, np.ones(run), mode="valid")
        run_ends = [int(i) + run - 1 for i in np.flatnonzero(in_a_row >= run - 1e-9)]
    quick_ends = [] if quick is None else [int(i) for i in np.flatnonzero(quick >= 0)]
    if not ends and not run_ends and not quick_ends:
        return None
    first_end = min([*ends[:1], *run_ends[:1], *quick_ends[:1]])
    if quick_ends and quick_ends[0] == first_end and quick is not None:
        onset = int(quick[first_end])  # every step of the quick run is flagged
    elif run_ends and run_ends[0] == first_end and (not ends or ends[0] > first_end):
        onset = first_end - run + 1  # every step of the run is flagged
    else:
        start = first_end - window + 1
        onset = start + int(np.argmax(flags[start : first_end + 1]))
    end = max([*ends[-1:], *run_ends[-1:], *quick_ends[-1:]])
    end = onset + int(np.flatnonzero(flags[onset : end + 1])[-1])  # last flagged step
    consistency = float(flags[onset : end + 1].mean())
    return Persistence(onset, first_end, end, consistency)


def change_point(
    x: np.ndarray, candidates: Iterable[int], start: int = 0, stop: int | None = None
) -> int | None:
    """The split ``t`` among ``candidates`` of ``x[start:stop]`` into the two most homogeneous
    segments, ``x[start:t]`` and ``x[t:stop]`` (least summed absolute deviation from each
    segment's median: a robust L1 change point, not moved by spikes and dips), with a higher
    median after than before; the earliest on a tie, ``None`` when no split has a higher median
    after. One fixed span for every candidate, so that costs compare like with like."""
    stop = len(x) if stop is None else stop
    medians = _split_medians(x, start, stop)
    best, best_cost = None, np.inf
    for t in candidates:
        before, after = x[start:t], x[t:stop]
        if len(before) == 0 or len(after) == 0:
            continue
        if medians is not None and start < t < stop:
            mb, ma = medians[0][t - start - 1], medians[1][t - start - 1]
        else:
            mb, ma = float(np.median(before)), float(np.median(after))
        if ma <= mb:
            continue
        cost = float(np.abs(before - mb).sum() + np.abs(after - ma).sum())
        if cost < best_cost:
            best, best_cost = t, cost
    return best


def mean_change_point(
    x: np.ndarray, candidates: Iterable[int], start: int = 0, stop: int | None = None
) -> int | None:
    """:func:`change_point` by least squares: the split ``t`` among ``candidates`` of
    ``x[start:stop]`` into two segments of least summed squared deviation from their means, with
    a higher mean after; the earliest on a tie, ``None`` when no split has a higher mean after.

    For a change made of spikes, which the robust split leaves out by design: a lossy link costs
    a job its time in a few stalls (a retransmission timeout: 100-200 ms on a 25 ms step), and
    the robust split dated one by the small drift of the other steps (step 14 for a loss whose
    first stall was step 32; :mod:`~diag.diagnose.detectors.link_loss`)."""
    stop = len(x) if stop is None else stop
    seg = np.asarray(x[start:stop], dtype=float)
    n = len(seg)
    if n < 2:
        return None
    c1 = np.concatenate([[0.0], np.cumsum(seg)])
    c2 = np.concatenate([[0.0], np.cumsum(seg * seg)])
    best, best_cost = None, np.inf
    for t in candidates:
        k = t - start
        if not 0 < k < n:
            continue
        m1, m2 = c1[k] / k, (c1[n] - c1[k]) / (n - k)
        if m2 <= m1:
            continue
        cost = (c2[k] - k * m1 * m1) + (c2[n] - c2[k] - (n - k) * m2 * m2)
        if cost < best_cost:
            best, best_cost = t, cost
    return best


#: the longest span whose split medians :func:`_split_medians` computes incrementally (sorted
#: insertion costs O(n^2) moves; beyond this ``np.median`` per candidate is cheaper)
_INCREMENTAL_MEDIANS_UP_TO = 4096


def _split_medians(x: np.ndarray, start: int, stop: int) -> tuple[list[float], list[float]] | None:
    """For every split ``t`` in ``(start, stop)``, in order: the medians of ``x[start:t]`` and of
    ``x[t:stop]``, the same values ``np.median`` gives (the middle element, or the mean of the two
    middle ones), by sorted insertion instead of a median per candidate (two ``np.median`` calls
    per candidate were most of the contention detector's time on a 500-step run). ``None`` for a
    span too long for it or holding NaN (``np.median`` decides those)."""
    n = stop - start
    if n < 2 or n > _INCREMENTAL_MEDIANS_UP_TO:
        return None
    seg = np.asarray(x[start:stop], dtype=float)
    if np.isnan(seg).any():
        return None
    values = seg.tolist()

    def running(vals: list[float]) -> list[float]:
        ordered: list[float] = []
        out = []
        for v in vals:
            bisect.insort(ordered, v)
            k = len(ordered)
            half = k // 2
            out.append(ordered[half] if k % 2 else (ordered[half - 1] + ordered[half]) / 2)
        return out

    before = running(values[:-1])  # before[i]: median of values[: i + 1], split t = start + i + 1
    after = running(values[:0:-1])[::-1]  # after[i]: median of values[i + 1 :]
    return before, after
