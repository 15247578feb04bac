"""The event schema: the one contract between the hook, the daemon, the analyzer and the CLI.

Every event is a frozen dataclass carrying the common envelope (:class:`Event`) and a typed payload.
The same field names appear in the dataclass, in the proto message (``diag/proto/diag.proto``) and
in the DataFrame columns built by :func:`diag.store.dataframes.events_to_frame`.

Units live in field names: ``*_ns`` nanoseconds, ``*_bytes`` bytes, ``*_mhz``, ``*_c``
(Celsius), ``*_w`` (watts), ``*_pct`` (0-100). Counters start with ``num_``. Timestamps that are
points in time (``ts_ns``, ``start_ns``, ``end_ns``, ``enqueue_ns``) are wall-clock nanoseconds
since the Unix epoch on the emitting host; the daemon measures each host's offset to the
analyzer's clock (:class:`ClockSync`) so the analysis can align hosts. Durations are measured
with a monotonic clock.

Optional fields are ``None`` when the source cannot give them (for example gloo records no
collective durations); the proto carries them as proto3 ``optional`` fields so ``None`` survives.
Float fields keep NaN and Inf as such (a NaN loss is a finding, not a parse error).

Versioning: adding a defaulted field bumps the minor version; a rename or removal bumps the major.
1.13 adds no field: a batch may carry its events by columns (``EventBatch.columns``), which a
daemon sends only to an analyzer that says it reads them (``TimeReply.schema_version``).
1.14: ``ProcSample.run_delay_ns`` (the whole process's run-queue delay, every thread).
1.15: ``HookHealth.num_gil_pauses`` and ``gil_paused_ns`` (the hook thread's pacing).
1.16: ``ProfileWindow.settle_ns`` and ``unsettled`` (the stop's wait for gloo's workers).
1.17: ``CollectiveSummary`` (a node daemon's summary of one rank's collectives of one group in one
step, shipped in place of the raw ``CollectiveEvent`` rows at fleet scale).
1.18: ``StepEvent.cpu_wait_data_ns`` (the part of a step's run-queue delay met while it waited for
data or wrote a checkpoint, outside its compute).
1.19: ``ProfileRequest.realign_steps`` (where a rank that got an on-demand window's request late
takes it, so that late ranks still share one step).
1.20: ``ProfileWindow.device_only`` (the window recorded the device's activity only, no CPU
operators: a periodic window on a CUDA rank by default).
1.21: ``ProcSample.cpu_throttled_ns`` and ``cpu_limit_cores`` (the CPU quota of the process's
cgroup: how long it held the process throttled, and how many cores it allows).
1.22: ``ProfileWindow.aggregated`` (the window's CPU operators were counted by diag's own
observer, per operator name, with no raw trace: a periodic window of a CPU rank by default).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

SCHEMA_VERSION = "1.22"
SCHEMA_MAJOR = 1

#: Frames kept per stack (:class:`StackDump`, :class:`ExceptionEvent`); the innermost are kept.
MAX_FRAMES = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """The envelope every event carries.

    ``source`` names the emitter (``"<host>/rank<r>/<pid>"`` for a hook,
    ``"<host>/daemon/<pid>.<start ms>"`` for a daemon, ``"<host>/launcher/<pid>"`` for
    ``diag run``) and ``seq`` counts its events from 0 without reuse, so ``(source, seq)``
    identifies an event exactly once; the analyzer drops repeats of it (replays after an outage).
    ``rank``/``local_rank`` are -1 for node-level events; ``step`` is -1 when not tied to a step.
    """

    kind: ClassVar[str] = "event"

    ts_ns: int
    host: str
    rank: int = -1
    local_rank: int = -1
    job_id: str = ""
    source: str
    seq: int
    step: int = -1


ENVELOPE_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Event))
#: The envelope's text fields that repeat a handful of values on every row (a source per
#: process, a host per node, one job): the analyzer interns them as it decodes a column block
#: and the store keeps them as ``category`` in memory.
LABEL_FIELDS: frozenset[str] = frozenset({"source", "host", "job_id"})


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEvent(Event):
    """One optimizer step on one rank.

    The step runs from the end of the previous optimizer step (or the first activity of the process)
    to the end of this one. Phases partition it: ``data_wait_ns + forward_ns + backward_ns +
    optimizer_ns + checkpoint_ns + other_ns == duration_ns`` (up to rounding). ``backward_ns``
    includes the wait for gradient collectives that finish inside ``backward()``.

    The split that names a slow rank: ``collective_wait_ns`` is time blocked on collectives (DDP's
    gradient all-reduce after local gradients were done, blocking ``torch.distributed`` calls);
    ``compute_ns = duration_ns - collective_wait_ns - data_wait_ns - checkpoint_ns``. In synchronous
    training every rank's ``duration_ns`` is about the same; the slow rank has the largest compute
    and the smallest wait.

    ``cpu_wait_ns`` is how long the training thread was ready to run but waited for a CPU (Linux
    run-queue delay, 0 where unknown) outside its gradient-sync wait (a thread woken when the
    all-reduce completes may wait for a CPU too; that time is already in ``collective_wait_ns``):
    on a CPU-contended host, time that is the host's doing, not the rank's device. Of it,
    ``cpu_wait_data_ns`` (schema 1.18) was met while the thread waited for its next batch or
    wrote a checkpoint (inside ``data_wait_ns`` or ``checkpoint_ns``); the rest is part of
    ``compute_ns``. Before 1.18 (0) all of it was taken to be: a competitor that held the
    thread up while it made its batch then made its compute less than nothing.

    On a GPU (schema 1.11) the same split as the device saw it, from CUDA events the hook
    recorded on the current stream and read back without synchronizing
    (:mod:`diag.hook.device_timer`): ``device_duration_ns`` (step start to step end),
    ``device_compute_ns`` (step start to local gradients done) and ``device_wait_ns`` (local
    gradients done to the optimizer's start). ``None`` on a CPU job, or where the device had not
    finished the step by the time the hook sent it.
    """

    kind: ClassVar[str] = "step"

    start_ns: int
    end_ns: int
    duration_ns: int
    data_wait_ns: int = 0
    forward_ns: int = 0
    backward_ns: int = 0
    optimizer_ns: int = 0
    checkpoint_ns: int = 0
    other_ns: int = 0
    compute_ns: int = 0
    collective_wait_ns: int = 0
    loss: float | None = None
    num_backward: int = 0
    num_collectives: int = 0
    cpu_wait_ns: int = 0
    device_duration_ns: int | None = None
    device_compute_ns: int | None = None
    device_wait_ns: int | None = None
    cpu_wait_data_ns: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveEvent(Event):
    """One collective or point-to-point operation on one rank.

    ``seq_id`` is the process group's collective sequence number (p2p ops use ``p2p_seq_id``), equal
    on every rank for the same operation, so ranks can be matched. ``enqueue_ns`` is when the rank
    issued it; a rank that enqueues late made the others wait. ``start_ns``/``end_ns`` are given
    when the backend records them (NCCL with timing), or for blocking Python-level calls the hook
    times itself (``origin == "python"``). ``origin`` is ``"fr"`` for Flight Recorder entries.
    """

    kind: ClassVar[str] = "collective"

    op: str
    pg_name: str = ""
    pg_desc: str = ""
    pg_size: int = 0
    seq_id: int = -1
    p2p_seq_id: int = -1
    is_p2p: bool = False
    num_bytes: int = 0
    dtype: str = ""
    enqueue_ns: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    duration_ns: int | None = None
    state: str = ""
    origin: str = "fr"


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSummary(Event):
    """One rank's collectives on one process group in one step, summarized by its node's daemon
    (schema 1.17; :mod:`diag.daemon.collsum`). At fleet scale the daemon ships this instead of one
    :class:`CollectiveEvent` per operation (a sharded job issues hundreds per rank and step), keeps
    the raw rows on the node for a bounded time and ships them again when the analyzer asks for a
    window of steps (``CollectiveFetch``). The envelope (host, rank, step, source) is the rank's
    hook's; ``seq`` is the daemon's own.

    Collectives (``num_collectives``, ``num_bytes``, the enqueue times and sequence numbers) and
    point-to-point operations (``num_p2p``, ``p2p_bytes``) are counted apart, as the analysis reads
    them apart. ``num_timed`` of the collectives carried a duration (NCCL with timing; none on
    gloo), summed in ``duration_sum_ns``, the longest ``duration_max_ns``. ``mean_enqueue_ns`` is
    the mean time the rank issued them: across the ranks of a group, its spread is the arrival
    skew of a rank that is late to every collective. ``num_not_completed`` were still in flight or
    failed when harvested (those also ship raw: they are a hang's evidence).
    """

    kind: ClassVar[str] = "collective_summary"

    pg_name: str = ""
    pg_desc: str = ""
    pg_size: int = 0
    num_collectives: int = 0
    num_bytes: int = 0
    num_p2p: int = 0
    p2p_bytes: int = 0
    num_timed: int = 0
    duration_sum_ns: int = 0
    duration_max_ns: int = 0
    first_enqueue_ns: int = 0
    last_enqueue_ns: int = 0
    mean_enqueue_ns: int = 0
    first_seq_id: int = -1
    last_seq_id: int = -1
    num_not_completed: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointEvent(Event):
    """A checkpoint save or load (``torch.save``/``torch.load``/``torch.distributed.checkpoint``).

    ``num_bytes`` is the file size after a save (0 when unknown, e.g. a stream or a DCP directory
    still being written); ``api`` names the function that was called.
    """

    kind: ClassVar[str] = "checkpoint"

    op: str  # "save" or "load"
    api: str
    path: str = ""
    num_bytes: int = 0
    start_ns: int
    duration_ns: int
    ok: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample(Event):
    """One telemetry sample of one GPU (from NVML through a :class:`GpuBackend`).

    ``throttle_reasons_mask`` is NVML's clocks-event-reasons bit mask; ``throttle_reasons`` the
    comma-separated names of the set bits that mean a slowdown (idle is not one). ECC counts are
    volatile (since driver load). PCIe throughput is KB/s as NVML reports it; NVLink counters are
    cumulative bytes summed over links. ``None`` where the device does not report the field.

    Health (schema 1.12, :class:`diag.gpu.backend.GpuReading` says what each means): PCIe link
    generation and width, current and maximum; retired pages (single-bit, double-bit, pending);
    remapped rows (correctable, uncorrectable, pending, failure: 0 or 1); NVLink CRC (flit, data),
    replay and recovery error counts summed over the active links, cumulative.
    """

    kind: ClassVar[str] = "gpu"

    gpu_index: int
    uuid: str = ""
    name: str = ""
    util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons_mask: int = 0
    throttle_reasons: str = ""
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    pcie_tx_kbps: int | None = None
    pcie_rx_kbps: int | None = None
    pcie_replay_count: int | None = None
    nvlink_tx_bytes: int | None = None
    nvlink_rx_bytes: int | None = None
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_pending: int | None = None
    row_remap_failure: int | None = None
    nvlink_crc_flit_errors: int | None = None
    nvlink_crc_data_errors: int | None = None
    nvlink_replay_errors: int | None = None
    nvlink_recovery_errors: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class XidEvent(Event):
    """An XID error reported by the driver for one GPU."""

    kind: ClassVar[str] = "xid"

    gpu_index: int
    xid: int
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSample(Event):
    """One sample of a node's CPU, memory, disk and network, from ``/proc``.

    Rates are averaged over the interval since the previous sample (``interval_ns``).
    ``cpu_busy_pct`` is 0-100 over all cores; ``load_1m`` is the kernel's load average.
    """

    kind: ClassVar[str] = "host"

    interval_ns: int = 0
    num_cpus: int = 0
    cpu_busy_pct: float = 0.0
    cpu_iowait_pct: float = 0.0
    load_1m: float = 0.0
    mem_total_bytes: int = 0
    mem_available_bytes: int = 0
    disk_read_bytes_per_s: float = 0.0
    disk_write_bytes_per_s: float = 0.0
    net_rx_bytes_per_s: float = 0.0
    net_tx_bytes_per_s: float = 0.0
    num_procs_running: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcSample(Event):
    """One sample of one rank's process (``/proc/<pid>``): CPU, memory and I/O.

    ``cpu_pct`` is 100 per fully used core; ``rank`` is the rank the process runs.
    """

    kind: ClassVar[str] = "proc"

    pid: int
    interval_ns: int = 0
    cpu_pct: float = 0.0
    rss_bytes: int = 0
    num_threads: int = 0
    read_bytes_per_s: float = 0.0
    write_bytes_per_s: float = 0.0
    num_ctx_switches_involuntary: int = 0
    #: the CPU the process last ran on (``/proc/<pid>/stat`` field 39; -1 unknown; schema 1.6)
    last_cpu: int = -1
    #: over the interval, how often the state of its main (training) thread was read (every
    #: ``DaemonConfig.state_interval_s``), and how often it was found stopped (``T`` or ``t``:
    #: a signal such as SIGSTOP, a job-control or scheduler suspend, a tracer such as a
    #: debugger or a blocking stack sampler) or in uninterruptible sleep (``D``: waiting on
    #: I/O or a page fault) (schema 1.7)
    num_state_samples: int = 0
    num_stopped: int = 0
    num_disk_wait: int = 0
    #: over the interval, the run-queue delay of all the process's threads summed (ns: time
    #: they were ready to run and waited for a CPU; ``/proc/<pid>/task/*/schedstat``); None
    #: where unreadable or on the first reading (schema 1.14)
    run_delay_ns: int | None = None
    #: over the interval, how long the CPU quota of the process's cgroup held it throttled (ns;
    #: the most throttled of its cgroup and their ancestors: a pod's limit sits above its
    #: container's; the kernel sums it over the CPUs the group ran on); None where there is no
    #: CPU controller to read, or on the first reading (schema 1.21)
    cpu_throttled_ns: int | None = None
    #: the tightest CPU quota on the process's cgroup path, in cores (quota / period; 0: none
    #: or unknown) (schema 1.21)
    cpu_limit_cores: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HookHealth(Event):
    """The hook's own health, sent when its thread starts, every ``health_interval_ns`` and at
    exit: what it dropped and why.

    ``num_dropped`` records and events were lost in the hook, all reasons together; by reason
    (schema 1.9; they sum to ``num_dropped``): ``num_queue_dropped`` records the training
    thread's bounded queue had no room for, ``num_fr_dropped`` Flight Recorder entries overwritten
    before a harvest read them, ``num_undelivered`` events the daemon did not take (the backlog
    overflowed while it was unreachable or slow, or they were unsent at exit),
    ``num_unencodable`` events with a value their proto field cannot hold (a bug in diag; text
    that is not valid Unicode is sent escaped, never dropped), ``num_oversize`` events larger
    than a frame on their own. ``num_errors`` counts exceptions caught inside the hook (the
    training loop never sees them); ``last_error`` is the most recent one, one line.
    ``health_interval_ns`` is how often the hook sends this (the daemon takes a hook that sent
    none for several intervals for dead or stuck: :class:`HookSilent`).

    The hook thread's pacing (schema 1.15, :mod:`diag.hook.gil_share`): ``num_gil_pauses``
    pauses it made between slices of its work so that the training thread got the GIL back,
    ``gil_paused_ns`` their total length, since the hook started. Pauses delay delivery within
    the slack the Flight Recorder's ring and the flush interval leave; they never drop data.
    """

    kind: ClassVar[str] = "hook_health"

    pid: int
    num_emitted: int = 0
    num_sent: int = 0
    num_dropped: int = 0
    num_errors: int = 0
    last_error: str = ""
    queue_depth: int = 0
    final: bool = False
    num_queue_dropped: int = 0
    num_fr_dropped: int = 0
    num_undelivered: int = 0
    num_unencodable: int = 0
    num_oversize: int = 0
    health_interval_ns: int = 0
    num_gil_pauses: int = 0
    gil_paused_ns: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectorError(Event):
    """A daemon collector failed a cycle (or is unavailable, e.g. no NVML): logged once, skipped."""

    kind: ClassVar[str] = "collector_error"

    collector: str
    message: str
    unavailable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockSync(Event):
    """The emitting host's clock offset to the analyzer: ``analyzer_time = host_time + offset_ns``.

    Measured NTP-style over one gRPC round trip; ``rtt_ns`` bounds the error (+- rtt/2).
    """

    kind: ClassVar[str] = "clock"

    offset_ns: int
    rtt_ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RankInfo(Event):
    """A rank's process announcing itself when its hook starts (and the launcher's view).

    Which GPU the rank drives (schema 1.10): ``device`` (``cuda:N``, N an index among the
    devices the process sees), ``cuda_visible_devices`` as the process was started with (how N
    maps to the node's devices) and ``device_uuid`` (the device's own UUID, as NVML reports it:
    the join of a rank with the daemon's GPU samples that holds whatever the visible devices).
    ``nccl_timing``: the job runs with ``TORCH_NCCL_ENABLE_TIMING`` on, so the Flight Recorder
    carries NCCL collective start and end times (off: arrivals only).
    """

    kind: ClassVar[str] = "rank_info"

    pid: int
    world_size: int = 0
    local_world_size: int = 0
    node_rank: int = -1
    run_id: str = ""
    argv: str = ""
    torch_version: str = ""
    backend: str = ""
    device: str = ""
    cuda_visible_devices: str = ""
    device_uuid: str = ""
    nccl_timing: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent(Event):
    """The launcher's record of the run (sent by ``diag run``): ``phase`` is "start" or "end".

    At start: the command and the expected shape; at end: the job's exit code and wall time.
    ``exit_code`` is -1 until the end event.
    """

    kind: ClassVar[str] = "run"

    phase: str
    run_id: str = ""
    command: str = ""
    nnodes: int = 0
    nproc_per_node: int = 0
    exit_code: int = -1
    duration_ns: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileWindow(Event):
    """One profiler window on one rank: ``num_steps`` steps from ``first_step`` (the envelope's
    ``step``), taken at the same step index on every rank.

    ``trigger`` is "periodic" (the hook's schedule) or "on_demand" (``request_id`` names the
    request pulled from the daemon). ``late`` is set when the request reached this rank after its
    step had passed, so the window was taken at a later step than on the other ranks.
    ``trace_path`` is the raw trace file (gzipped Chrome trace JSON), relative to the node's trace
    directory, ``RUN_DIR/traces`` under ``diag run`` (e.g. ``rank0/p20.json.gz``; "" if not kept).

    Schema 1.16: ``settle_ns`` is how long the stop waited for gloo's worker threads to end the
    records of the collectives the window saw (:mod:`diag.hook.c10d_workers`), ``unsettled`` how
    many were still busy when it stopped anyway (a record ended after the stop writes into memory
    torch has freed: 0 is the safe case).

    Schema 1.20: ``device_only`` is set when the window recorded the device's activity (kernels,
    copies, the collectives' kernels) and no CPU operators: a periodic window on a CUDA rank,
    unless ``HookConfig.profile_cpu_ops_on_cuda``. Its ``cpu_op`` times are unknown, not 0.

    Schema 1.22: ``aggregated`` is set when the window's CPU operators were counted by diag's own
    RecordFunction observer (:mod:`diag.hook.opstats`: calls and summed / median / longest
    durations per operator name, the same rows as from Kineto, at a tenth of its cost to the
    training thread) instead of torch's profiler: there is no raw trace (``trace_path`` "") and
    no input shapes. A periodic window of a rank that does not compute on CUDA, by default.
    """

    kind: ClassVar[str] = "profile_window"

    window_id: str
    trigger: str
    request_id: str = ""
    num_steps: int = 1
    start_ns: int
    end_ns: int
    duration_ns: int
    device: str = "cpu"
    num_ops: int = 0
    num_kernels: int = 0
    trace_path: str = ""
    trace_bytes: int = 0
    late: bool = False
    ok: bool = True
    error: str = ""
    settle_ns: int = 0
    unsettled: int = 0
    device_only: bool = False
    aggregated: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelSummary(Event):
    """One operator or kernel in one profiler window on one rank.

    ``category`` is "cpu_op" (a torch operator on the CPU), "kernel" (a GPU kernel), "gpu_memcpy",
    "gpu_memset" or "collective" (communication ops and kernels, e.g. ``gloo:all_reduce``,
    ``ncclDevKernel_*``). Durations are summed over the ``num_calls`` calls; ``step_share`` is
    ``total_ns`` over the window's duration (nested CPU operators overlap, so shares of CPU ops can
    sum past 1). ``input_shapes`` lists the shapes of the heaviest call, when recorded.
    """

    kind: ClassVar[str] = "kernel"

    window_id: str
    name: str
    category: str
    device: str = "cpu"
    num_calls: int
    total_ns: int
    median_ns: int
    max_ns: int
    step_share: float = 0.0
    input_shapes: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HangReport(Event):
    """A rank's hook saw no progress (no step end, no collective completed) for ``stall_ns``.

    Sent once per stall by the hook's watchdog (:mod:`diag.hook.watchdog`), from the hook
    thread, which keeps running while the training thread is blocked; re-armed by the next
    progress. ``stalled_since_ns`` is the wall-clock time of the last progress; ``threshold_ns``
    is max(``hang_factor`` x p99 of recent step times, ``hang_min_s``). ``last_step`` is the last
    step this rank completed (-1: none). The envelope's ``step`` is the step in progress.

    The Flight Recorder as the rank saw it at the report: ``pg_name``/``seq_id``/``op``/
    ``input_sizes`` name the oldest collective still in flight (``seq_id`` -1 and ``op`` "" when
    the rank is in none: it is not inside any collective), ``last_enqueued_seq`` and
    ``last_completed_seq`` that process group's counters (the default group when nothing is in
    flight). ``fr_tail_json`` is a JSON list of the newest entries (at most 32) of every group,
    oldest first: ``{"pg", "seq", "op", "sizes", "dtype", "done", "enqueue_ns"}``;
    ``pg_status_json`` a JSON object ``{pg: [last_enqueued, last_completed]}``. Both are "" without
    the Flight Recorder (``fr_ok`` false).
    """

    kind: ClassVar[str] = "hang"

    pid: int
    stalled_since_ns: int
    stall_ns: int
    threshold_ns: int
    last_step: int = -1
    pg_name: str = ""
    seq_id: int = -1
    op: str = ""
    input_sizes: str = ""
    dtype: str = ""
    enqueue_ns: int = 0
    last_enqueued_seq: int = -1
    last_completed_seq: int = -1
    fr_tail_json: str = ""
    pg_status_json: str = ""
    fr_ok: bool = True
    num_threads: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StackDump(Event):
    """One thread's stack in one rank process, taken on a hang, an exception or an exit.

    ``frames`` holds one frame per line, innermost first, each ``"<file>:<line> <function>"``
    (native frames from py-spy: ``"<library>:0 <symbol>"``); at most ``MAX_FRAMES`` lines, and
    ``num_frames`` counts them all. ``origin`` is "python" (``sys._current_frames()`` in the hook
    thread) or "py-spy" (the node daemon ran ``py-spy dump --native`` on the process). ``reason``
    is "hang" (a :class:`HangReport` asked for it). ``thread_id`` is the OS thread id where known
    (py-spy), else Python's thread identifier; ``is_main`` marks the process's main thread.
    """

    kind: ClassVar[str] = "stack"

    pid: int
    reason: str
    origin: str
    thread_id: int = 0
    thread_name: str = ""
    is_main: bool = False
    frames: str = ""
    num_frames: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ExceptionEvent(Event):
    """An exception nobody caught in a rank's thread, seen by the hook's ``sys.excepthook`` /
    ``threading.excepthook`` (which call the previous hook: the job's output is unchanged).

    ``exc_type`` is the qualified class name; ``message`` its first 1,000 characters;
    ``frames`` the traceback as :class:`StackDump` writes frames (innermost first, the raising
    line on top), at most ``MAX_FRAMES``.
    """

    kind: ClassVar[str] = "exception"

    pid: int
    thread_name: str = ""
    is_main: bool = True
    exc_type: str
    message: str = ""
    frames: str = ""
    num_frames: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RankExit(Event):
    """A rank's process is gone.

    ``observer`` is "daemon" (the process the rank announced disappeared from ``/proc``: no exit
    status, ``exit_code`` None) or "launcher" (``diag run`` read torchrun's failure report:
    ``exit_code`` as torchrun gives it, negative for a signal; ``signal`` the signal number, 0 for
    none). ``first_failure`` marks torchrun's "Root Cause (first observed failure)".
    ``ts_ns`` is when the observer noticed, not when the process died.
    """

    kind: ClassVar[str] = "rank_exit"

    pid: int = 0
    observer: str
    exit_code: int | None = None
    signal: int = 0
    first_failure: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class NumericsSample(Event):
    """Training numerics of one rank at one step (schema 1.4), sampled by the hook.

    Sent every ``numerics_every`` steps (:class:`~diag.config.HookConfig`) and whenever the AMP
    loss scale changed. ``loss`` is the step's loss as :class:`StepEvent` records it (``None``
    when the hook saw none). ``grad_norm`` is the global L2 norm of the gradients the primary
    optimizer was about to apply, ``sqrt(sum of squared per-tensor norms)`` over ``num_grads``
    gradient tensors (one ``torch._foreach_norm``); under DDP it is taken after the gradient
    all-reduce, so every replica reports the same value, and under AMP after
    ``GradScaler.unscale_``. ``num_nonfinite_grads`` counts the gradient tensors holding a NaN or
    an Inf. ``grad_norm`` is ``None`` and ``num_nonfinite_grads`` -1 where not sampled.
    ``loss_scale`` is the AMP ``GradScaler``'s scale after its latest ``update()`` (``None``: no
    GradScaler seen).
    """

    kind: ClassVar[str] = "numerics"

    loss: float | None = None
    grad_norm: float | None = None
    num_grads: int = 0
    num_nonfinite_grads: int = -1
    loss_scale: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NonFinite(Event):
    """The first NaN or Inf of an episode on one rank (schema 1.4); an episode ends at the next
    finite loss. The envelope's ``step`` is the step whose value was non-finite.

    ``where`` says what was found non-finite first: ``"input"`` (the batch the data loader
    returned, or the model's inputs), ``"module_output"`` (``module``'s output while its inputs
    were finite: the module produced it), ``"module_input"`` (``module`` was the first module to
    receive a non-finite value that no module produced: a functional op between modules),
    ``"loss"`` (the loss only: every module output was finite, or the modules could not be
    checked) or ``"grad"`` (a sampled gradient with a finite loss; ``tensor`` names the
    parameter). ``module`` is the module's qualified name inside the model (DDP's ``module.``
    prefix left out), ``tensor`` which of its tensors (``"output"``, ``"output[1]"``,
    ``"input[0]"``, ``"batch[0]"``, a parameter name); ``num_nonfinite`` of ``num_elements``
    elements were NaN or Inf (0 and 0 when not counted).

    ``method`` is how the module was found: ``"replay"`` (the step's forward run again at once,
    under ``no_grad``, with a finite check on every module's output; ``reproduced`` says whether
    the replay was non-finite again: False points at a transient fault), ``"window"`` (module
    checks armed on the next step, when the value was seen too late to replay: a loss on a
    device), ``"loss"`` (no module check), ``"grad_sample"`` or ``"batch"``. ``loss`` is the
    step's loss.
    """

    kind: ClassVar[str] = "nonfinite"

    where: str
    module: str = ""
    tensor: str = ""
    num_nonfinite: int = 0
    num_elements: int = 0
    method: str = ""
    reproduced: bool = False
    loss: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamFingerprint(Event):
    """An exact checksum of one rank's data-parallel replica of the parameters (schema 1.4),
    taken after the primary optimizer's ``step()`` every ``fingerprint_every`` steps.

    DDP replicas must match bitwise, so at one step every rank of ``dp_group`` (the DDP process
    group's name; ``dp_size`` ranks) must report the same ``checksum``. The checksum covers the
    parameters of every DDP-wrapped module, in registration order: each tensor's bits read as
    integers of its element size (int32 for float32, int16 for bfloat16/float16) summed in int64
    (wrapping), so any single flipped bit changes it; the per-tensor sums ``s_i`` are combined
    as ``sum((2i + 1) x s_i) mod 2**63``. ``num_params_sampled`` of ``num_params_total`` elements
    were read: all of them up to ``fingerprint_max_elements``, beyond that a fixed strided
    sample per tensor (the same elements on every rank, chosen from the shapes alone).
    """

    kind: ClassVar[str] = "fingerprint"

    checksum: int
    dp_group: str = ""
    dp_size: int = 0
    num_tensors: int = 0
    num_params_sampled: int = 0
    num_params_total: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchStats(Event):
    """Statistics of one batch at the data-loader boundary on one rank (schema 1.4).

    ``reason`` is ``"sampled"`` (the first batch of every ``numerics_every``-th step) or
    ``"nonfinite"`` (the step's last batch, checked because its loss was non-finite). Over the
    floating-point tensors of the batch (``num_tensors``; nested tuples, lists and dicts
    walked): ``num_elements`` checked, ``num_nonfinite`` of them NaN or Inf; ``min_value``,
    ``max_value`` and ``mean_abs`` over the finite ones (``None`` when there are none).
    ``sampled`` is set when a tensor was larger than ``batch_stats_max_elements`` and a fixed
    strided sample of it was checked instead (never for ``"nonfinite"``).
    """

    kind: ClassVar[str] = "batch_stats"

    reason: str = "sampled"
    num_tensors: int = 0
    num_elements: int = 0
    num_nonfinite: int = 0
    min_value: float | None = None
    max_value: float | None = None
    mean_abs: float | None = None
    sampled: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResultEvent(Event):
    """One result of a probe a node daemon ran on request (schema 1.5; ``diag replay
    --via-analyzer``): ``request_id`` of the analyzer's ``ProbeRequest``, the registry ``probe``,
    the ``device`` measured, ``status`` (ok, unsupported, timeout, failed, or ``rejected``: the
    daemon refused the request, ``detail`` says why), ``metric``/``value``/``unit`` as in
    :class:`probes.base.ProbeResult` (``value`` higher-is-better unless ``lower_is_better``),
    ``params_json`` the validated parameters it ran with and ``duration_ns`` the daemon's wall
    time from taking the request to the result (subprocess start included). The envelope's
    ``rank`` is the rank the request named (-1: none).
    """

    kind: ClassVar[str] = "probe_result"

    request_id: str = ""
    probe: str = ""
    device: str = ""
    status: str = ""
    metric: str = ""
    value: float | None = None
    unit: str = ""
    detail: str = ""
    params_json: str = ""
    lower_is_better: bool = False
    duration_ns: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessGroupInfo(Event):
    """One process group as a rank's hook sees it (schema 1.6): sent once per group and rank,
    when the hook first sees the group. The parallel layout comes from these: which ranks share
    a data-parallel, pipeline or tensor-parallel group.

    ``pg_name`` is the Flight Recorder's name of the group ("0" for the default group),
    ``pg_desc`` torch's description of it (``group_desc``, e.g. "default_pg", or what the job
    passed), ``ranks_json`` the JSON list of its global ranks in group-rank order, ``size`` their
    number, ``backend`` the group's backend.
    """

    kind: ClassVar[str] = "process_group"

    pg_name: str = ""
    pg_desc: str = ""
    ranks_json: str = ""
    size: int = 0
    backend: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostProcess(Event):
    """A process on a node that is not one of the job's ranks, competing for its CPUs (schema
    1.6): each host sample, the daemon reports the busiest such processes (``cpu_pct`` 100 per
    fully used core over ``interval_ns``), with ``cmd`` (its command line, truncated) and
    ``last_cpu`` (the CPU it last ran on, -1 unknown). ``rank`` is -1: it belongs to the host.
    """

    kind: ClassVar[str] = "host_process"

    pid: int
    interval_ns: int = 0
    cpu_pct: float = 0.0
    cmd: str = ""
    last_cpu: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TcpPeerSample(Event):
    """One rank's TCP connections to one remote address over one daemon interval (schema 1.8):
    the kernel's per-connection statistics (``inet_diag``, what ``ss -ti`` prints) of the
    sockets the rank's process holds, summed or taken over its ``num_conns`` connections to
    ``remote_ip`` (from ``local_ip``). Counters are deltas over ``interval_ns``: bytes sent, acked
    and retransmitted, segments retransmitted. ``rtt_us`` is the largest smoothed RTT of a
    connection that carried data in the interval (a queue on the path shows there first),
    ``min_rtt_us`` the smallest minimum RTT (the path's floor); ``send_queue_bytes`` the bytes
    waiting to go (unacked in flight plus not yet sent, summed) at the sample; ``busy_us`` the
    time the connections had data to send (``tcpi_busy_time`` delta, summed), of which
    ``rwnd_limited_us`` the receiver's window and ``sndbuf_limited_us`` the sender's own buffer
    held it back: the rest is time the network set the pace, so ``bytes_acked`` over it is the
    path's rate. ``rank`` is the
    rank; ``remote_host`` is filled by the analysis (the host whose daemon reported that address
    as its own), empty on the wire."""

    kind: ClassVar[str] = "tcp_peer"

    local_ip: str
    remote_ip: str
    remote_host: str = ""
    interval_ns: int = 0
    num_conns: int = 0
    bytes_sent: int = 0
    bytes_acked: int = 0
    bytes_retrans: int = 0
    num_retrans: int = 0
    rtt_us: float = 0.0
    min_rtt_us: float = 0.0
    send_queue_bytes: int = 0
    busy_us: int = 0
    rwnd_limited_us: int = 0
    sndbuf_limited_us: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NicSample(Event):
    """One network port of a node over one daemon interval (schema 1.8): an Ethernet interface
    (``/sys/class/net/<dev>/statistics``) or an InfiniBand port
    (``/sys/class/infiniband/<dev>/ports/<port>/counters``; ``link_layer`` "infiniband").
    Rates and counts are over ``interval_ns``: bytes received and sent per second, packets
    dropped, errors (receive and transmit; for InfiniBand also symbol errors and link downs),
    and for InfiniBand ``num_xmit_wait``: the ``port_xmit_wait`` ticks in the interval (the port
    had data to send and no credit to send it: a congested or slow peer; -1 when unknown)."""

    kind: ClassVar[str] = "nic"

    device: str
    port: int = 0
    link_layer: str = "ethernet"
    interval_ns: int = 0
    rx_bytes_per_s: float = 0.0
    tx_bytes_per_s: float = 0.0
    num_drops: int = 0
    num_errors: int = 0
    num_xmit_wait: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class HookSilent(Event):
    """A rank's hook stopped reporting while its process runs (schema 1.9): its connection to the
    node daemon stayed open, but no :class:`HookHealth` came for ``silent_ns`` (several of its
    ``health_interval_ns``) while the process was neither gone nor stopped. Its thread died or
    is stuck, so the rank's events after its last health are missing (until it reports again).

    Sent by the node daemon (the envelope's ``source`` is the daemon's, ``rank``/``local_rank``
    the hook's), once per silence. ``hook_source`` is the silent hook's ``source``,
    ``last_health_seq`` the ``seq`` of its last health, ``last_error`` that health's
    ``last_error`` (a hook thread that ended on an exception says so there).
    """

    kind: ClassVar[str] = "hook_silent"

    pid: int
    hook_source: str
    silent_ns: int
    health_interval_ns: int = 0
    last_health_seq: int = -1
    last_error: str = ""


#: Every event kind, by its ``kind`` name. Order is stable (it is the proto oneof order).
EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        StepEvent,
        CollectiveEvent,
        CheckpointEvent,
        GpuSample,
        XidEvent,
        HostSample,
        ProcSample,
        HookHealth,
        CollectorError,
        ClockSync,
        RankInfo,
        RunEvent,
        ProfileWindow,
        KernelSummary,
        HangReport,
        StackDump,
        ExceptionEvent,
        RankExit,
        NumericsSample,
        NonFinite,
        ParamFingerprint,
        BatchStats,
        ProbeResultEvent,
        ProcessGroupInfo,
        HostProcess,
        TcpPeerSample,
        NicSample,
        HookSilent,
        CollectiveSummary,
    )
}


def payload_fields(cls: type[Event]) -> tuple[str, ...]:
    """The fields of an event kind beyond the envelope, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in ENVELOPE_FIELDS)
