from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Envelope(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ts_ns: int
    host: str
    rank: int
    local_rank: int
    job_id: str
    source: str
    seq: int
    step: int
    def __init__(self, ts_ns: _Optional[int] = ..., host: _Optional[str] = ..., rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., job_id: _Optional[str] = ..., source: _Optional[str] = ..., seq: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class StepEvent(_message.Message):
    __slots__ = ("start_ns", "end_ns", "duration_ns", "data_wait_ns", "forward_ns", "backward_ns", "optimizer_ns", "checkpoint_ns", "other_ns", "compute_ns", "collective_wait_ns", "loss", "num_backward", "num_collectives", "cpu_wait_ns", "device_duration_ns", "device_compute_ns", "device_wait_ns")
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    DATA_WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_NS_FIELD_NUMBER: _ClassVar[int]
    BACKWARD_NS_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    OTHER_NS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_NS_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    NUM_BACKWARD_FIELD_NUMBER: _ClassVar[int]
    NUM_COLLECTIVES_FIELD_NUMBER: _ClassVar[int]
    CPU_WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_COMPUTE_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    start_ns: int
    end_ns: int
    duration_ns: int
    data_wait_ns: int
    forward_ns: int
    backward_ns: int
    optimizer_ns: int
    checkpoint_ns: int
    other_ns: int
    compute_ns: int
    collective_wait_ns: int
    loss: float
    num_backward: int
    num_collectives: int
    cpu_wait_ns: int
    device_duration_ns: int
    device_compute_ns: int
    device_wait_ns: int
    def __init__(self, start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., duration_ns: _Optional[int] = ..., data_wait_ns: _Optional[int] = ..., forward_ns: _Optional[int] = ..., backward_ns: _Optional[int] = ..., optimizer_ns: _Optional[int] = ..., checkpoint_ns: _Optional[int] = ..., other_ns: _Optional[int] = ..., compute_ns: _Optional[int] = ..., collective_wait_ns: _Optional[int] = ..., loss: _Optional[float] = ..., num_backward: _Optional[int] = ..., num_collectives: _Optional[int] = ..., cpu_wait_ns: _Optional[int] = ..., device_duration_ns: _Optional[int] = ..., device_compute_ns: _Optional[int] = ..., device_wait_ns: _Optional[int] = ...) -> None: ...

class CollectiveEvent(_message.Message):
    __slots__ = ("op", "pg_name", "pg_desc", "pg_size", "seq_id", "p2p_seq_id", "is_p2p", "num_bytes", "dtype", "enqueue_ns", "start_ns", "end_ns", "duration_ns", "state", "origin")
    OP_FIELD_NUMBER: _ClassVar[int]
    PG_NAME_FIELD_NUMBER: _ClassVar[int]
    PG_DESC_FIELD_NUMBER: _ClassVar[int]
    PG_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    P2P_SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    IS_P2P_FIELD_NUMBER: _ClassVar[int]
    NUM_BYTES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_NS_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    op: str
    pg_name: str
    pg_desc: str
    pg_size: int
    seq_id: int
    p2p_seq_id: int
    is_p2p: bool
    num_bytes: int
    dtype: str
    enqueue_ns: int
    start_ns: int
    end_ns: int
    duration_ns: int
    state: str
    origin: str
    def __init__(self, op: _Optional[str] = ..., pg_name: _Optional[str] = ..., pg_desc: _Optional[str] = ..., pg_size: _Optional[int] = ..., seq_id: _Optional[int] = ..., p2p_seq_id: _Optional[int] = ..., is_p2p: _Optional[bool] = ..., num_bytes: _Optional[int] = ..., dtype: _Optional[str] = ..., enqueue_ns: _Optional[int] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., duration_ns: _Optional[int] = ..., state: _Optional[str] = ..., origin: _Optional[str] = ...) -> None: ...

class CheckpointEvent(_message.Message):
    __slots__ = ("op", "api", "path", "num_bytes", "start_ns", "duration_ns", "ok")
    OP_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    NUM_BYTES_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    op: str
    api: str
    path: str
    num_bytes: int
    start_ns: int
    duration_ns: int
    ok: bool
    def __init__(self, op: _Optional[str] = ..., api: _Optional[str] = ..., path: _Optional[str] = ..., num_bytes: _Optional[int] = ..., start_ns: _Optional[int] = ..., duration_ns: _Optional[int] = ..., ok: _Optional[bool] = ...) -> None: ...

class GpuSample(_message.Message):
    __slots__ = ("gpu_index", "uuid", "name", "util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz", "temp_c", "power_w", "power_limit_w", "throttle_reasons_mask", "throttle_reasons", "ecc_sbe_volatile", "ecc_dbe_volatile", "pcie_tx_kbps", "pcie_rx_kbps", "pcie_replay_count", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_link_gen", "pcie_link_gen_max", "pcie_link_width", "pcie_link_width_max", "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending", "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending", "row_remap_failure", "nvlink_crc_flit_errors", "nvlink_crc_data_errors", "nvlink_replay_errors", "nvlink_recovery_errors")
    GPU_INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UTIL_PCT_FIELD_NUMBER: _ClassVar[int]
    MEM_UTIL_PCT_FIELD_NUMBER: _ClassVar[int]
    MEM_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEM_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    MEM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MAX_MHZ_FIELD_NUMBER: _ClassVar[int]
    TEMP_C_FIELD_NUMBER: _ClassVar[int]
    POWER_W_FIELD_NUMBER: _ClassVar[int]
    POWER_LIMIT_W_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_REASONS_MASK_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_REASONS_FIELD_NUMBER: _ClassVar[int]
    ECC_SBE_VOLATILE_FIELD_NUMBER: _ClassVar[int]
    ECC_DBE_VOLATILE_FIELD_NUMBER: _ClassVar[int]
    PCIE_TX_KBPS_FIELD_NUMBER: _ClassVar[int]
    PCIE_RX_KBPS_FIELD_NUMBER: _ClassVar[int]
    PCIE_REPLAY_COUNT_FIELD_NUMBER: _ClassVar[int]
    NVLINK_TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NVLINK_RX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_GEN_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_GEN_MAX_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_WIDTH_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_WIDTH_MAX_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_SBE_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_DBE_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_PENDING_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_CORRECTABLE_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_UNCORRECTABLE_FIELD_NUMBER: _ClassVar[int]
    ROW_REMAP_PENDING_FIELD_NUMBER: _ClassVar[int]
    ROW_REMAP_FAILURE_FIELD_NUMBER: _ClassVar[int]
    NVLINK_CRC_FLIT_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_CRC_DATA_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_REPLAY_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_RECOVERY_ERRORS_FIELD_NUMBER: _ClassVar[int]
    gpu_index: int
    uuid: str
    name: str
    util_pct: float
    mem_util_pct: float
    mem_used_bytes: int
    mem_total_bytes: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    sm_clock_max_mhz: int
    temp_c: float
    power_w: float
    power_limit_w: float
    throttle_reasons_mask: int
    throttle_reasons: str
    ecc_sbe_volatile: int
    ecc_dbe_volatile: int
    pcie_tx_kbps: int
    pcie_rx_kbps: int
    pcie_replay_count: int
    nvlink_tx_bytes: int
    nvlink_rx_bytes: int
    pcie_link_gen: int
    pcie_link_gen_max: int
    pcie_link_width: int
    pcie_link_width_max: int
    retired_pages_sbe: int
    retired_pages_dbe: int
    retired_pages_pending: int
    remapped_rows_correctable: int
    remapped_rows_uncorrectable: int
    row_remap_pending: int
    row_remap_failure: int
    nvlink_crc_flit_errors: int
    nvlink_crc_data_errors: int
    nvlink_replay_errors: int
    nvlink_recovery_errors: int
    def __init__(self, gpu_index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., util_pct: _Optional[float] = ..., mem_util_pct: _Optional[float] = ..., mem_used_bytes: _Optional[int] = ..., mem_total_bytes: _Optional[int] = ..., sm_clock_mhz: _Optional[int] = ..., mem_clock_mhz: _Optional[int] = ..., sm_clock_max_mhz: _Optional[int] = ..., temp_c: _Optional[float] = ..., power_w: _Optional[float] = ..., power_limit_w: _Optional[float] = ..., throttle_reasons_mask: _Optional[int] = ..., throttle_reasons: _Optional[str] = ..., ecc_sbe_volatile: _Optional[int] = ..., ecc_dbe_volatile: _Optional[int] = ..., pcie_tx_kbps: _Optional[int] = ..., pcie_rx_kbps: _Optional[int] = ..., pcie_replay_count: _Optional[int] = ..., nvlink_tx_bytes: _Optional[int] = ..., nvlink_rx_bytes: _Optional[int] = ..., pcie_link_gen: _Optional[int] = ..., pcie_link_gen_max: _Optional[int] = ..., pcie_link_width: _Optional[int] = ..., pcie_link_width_max: _Optional[int] = ..., retired_pages_sbe: _Optional[int] = ..., retired_pages_dbe: _Optional[int] = ..., retired_pages_pending: _Optional[int] = ..., remapped_rows_correctable: _Optional[int] = ..., remapped_rows_uncorrectable: _Optional[int] = ..., row_remap_pending: _Optional[int] = ..., row_remap_failure: _Optional[int] = ..., nvlink_crc_flit_errors: _Optional[int] = ..., nvlink_crc_data_errors: _Optional[int] = ..., nvlink_replay_errors: _Optional[int] = ..., nvlink_recovery_errors: _Optional[int] = ...) -> None: ...

class XidEvent(_message.Message):
    __slots__ = ("gpu_index", "xid", "message")
    GPU_INDEX_FIELD_NUMBER: _ClassVar[int]
    XID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    gpu_index: int
    xid: int
    message: str
    def __init__(self, gpu_index: _Optional[int] = ..., xid: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class HostSample(_message.Message):
    __slots__ = ("interval_ns", "num_cpus", "cpu_busy_pct", "cpu_iowait_pct", "load_1m", "mem_total_bytes", "mem_available_bytes", "disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_rx_bytes_per_s", "net_tx_bytes_per_s", "num_procs_running")
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    NUM_CPUS_FIELD_NUMBER: _ClassVar[int]
    CPU_BUSY_PCT_FIELD_NUMBER: _ClassVar[int]
    CPU_IOWAIT_PCT_FIELD_NUMBER: _ClassVar[int]
    LOAD_1M_FIELD_NUMBER: _ClassVar[int]
    MEM_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEM_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_READ_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    DISK_WRITE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NUM_PROCS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    interval_ns: int
    num_cpus: int
    cpu_busy_pct: float
    cpu_iowait_pct: float
    load_1m: float
    mem_total_bytes: int
    mem_available_bytes: int
    disk_read_bytes_per_s: float
    disk_write_bytes_per_s: float
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float
    num_procs_running: int
    def __init__(self, interval_ns: _Optional[int] = ..., num_cpus: _Optional[int] = ..., cpu_busy_pct: _Optional[float] = ..., cpu_iowait_pct: _Optional[float] = ..., load_1m: _Optional[float] = ..., mem_total_bytes: _Optional[int] = ..., mem_available_bytes: _Optional[int] = ..., disk_read_bytes_per_s: _Optional[float] = ..., disk_write_bytes_per_s: _Optional[float] = ..., net_rx_bytes_per_s: _Optional[float] = ..., net_tx_bytes_per_s: _Optional[float] = ..., num_procs_running: _Optional[int] = ...) -> None: ...

class ProcSample(_message.Message):
    __slots__ = ("pid", "interval_ns", "cpu_pct", "rss_bytes", "num_threads", "read_bytes_per_s", "write_bytes_per_s", "num_ctx_switches_involuntary", "last_cpu", "num_state_samples", "num_stopped", "num_disk_wait")
    PID_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_PCT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_THREADS_FIELD_NUMBER: _ClassVar[int]
    READ_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    WRITE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NUM_CTX_SWITCHES_INVOLUNTARY_FIELD_NUMBER: _ClassVar[int]
    LAST_CPU_FIELD_NUMBER: _ClassVar[int]
    NUM_STATE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    NUM_STOPPED_FIELD_NUMBER: _ClassVar[int]
    NUM_DISK_WAIT_FIELD_NUMBER: _ClassVar[int]
    pid: int
    interval_ns: int
    cpu_pct: float
    rss_bytes: int
    num_threads: int
    read_bytes_per_s: float
    write_bytes_per_s: float
    num_ctx_switches_involuntary: int
    last_cpu: int
    num_state_samples: int
    num_stopped: int
    num_disk_wait: int
    def __init__(self, pid: _Optional[int] = ..., interval_ns: _Optional[int] = ..., cpu_pct: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., num_threads: _Optional[int] = ..., read_bytes_per_s: _Optional[float] = ..., write_bytes_per_s: _Optional[float] = ..., num_ctx_switches_involuntary: _Optional[int] = ..., last_cpu: _Optional[int] = ..., num_state_samples: _Optional[int] = ..., num_stopped: _Optional[int] = ..., num_disk_wait: _Optional[int] = ...) -> None: ...

class HookHealth(_message.Message):
    __slots__ = ("pid", "num_emitted", "num_sent", "num_dropped", "num_errors", "last_error", "queue_depth", "final", "num_queue_dropped", "num_fr_dropped", "num_undelivered", "num_unencodable", "num_oversize", "health_interval_ns")
    PID_FIELD_NUMBER: _ClassVar[int]
    NUM_EMITTED_FIELD_NUMBER: _ClassVar[int]
    NUM_SENT_FIELD_NUMBER: _ClassVar[int]
    NUM_DROPPED_FIELD_NUMBER: _ClassVar[int]
    NUM_ERRORS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    NUM_QUEUE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    NUM_FR_DROPPED_FIELD_NUMBER: _ClassVar[int]
    NUM_UNDELIVERED_FIELD_NUMBER: _ClassVar[int]
    NUM_UNENCODABLE_FIELD_NUMBER: _ClassVar[int]
    NUM_OVERSIZE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    num_emitted: int
    num_sent: int
    num_dropped: int
    num_errors: int
    last_error: str
    queue_depth: int
    final: bool
    num_queue_dropped: int
    num_fr_dropped: int
    num_undelivered: int
    num_unencodable: int
    num_oversize: int
    health_interval_ns: int
    def __init__(self, pid: _Optional[int] = ..., num_emitted: _Optional[int] = ..., num_sent: _Optional[int] = ..., num_dropped: _Optional[int] = ..., num_errors: _Optional[int] = ..., last_error: _Optional[str] = ..., queue_depth: _Optional[int] = ..., final: _Optional[bool] = ..., num_queue_dropped: _Optional[int] = ..., num_fr_dropped: _Optional[int] = ..., num_undelivered: _Optional[int] = ..., num_unencodable: _Optional[int] = ..., num_oversize: _Optional[int] = ..., health_interval_ns: _Optional[int] = ...) -> None: ...

class CollectorError(_message.Message):
    __slots__ = ("collector", "message", "unavailable")
    COLLECTOR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    collector: str
    message: str
    unavailable: bool
    def __init__(self, collector: _Optional[str] = ..., message: _Optional[str] = ..., unavailable: _Optional[bool] = ...) -> None: ...

class ClockSync(_message.Message):
    __slots__ = ("offset_ns", "rtt_ns")
    OFFSET_NS_FIELD_NUMBER: _ClassVar[int]
    RTT_NS_FIELD_NUMBER: _ClassVar[int]
    offset_ns: int
    rtt_ns: int
    def __init__(self, offset_ns: _Optional[int] = ..., rtt_ns: _Optional[int] = ...) -> None: ...

class RankInfo(_message.Message):
    __slots__ = ("pid", "world_size", "local_world_size", "node_rank", "run_id", "argv", "torch_version", "backend", "device", "cuda_visible_devices", "device_uuid", "nccl_timing")
    PID_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    CUDA_VISIBLE_DEVICES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_UUID_FIELD_NUMBER: _ClassVar[int]
    NCCL_TIMING_FIELD_NUMBER: _ClassVar[int]
    pid: int
    world_size: int
    local_world_size: int
    node_rank: int
    run_id: str
    argv: str
    torch_version: str
    backend: str
    device: str
    cuda_visible_devices: str
    device_uuid: str
    nccl_timing: bool
    def __init__(self, pid: _Optional[int] = ..., world_size: _Optional[int] = ..., local_world_size: _Optional[int] = ..., node_rank: _Optional[int] = ..., run_id: _Optional[str] = ..., argv: _Optional[str] = ..., torch_version: _Optional[str] = ..., backend: _Optional[str] = ..., device: _Optional[str] = ..., cuda_visible_devices: _Optional[str] = ..., device_uuid: _Optional[str] = ..., nccl_timing: _Optional[bool] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("phase", "run_id", "command", "nnodes", "nproc_per_node", "exit_code", "duration_ns")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    NPROC_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    phase: str
    run_id: str
    command: str
    nnodes: int
    nproc_per_node: int
    exit_code: int
    duration_ns: int
    def __init__(self, phase: _Optional[str] = ..., run_id: _Optional[str] = ..., command: _Optional[str] = ..., nnodes: _Optional[int] = ..., nproc_per_node: _Optional[int] = ..., exit_code: _Optional[int] = ..., duration_ns: _Optional[int] = ...) -> None: ...

class ProfileWindow(_message.Message):
    __slots__ = ("window_id", "trigger", "request_id", "num_steps", "start_ns", "end_ns", "duration_ns", "device", "num_ops", "num_kernels", "trace_path", "trace_bytes", "late", "ok", "error")
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    NUM_OPS_FIELD_NUMBER: _ClassVar[int]
    NUM_KERNELS_FIELD_NUMBER: _ClassVar[int]
    TRACE_PATH_FIELD_NUMBER: _ClassVar[int]
    TRACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LATE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    window_id: str
    trigger: str
    request_id: str
    num_steps: int
    start_ns: int
    end_ns: int
    duration_ns: int
    device: str
    num_ops: int
    num_kernels: int
    trace_path: str
    trace_bytes: int
    late: bool
    ok: bool
    error: str
    def __init__(self, window_id: _Optional[str] = ..., trigger: _Optional[str] = ..., request_id: _Optional[str] = ..., num_steps: _Optional[int] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., duration_ns: _Optional[int] = ..., device: _Optional[str] = ..., num_ops: _Optional[int] = ..., num_kernels: _Optional[int] = ..., trace_path: _Optional[str] = ..., trace_bytes: _Optional[int] = ..., late: _Optional[bool] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class KernelSummary(_message.Message):
    __slots__ = ("window_id", "name", "category", "device", "num_calls", "total_ns", "median_ns", "max_ns", "step_share", "input_shapes")
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    NUM_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_NS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_NS_FIELD_NUMBER: _ClassVar[int]
    STEP_SHARE_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPES_FIELD_NUMBER: _ClassVar[int]
    window_id: str
    name: str
    category: str
    device: str
    num_calls: int
    total_ns: int
    median_ns: int
    max_ns: int
    step_share: float
    input_shapes: str
    def __init__(self, window_id: _Optional[str] = ..., name: _Optional[str] = ..., category: _Optional[str] = ..., device: _Optional[str] = ..., num_calls: _Optional[int] = ..., total_ns: _Optional[int] = ..., median_ns: _Optional[int] = ..., max_ns: _Optional[int] = ..., step_share: _Optional[float] = ..., input_shapes: _Optional[str] = ...) -> None: ...

class HangReport(_message.Message):
    __slots__ = ("pid", "stalled_since_ns", "stall_ns", "threshold_ns", "last_step", "pg_name", "seq_id", "op", "input_sizes", "dtype", "enqueue_ns", "last_enqueued_seq", "last_completed_seq", "fr_tail_json", "pg_status_json", "fr_ok", "num_threads")
    PID_FIELD_NUMBER: _ClassVar[int]
    STALLED_SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    STALL_NS_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    PG_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    INPUT_SIZES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_ENQUEUED_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_SEQ_FIELD_NUMBER: _ClassVar[int]
    FR_TAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    PG_STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    FR_OK_FIELD_NUMBER: _ClassVar[int]
    NUM_THREADS_FIELD_NUMBER: _ClassVar[int]
    pid: int
    stalled_since_ns: int
    stall_ns: int
    threshold_ns: int
    last_step: int
    pg_name: str
    seq_id: int
    op: str
    input_sizes: str
    dtype: str
    enqueue_ns: int
    last_enqueued_seq: int
    last_completed_seq: int
    fr_tail_json: str
    pg_status_json: str
    fr_ok: bool
    num_threads: int
    def __init__(self, pid: _Optional[int] = ..., stalled_since_ns: _Optional[int] = ..., stall_ns: _Optional[int] = ..., threshold_ns: _Optional[int] = ..., last_step: _Optional[int] = ..., pg_name: _Optional[str] = ..., seq_id: _Optional[int] = ..., op: _Optional[str] = ..., input_sizes: _Optional[str] = ..., dtype: _Optional[str] = ..., enqueue_ns: _Optional[int] = ..., last_enqueued_seq: _Optional[int] = ..., last_completed_seq: _Optional[int] = ..., fr_tail_json: _Optional[str] = ..., pg_status_json: _Optional[str] = ..., fr_ok: _Optional[bool] = ..., num_threads: _Optional[int] = ...) -> None: ...

class StackDump(_message.Message):
    __slots__ = ("pid", "reason", "origin", "thread_id", "thread_name", "is_main", "frames", "num_frames")
    PID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NAME_FIELD_NUMBER: _ClassVar[int]
    IS_MAIN_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    pid: int
    reason: str
    origin: str
    thread_id: int
    thread_name: str
    is_main: bool
    frames: str
    num_frames: int
    def __init__(self, pid: _Optional[int] = ..., reason: _Optional[str] = ..., origin: _Optional[str] = ..., thread_id: _Optional[int] = ..., thread_name: _Optional[str] = ..., is_main: _Optional[bool] = ..., frames: _Optional[str] = ..., num_frames: _Optional[int] = ...) -> None: ...

class ExceptionEvent(_message.Message):
    __slots__ = ("pid", "thread_name", "is_main", "exc_type", "message", "frames", "num_frames")
    PID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NAME_FIELD_NUMBER: _ClassVar[int]
    IS_MAIN_FIELD_NUMBER: _ClassVar[int]
    EXC_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    pid: int
    thread_name: str
    is_main: bool
    exc_type: str
    message: str
    frames: str
    num_frames: int
    def __init__(self, pid: _Optional[int] = ..., thread_name: _Optional[str] = ..., is_main: _Optional[bool] = ..., exc_type: _Optional[str] = ..., message: _Optional[str] = ..., frames: _Optional[str] = ..., num_frames: _Optional[int] = ...) -> None: ...

class RankExit(_message.Message):
    __slots__ = ("pid", "observer", "exit_code", "signal", "first_failure")
    PID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    FIRST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    pid: int
    observer: str
    exit_code: int
    signal: int
    first_failure: bool
    def __init__(self, pid: _Optional[int] = ..., observer: _Optional[str] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., first_failure: _Optional[bool] = ...) -> None: ...

class NumericsSample(_message.Message):
    __slots__ = ("loss", "grad_norm", "num_grads", "num_nonfinite_grads", "loss_scale")
    LOSS_FIELD_NUMBER: _ClassVar[int]
    GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    NUM_GRADS_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_GRADS_FIELD_NUMBER: _ClassVar[int]
    LOSS_SCALE_FIELD_NUMBER: _ClassVar[int]
    loss: float
    grad_norm: float
    num_grads: int
    num_nonfinite_grads: int
    loss_scale: float
    def __init__(self, loss: _Optional[float] = ..., grad_norm: _Optional[float] = ..., num_grads: _Optional[int] = ..., num_nonfinite_grads: _Optional[int] = ..., loss_scale: _Optional[float] = ...) -> None: ...

class NonFinite(_message.Message):
    __slots__ = ("where", "module", "tensor", "num_nonfinite", "num_elements", "method", "reproduced", "loss")
    WHERE_FIELD_NUMBER: _ClassVar[int]
    MODULE_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_FIELD_NUMBER: _ClassVar[int]
    NUM_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REPRODUCED_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    where: str
    module: str
    tensor: str
    num_nonfinite: int
    num_elements: int
    method: str
    reproduced: bool
    loss: float
    def __init__(self, where: _Optional[str] = ..., module: _Optional[str] = ..., tensor: _Optional[str] = ..., num_nonfinite: _Optional[int] = ..., num_elements: _Optional[int] = ..., method: _Optional[str] = ..., reproduced: _Optional[bool] = ..., loss: _Optional[float] = ...) -> None: ...

class ParamFingerprint(_message.Message):
    __slots__ = ("checksum", "dp_group", "dp_size", "num_tensors", "num_params_sampled", "num_params_total")
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    DP_GROUP_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMS_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    checksum: int
    dp_group: str
    dp_size: int
    num_tensors: int
    num_params_sampled: int
    num_params_total: int
    def __init__(self, checksum: _Optional[int] = ..., dp_group: _Optional[str] = ..., dp_size: _Optional[int] = ..., num_tensors: _Optional[int] = ..., num_params_sampled: _Optional[int] = ..., num_params_total: _Optional[int] = ...) -> None: ...

class BatchStats(_message.Message):
    __slots__ = ("reason", "num_tensors", "num_elements", "num_nonfinite", "min_value", "max_value", "mean_abs", "sampled")
    REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    NUM_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_FIELD_NUMBER: _ClassVar[int]
    MIN_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAX_VALUE_FIELD_NUMBER: _ClassVar[int]
    MEAN_ABS_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_FIELD_NUMBER: _ClassVar[int]
    reason: str
    num_tensors: int
    num_elements: int
    num_nonfinite: int
    min_value: float
    max_value: float
    mean_abs: float
    sampled: bool
    def __init__(self, reason: _Optional[str] = ..., num_tensors: _Optional[int] = ..., num_elements: _Optional[int] = ..., num_nonfinite: _Optional[int] = ..., min_value: _Optional[float] = ..., max_value: _Optional[float] = ..., mean_abs: _Optional[float] = ..., sampled: _Optional[bool] = ...) -> None: ...

class ProbeResultEvent(_message.Message):
    __slots__ = ("request_id", "probe", "device", "status", "metric", "value", "unit", "detail", "params_json", "lower_is_better", "duration_ns")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    LOWER_IS_BETTER_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    probe: str
    device: str
    status: str
    metric: str
    value: float
    unit: str
    detail: str
    params_json: str
    lower_is_better: bool
    duration_ns: int
    def __init__(self, request_id: _Optional[str] = ..., probe: _Optional[str] = ..., device: _Optional[str] = ..., status: _Optional[str] = ..., metric: _Optional[str] = ..., value: _Optional[float] = ..., unit: _Optional[str] = ..., detail: _Optional[str] = ..., params_json: _Optional[str] = ..., lower_is_better: _Optional[bool] = ..., duration_ns: _Optional[int] = ...) -> None: ...

class ProcessGroupInfo(_message.Message):
    __slots__ = ("pg_name", "pg_desc", "ranks_json", "size", "backend")
    PG_NAME_FIELD_NUMBER: _ClassVar[int]
    PG_DESC_FIELD_NUMBER: _ClassVar[int]
    RANKS_JSON_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    pg_name: str
    pg_desc: str
    ranks_json: str
    size: int
    backend: str
    def __init__(self, pg_name: _Optional[str] = ..., pg_desc: _Optional[str] = ..., ranks_json: _Optional[str] = ..., size: _Optional[int] = ..., backend: _Optional[str] = ...) -> None: ...

class HostProcess(_message.Message):
    __slots__ = ("pid", "interval_ns", "cpu_pct", "cmd", "last_cpu")
    PID_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_PCT_FIELD_NUMBER: _ClassVar[int]
    CMD_FIELD_NUMBER: _ClassVar[int]
    LAST_CPU_FIELD_NUMBER: _ClassVar[int]
    pid: int
    interval_ns: int
    cpu_pct: float
    cmd: str
    last_cpu: int
    def __init__(self, pid: _Optional[int] = ..., interval_ns: _Optional[int] = ..., cpu_pct: _Optional[float] = ..., cmd: _Optional[str] = ..., last_cpu: _Optional[int] = ...) -> None: ...

class TcpPeerSample(_message.Message):
    __slots__ = ("local_ip", "remote_ip", "remote_host", "interval_ns", "num_conns", "bytes_sent", "bytes_acked", "bytes_retrans", "num_retrans", "rtt_us", "min_rtt_us", "send_queue_bytes", "busy_us", "rwnd_limited_us", "sndbuf_limited_us")
    LOCAL_IP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_IP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_HOST_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    NUM_CONNS_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    BYTES_ACKED_FIELD_NUMBER: _ClassVar[int]
    BYTES_RETRANS_FIELD_NUMBER: _ClassVar[int]
    NUM_RETRANS_FIELD_NUMBER: _ClassVar[int]
    RTT_US_FIELD_NUMBER: _ClassVar[int]
    MIN_RTT_US_FIELD_NUMBER: _ClassVar[int]
    SEND_QUEUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BUSY_US_FIELD_NUMBER: _ClassVar[int]
    RWND_LIMITED_US_FIELD_NUMBER: _ClassVar[int]
    SNDBUF_LIMITED_US_FIELD_NUMBER: _ClassVar[int]
    local_ip: str
    remote_ip: str
    remote_host: str
    interval_ns: int
    num_conns: int
    bytes_sent: int
    bytes_acked: int
    bytes_retrans: int
    num_retrans: int
    rtt_us: float
    min_rtt_us: float
    send_queue_bytes: int
    busy_us: int
    rwnd_limited_us: int
    sndbuf_limited_us: int
    def __init__(self, local_ip: _Optional[str] = ..., remote_ip: _Optional[str] = ..., remote_host: _Optional[str] = ..., interval_ns: _Optional[int] = ..., num_conns: _Optional[int] = ..., bytes_sent: _Optional[int] = ..., bytes_acked: _Optional[int] = ..., bytes_retrans: _Optional[int] = ..., num_retrans: _Optional[int] = ..., rtt_us: _Optional[float] = ..., min_rtt_us: _Optional[float] = ..., send_queue_bytes: _Optional[int] = ..., busy_us: _Optional[int] = ..., rwnd_limited_us: _Optional[int] = ..., sndbuf_limited_us: _Optional[int] = ...) -> None: ...

class NicSample(_message.Message):
    __slots__ = ("device", "port", "link_layer", "interval_ns", "rx_bytes_per_s", "tx_bytes_per_s", "num_drops", "num_errors", "num_xmit_wait")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    LINK_LAYER_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NUM_DROPS_FIELD_NUMBER: _ClassVar[int]
    NUM_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NUM_XMIT_WAIT_FIELD_NUMBER: _ClassVar[int]
    device: str
    port: int
    link_layer: str
    interval_ns: int
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    num_drops: int
    num_errors: int
    num_xmit_wait: int
    def __init__(self, device: _Optional[str] = ..., port: _Optional[int] = ..., link_layer: _Optional[str] = ..., interval_ns: _Optional[int] = ..., rx_bytes_per_s: _Optional[float] = ..., tx_bytes_per_s: _Optional[float] = ..., num_drops: _Optional[int] = ..., num_errors: _Optional[int] = ..., num_xmit_wait: _Optional[int] = ...) -> None: ...

class HookSilent(_message.Message):
    __slots__ = ("pid", "hook_source", "silent_ns", "health_interval_ns", "last_health_seq", "last_error")
    PID_FIELD_NUMBER: _ClassVar[int]
    HOOK_SOURCE_FIELD_NUMBER: _ClassVar[int]
    SILENT_NS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEALTH_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    pid: int
    hook_source: str
    silent_ns: int
    health_interval_ns: int
    last_health_seq: int
    last_error: str
    def __init__(self, pid: _Optional[int] = ..., hook_source: _Optional[str] = ..., silent_ns: _Optional[int] = ..., health_interval_ns: _Optional[int] = ..., last_health_seq: _Optional[int] = ..., last_error: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("env", "step", "collective", "checkpoint", "gpu", "xid", "host", "proc", "hook_health", "collector_error", "clock", "rank_info", "run", "profile_window", "kernel", "hang", "stack", "exception", "rank_exit", "numerics", "nonfinite", "fingerprint", "batch_stats", "probe_result", "process_group", "host_process", "tcp_peer", "nic", "hook_silent")
    ENV_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    XID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PROC_FIELD_NUMBER: _ClassVar[int]
    HOOK_HEALTH_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_ERROR_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    RANK_INFO_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    PROFILE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    HANG_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    RANK_EXIT_FIELD_NUMBER: _ClassVar[int]
    NUMERICS_FIELD_NUMBER: _ClassVar[int]
    NONFINITE_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BATCH_STATS_FIELD_NUMBER: _ClassVar[int]
    PROBE_RESULT_FIELD_NUMBER: _ClassVar[int]
    PROCESS_GROUP_FIELD_NUMBER: _ClassVar[int]
    HOST_PROCESS_FIELD_NUMBER: _ClassVar[int]
    TCP_PEER_FIELD_NUMBER: _ClassVar[int]
    NIC_FIELD_NUMBER: _ClassVar[int]
    HOOK_SILENT_FIELD_NUMBER: _ClassVar[int]
    env: Envelope
    step: StepEvent
    collective: CollectiveEvent
    checkpoint: CheckpointEvent
    gpu: GpuSample
    xid: XidEvent
    host: HostSample
    proc: ProcSample
    hook_health: HookHealth
    collector_error: CollectorError
    clock: ClockSync
    rank_info: RankInfo
    run: RunEvent
    profile_window: ProfileWindow
    kernel: KernelSummary
    hang: HangReport
    stack: StackDump
    exception: ExceptionEvent
    rank_exit: RankExit
    numerics: NumericsSample
    nonfinite: NonFinite
    fingerprint: ParamFingerprint
    batch_stats: BatchStats
    probe_result: ProbeResultEvent
    process_group: ProcessGroupInfo
    host_process: HostProcess
    tcp_peer: TcpPeerSample
    nic: NicSample
    hook_silent: HookSilent
    def __init__(self, env: _Optional[_Union[Envelope, _Mapping]] = ..., step: _Optional[_Union[StepEvent, _Mapping]] = ..., collective: _Optional[_Union[CollectiveEvent, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointEvent, _Mapping]] = ..., gpu: _Optional[_Union[GpuSample, _Mapping]] = ..., xid: _Optional[_Union[XidEvent, _Mapping]] = ..., host: _Optional[_Union[HostSample, _Mapping]] = ..., proc: _Optional[_Union[ProcSample, _Mapping]] = ..., hook_health: _Optional[_Union[HookHealth, _Mapping]] = ..., collector_error: _Optional[_Union[CollectorError, _Mapping]] = ..., clock: _Optional[_Union[ClockSync, _Mapping]] = ..., rank_info: _Optional[_Union[RankInfo, _Mapping]] = ..., run: _Optional[_Union[RunEvent, _Mapping]] = ..., profile_window: _Optional[_Union[ProfileWindow, _Mapping]] = ..., kernel: _Optional[_Union[KernelSummary, _Mapping]] = ..., hang: _Optional[_Union[HangReport, _Mapping]] = ..., stack: _Optional[_Union[StackDump, _Mapping]] = ..., exception: _Optional[_Union[ExceptionEvent, _Mapping]] = ..., rank_exit: _Optional[_Union[RankExit, _Mapping]] = ..., numerics: _Optional[_Union[NumericsSample, _Mapping]] = ..., nonfinite: _Optional[_Union[NonFinite, _Mapping]] = ..., fingerprint: _Optional[_Union[ParamFingerprint, _Mapping]] = ..., batch_stats: _Optional[_Union[BatchStats, _Mapping]] = ..., probe_result: _Optional[_Union[ProbeResultEvent, _Mapping]] = ..., process_group: _Optional[_Union[ProcessGroupInfo, _Mapping]] = ..., host_process: _Optional[_Union[HostProcess, _Mapping]] = ..., tcp_peer: _Optional[_Union[TcpPeerSample, _Mapping]] = ..., nic: _Optional[_Union[NicSample, _Mapping]] = ..., hook_silent: _Optional[_Union[HookSilent, _Mapping]] = ...) -> None: ...

class StepEventColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "start_ns", "end_ns", "duration_ns", "data_wait_ns", "forward_ns", "backward_ns", "optimizer_ns", "checkpoint_ns", "other_ns", "compute_ns", "collective_wait_ns", "loss", "loss_absent", "num_backward", "num_collectives", "cpu_wait_ns", "device_duration_ns", "device_duration_ns_absent", "device_compute_ns", "device_compute_ns_absent", "device_wait_ns", "device_wait_ns_absent")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    DATA_WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_NS_FIELD_NUMBER: _ClassVar[int]
    BACKWARD_NS_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_NS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_NS_FIELD_NUMBER: _ClassVar[int]
    OTHER_NS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_NS_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    LOSS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    NUM_BACKWARD_FIELD_NUMBER: _ClassVar[int]
    NUM_COLLECTIVES_FIELD_NUMBER: _ClassVar[int]
    CPU_WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_DURATION_NS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_COMPUTE_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_COMPUTE_NS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_WAIT_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_WAIT_NS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    start_ns: _containers.RepeatedScalarFieldContainer[int]
    end_ns: _containers.RepeatedScalarFieldContainer[int]
    duration_ns: _containers.RepeatedScalarFieldContainer[int]
    data_wait_ns: _containers.RepeatedScalarFieldContainer[int]
    forward_ns: _containers.RepeatedScalarFieldContainer[int]
    backward_ns: _containers.RepeatedScalarFieldContainer[int]
    optimizer_ns: _containers.RepeatedScalarFieldContainer[int]
    checkpoint_ns: _containers.RepeatedScalarFieldContainer[int]
    other_ns: _containers.RepeatedScalarFieldContainer[int]
    compute_ns: _containers.RepeatedScalarFieldContainer[int]
    collective_wait_ns: _containers.RepeatedScalarFieldContainer[int]
    loss: _containers.RepeatedScalarFieldContainer[float]
    loss_absent: _containers.RepeatedScalarFieldContainer[bool]
    num_backward: _containers.RepeatedScalarFieldContainer[int]
    num_collectives: _containers.RepeatedScalarFieldContainer[int]
    cpu_wait_ns: _containers.RepeatedScalarFieldContainer[int]
    device_duration_ns: _containers.RepeatedScalarFieldContainer[int]
    device_duration_ns_absent: _containers.RepeatedScalarFieldContainer[bool]
    device_compute_ns: _containers.RepeatedScalarFieldContainer[int]
    device_compute_ns_absent: _containers.RepeatedScalarFieldContainer[bool]
    device_wait_ns: _containers.RepeatedScalarFieldContainer[int]
    device_wait_ns_absent: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., start_ns: _Optional[_Iterable[int]] = ..., end_ns: _Optional[_Iterable[int]] = ..., duration_ns: _Optional[_Iterable[int]] = ..., data_wait_ns: _Optional[_Iterable[int]] = ..., forward_ns: _Optional[_Iterable[int]] = ..., backward_ns: _Optional[_Iterable[int]] = ..., optimizer_ns: _Optional[_Iterable[int]] = ..., checkpoint_ns: _Optional[_Iterable[int]] = ..., other_ns: _Optional[_Iterable[int]] = ..., compute_ns: _Optional[_Iterable[int]] = ..., collective_wait_ns: _Optional[_Iterable[int]] = ..., loss: _Optional[_Iterable[float]] = ..., loss_absent: _Optional[_Iterable[bool]] = ..., num_backward: _Optional[_Iterable[int]] = ..., num_collectives: _Optional[_Iterable[int]] = ..., cpu_wait_ns: _Optional[_Iterable[int]] = ..., device_duration_ns: _Optional[_Iterable[int]] = ..., device_duration_ns_absent: _Optional[_Iterable[bool]] = ..., device_compute_ns: _Optional[_Iterable[int]] = ..., device_compute_ns_absent: _Optional[_Iterable[bool]] = ..., device_wait_ns: _Optional[_Iterable[int]] = ..., device_wait_ns_absent: _Optional[_Iterable[bool]] = ...) -> None: ...

class CollectiveEventColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "op", "pg_name", "pg_desc", "pg_size", "seq_id", "p2p_seq_id", "is_p2p", "num_bytes", "dtype", "enqueue_ns", "start_ns", "start_ns_absent", "end_ns", "end_ns_absent", "duration_ns", "duration_ns_absent", "state", "origin")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    PG_NAME_FIELD_NUMBER: _ClassVar[int]
    PG_DESC_FIELD_NUMBER: _ClassVar[int]
    PG_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    P2P_SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    IS_P2P_FIELD_NUMBER: _ClassVar[int]
    NUM_BYTES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_NS_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    START_NS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    op: _containers.RepeatedScalarFieldContainer[str]
    pg_name: _containers.RepeatedScalarFieldContainer[str]
    pg_desc: _containers.RepeatedScalarFieldContainer[str]
    pg_size: _containers.RepeatedScalarFieldContainer[int]
    seq_id: _containers.RepeatedScalarFieldContainer[int]
    p2p_seq_id: _containers.RepeatedScalarFieldContainer[int]
    is_p2p: _containers.RepeatedScalarFieldContainer[bool]
    num_bytes: _containers.RepeatedScalarFieldContainer[int]
    dtype: _containers.RepeatedScalarFieldContainer[str]
    enqueue_ns: _containers.RepeatedScalarFieldContainer[int]
    start_ns: _containers.RepeatedScalarFieldContainer[int]
    start_ns_absent: _containers.RepeatedScalarFieldContainer[bool]
    end_ns: _containers.RepeatedScalarFieldContainer[int]
    end_ns_absent: _containers.RepeatedScalarFieldContainer[bool]
    duration_ns: _containers.RepeatedScalarFieldContainer[int]
    duration_ns_absent: _containers.RepeatedScalarFieldContainer[bool]
    state: _containers.RepeatedScalarFieldContainer[str]
    origin: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., op: _Optional[_Iterable[str]] = ..., pg_name: _Optional[_Iterable[str]] = ..., pg_desc: _Optional[_Iterable[str]] = ..., pg_size: _Optional[_Iterable[int]] = ..., seq_id: _Optional[_Iterable[int]] = ..., p2p_seq_id: _Optional[_Iterable[int]] = ..., is_p2p: _Optional[_Iterable[bool]] = ..., num_bytes: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Iterable[str]] = ..., enqueue_ns: _Optional[_Iterable[int]] = ..., start_ns: _Optional[_Iterable[int]] = ..., start_ns_absent: _Optional[_Iterable[bool]] = ..., end_ns: _Optional[_Iterable[int]] = ..., end_ns_absent: _Optional[_Iterable[bool]] = ..., duration_ns: _Optional[_Iterable[int]] = ..., duration_ns_absent: _Optional[_Iterable[bool]] = ..., state: _Optional[_Iterable[str]] = ..., origin: _Optional[_Iterable[str]] = ...) -> None: ...

class CheckpointEventColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "op", "api", "path", "num_bytes", "start_ns", "duration_ns", "ok")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    NUM_BYTES_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    op: _containers.RepeatedScalarFieldContainer[str]
    api: _containers.RepeatedScalarFieldContainer[str]
    path: _containers.RepeatedScalarFieldContainer[str]
    num_bytes: _containers.RepeatedScalarFieldContainer[int]
    start_ns: _containers.RepeatedScalarFieldContainer[int]
    duration_ns: _containers.RepeatedScalarFieldContainer[int]
    ok: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., op: _Optional[_Iterable[str]] = ..., api: _Optional[_Iterable[str]] = ..., path: _Optional[_Iterable[str]] = ..., num_bytes: _Optional[_Iterable[int]] = ..., start_ns: _Optional[_Iterable[int]] = ..., duration_ns: _Optional[_Iterable[int]] = ..., ok: _Optional[_Iterable[bool]] = ...) -> None: ...

class GpuSampleColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "gpu_index", "uuid", "name", "util_pct", "util_pct_absent", "mem_util_pct", "mem_util_pct_absent", "mem_used_bytes", "mem_used_bytes_absent", "mem_total_bytes", "mem_total_bytes_absent", "sm_clock_mhz", "sm_clock_mhz_absent", "mem_clock_mhz", "mem_clock_mhz_absent", "sm_clock_max_mhz", "sm_clock_max_mhz_absent", "temp_c", "temp_c_absent", "power_w", "power_w_absent", "power_limit_w", "power_limit_w_absent", "throttle_reasons_mask", "throttle_reasons", "ecc_sbe_volatile", "ecc_sbe_volatile_absent", "ecc_dbe_volatile", "ecc_dbe_volatile_absent", "pcie_tx_kbps", "pcie_tx_kbps_absent", "pcie_rx_kbps", "pcie_rx_kbps_absent", "pcie_replay_count", "pcie_replay_count_absent", "nvlink_tx_bytes", "nvlink_tx_bytes_absent", "nvlink_rx_bytes", "nvlink_rx_bytes_absent", "pcie_link_gen", "pcie_link_gen_absent", "pcie_link_gen_max", "pcie_link_gen_max_absent", "pcie_link_width", "pcie_link_width_absent", "pcie_link_width_max", "pcie_link_width_max_absent", "retired_pages_sbe", "retired_pages_sbe_absent", "retired_pages_dbe", "retired_pages_dbe_absent", "retired_pages_pending", "retired_pages_pending_absent", "remapped_rows_correctable", "remapped_rows_correctable_absent", "remapped_rows_uncorrectable", "remapped_rows_uncorrectable_absent", "row_remap_pending", "row_remap_pending_absent", "row_remap_failure", "row_remap_failure_absent", "nvlink_crc_flit_errors", "nvlink_crc_flit_errors_absent", "nvlink_crc_data_errors", "nvlink_crc_data_errors_absent", "nvlink_replay_errors", "nvlink_replay_errors_absent", "nvlink_recovery_errors", "nvlink_recovery_errors_absent")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    GPU_INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UTIL_PCT_FIELD_NUMBER: _ClassVar[int]
    UTIL_PCT_ABSENT_FIELD_NUMBER: _ClassVar[int]
    MEM_UTIL_PCT_FIELD_NUMBER: _ClassVar[int]
    MEM_UTIL_PCT_ABSENT_FIELD_NUMBER: _ClassVar[int]
    MEM_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEM_USED_BYTES_ABSENT_FIELD_NUMBER: _ClassVar[int]
    MEM_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEM_TOTAL_BYTES_ABSENT_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MHZ_ABSENT_FIELD_NUMBER: _ClassVar[int]
    MEM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    MEM_CLOCK_MHZ_ABSENT_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MAX_MHZ_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MAX_MHZ_ABSENT_FIELD_NUMBER: _ClassVar[int]
    TEMP_C_FIELD_NUMBER: _ClassVar[int]
    TEMP_C_ABSENT_FIELD_NUMBER: _ClassVar[int]
    POWER_W_FIELD_NUMBER: _ClassVar[int]
    POWER_W_ABSENT_FIELD_NUMBER: _ClassVar[int]
    POWER_LIMIT_W_FIELD_NUMBER: _ClassVar[int]
    POWER_LIMIT_W_ABSENT_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_REASONS_MASK_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_REASONS_FIELD_NUMBER: _ClassVar[int]
    ECC_SBE_VOLATILE_FIELD_NUMBER: _ClassVar[int]
    ECC_SBE_VOLATILE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    ECC_DBE_VOLATILE_FIELD_NUMBER: _ClassVar[int]
    ECC_DBE_VOLATILE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    PCIE_TX_KBPS_FIELD_NUMBER: _ClassVar[int]
    PCIE_TX_KBPS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    PCIE_RX_KBPS_FIELD_NUMBER: _ClassVar[int]
    PCIE_RX_KBPS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    PCIE_REPLAY_COUNT_FIELD_NUMBER: _ClassVar[int]
    PCIE_REPLAY_COUNT_ABSENT_FIELD_NUMBER: _ClassVar[int]
    NVLINK_TX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NVLINK_TX_BYTES_ABSENT_FIELD_NUMBER: _ClassVar[int]
    NVLINK_RX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NVLINK_RX_BYTES_ABSENT_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_GEN_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_GEN_ABSENT_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_GEN_MAX_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_GEN_MAX_ABSENT_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_WIDTH_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_WIDTH_ABSENT_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_WIDTH_MAX_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_WIDTH_MAX_ABSENT_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_SBE_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_SBE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_DBE_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_DBE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_PENDING_FIELD_NUMBER: _ClassVar[int]
    RETIRED_PAGES_PENDING_ABSENT_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_CORRECTABLE_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_CORRECTABLE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_UNCORRECTABLE_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_UNCORRECTABLE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    ROW_REMAP_PENDING_FIELD_NUMBER: _ClassVar[int]
    ROW_REMAP_PENDING_ABSENT_FIELD_NUMBER: _ClassVar[int]
    ROW_REMAP_FAILURE_FIELD_NUMBER: _ClassVar[int]
    ROW_REMAP_FAILURE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    NVLINK_CRC_FLIT_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_CRC_FLIT_ERRORS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    NVLINK_CRC_DATA_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_CRC_DATA_ERRORS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    NVLINK_REPLAY_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_REPLAY_ERRORS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    NVLINK_RECOVERY_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_RECOVERY_ERRORS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    gpu_index: _containers.RepeatedScalarFieldContainer[int]
    uuid: _containers.RepeatedScalarFieldContainer[str]
    name: _containers.RepeatedScalarFieldContainer[str]
    util_pct: _containers.RepeatedScalarFieldContainer[float]
    util_pct_absent: _containers.RepeatedScalarFieldContainer[bool]
    mem_util_pct: _containers.RepeatedScalarFieldContainer[float]
    mem_util_pct_absent: _containers.RepeatedScalarFieldContainer[bool]
    mem_used_bytes: _containers.RepeatedScalarFieldContainer[int]
    mem_used_bytes_absent: _containers.RepeatedScalarFieldContainer[bool]
    mem_total_bytes: _containers.RepeatedScalarFieldContainer[int]
    mem_total_bytes_absent: _containers.RepeatedScalarFieldContainer[bool]
    sm_clock_mhz: _containers.RepeatedScalarFieldContainer[int]
    sm_clock_mhz_absent: _containers.RepeatedScalarFieldContainer[bool]
    mem_clock_mhz: _containers.RepeatedScalarFieldContainer[int]
    mem_clock_mhz_absent: _containers.RepeatedScalarFieldContainer[bool]
    sm_clock_max_mhz: _containers.RepeatedScalarFieldContainer[int]
    sm_clock_max_mhz_absent: _containers.RepeatedScalarFieldContainer[bool]
    temp_c: _containers.RepeatedScalarFieldContainer[float]
    temp_c_absent: _containers.RepeatedScalarFieldContainer[bool]
    power_w: _containers.RepeatedScalarFieldContainer[float]
    power_w_absent: _containers.RepeatedScalarFieldContainer[bool]
    power_limit_w: _containers.RepeatedScalarFieldContainer[float]
    power_limit_w_absent: _containers.RepeatedScalarFieldContainer[bool]
    throttle_reasons_mask: _containers.RepeatedScalarFieldContainer[int]
    throttle_reasons: _containers.RepeatedScalarFieldContainer[str]
    ecc_sbe_volatile: _containers.RepeatedScalarFieldContainer[int]
    ecc_sbe_volatile_absent: _containers.RepeatedScalarFieldContainer[bool]
    ecc_dbe_volatile: _containers.RepeatedScalarFieldContainer[int]
    ecc_dbe_volatile_absent: _containers.RepeatedScalarFieldContainer[bool]
    pcie_tx_kbps: _containers.RepeatedScalarFieldContainer[int]
    pcie_tx_kbps_absent: _containers.RepeatedScalarFieldContainer[bool]
    pcie_rx_kbps: _containers.RepeatedScalarFieldContainer[int]
    pcie_rx_kbps_absent: _containers.RepeatedScalarFieldContainer[bool]
    pcie_replay_count: _containers.RepeatedScalarFieldContainer[int]
    pcie_replay_count_absent: _containers.RepeatedScalarFieldContainer[bool]
    nvlink_tx_bytes: _containers.RepeatedScalarFieldContainer[int]
    nvlink_tx_bytes_absent: _containers.RepeatedScalarFieldContainer[bool]
    nvlink_rx_bytes: _containers.RepeatedScalarFieldContainer[int]
    nvlink_rx_bytes_absent: _containers.RepeatedScalarFieldContainer[bool]
    pcie_link_gen: _containers.RepeatedScalarFieldContainer[int]
    pcie_link_gen_absent: _containers.RepeatedScalarFieldContainer[bool]
    pcie_link_gen_max: _containers.RepeatedScalarFieldContainer[int]
    pcie_link_gen_max_absent: _containers.RepeatedScalarFieldContainer[bool]
    pcie_link_width: _containers.RepeatedScalarFieldContainer[int]
    pcie_link_width_absent: _containers.RepeatedScalarFieldContainer[bool]
    pcie_link_width_max: _containers.RepeatedScalarFieldContainer[int]
    pcie_link_width_max_absent: _containers.RepeatedScalarFieldContainer[bool]
    retired_pages_sbe: _containers.RepeatedScalarFieldContainer[int]
    retired_pages_sbe_absent: _containers.RepeatedScalarFieldContainer[bool]
    retired_pages_dbe: _containers.RepeatedScalarFieldContainer[int]
    retired_pages_dbe_absent: _containers.RepeatedScalarFieldContainer[bool]
    retired_pages_pending: _containers.RepeatedScalarFieldContainer[int]
    retired_pages_pending_absent: _containers.RepeatedScalarFieldContainer[bool]
    remapped_rows_correctable: _containers.RepeatedScalarFieldContainer[int]
    remapped_rows_correctable_absent: _containers.RepeatedScalarFieldContainer[bool]
    remapped_rows_uncorrectable: _containers.RepeatedScalarFieldContainer[int]
    remapped_rows_uncorrectable_absent: _containers.RepeatedScalarFieldContainer[bool]
    row_remap_pending: _containers.RepeatedScalarFieldContainer[int]
    row_remap_pending_absent: _containers.RepeatedScalarFieldContainer[bool]
    row_remap_failure: _containers.RepeatedScalarFieldContainer[int]
    row_remap_failure_absent: _containers.RepeatedScalarFieldContainer[bool]
    nvlink_crc_flit_errors: _containers.RepeatedScalarFieldContainer[int]
    nvlink_crc_flit_errors_absent: _containers.RepeatedScalarFieldContainer[bool]
    nvlink_crc_data_errors: _containers.RepeatedScalarFieldContainer[int]
    nvlink_crc_data_errors_absent: _containers.RepeatedScalarFieldContainer[bool]
    nvlink_replay_errors: _containers.RepeatedScalarFieldContainer[int]
    nvlink_replay_errors_absent: _containers.RepeatedScalarFieldContainer[bool]
    nvlink_recovery_errors: _containers.RepeatedScalarFieldContainer[int]
    nvlink_recovery_errors_absent: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., gpu_index: _Optional[_Iterable[int]] = ..., uuid: _Optional[_Iterable[str]] = ..., name: _Optional[_Iterable[str]] = ..., util_pct: _Optional[_Iterable[float]] = ..., util_pct_absent: _Optional[_Iterable[bool]] = ..., mem_util_pct: _Optional[_Iterable[float]] = ..., mem_util_pct_absent: _Optional[_Iterable[bool]] = ..., mem_used_bytes: _Optional[_Iterable[int]] = ..., mem_used_bytes_absent: _Optional[_Iterable[bool]] = ..., mem_total_bytes: _Optional[_Iterable[int]] = ..., mem_total_bytes_absent: _Optional[_Iterable[bool]] = ..., sm_clock_mhz: _Optional[_Iterable[int]] = ..., sm_clock_mhz_absent: _Optional[_Iterable[bool]] = ..., mem_clock_mhz: _Optional[_Iterable[int]] = ..., mem_clock_mhz_absent: _Optional[_Iterable[bool]] = ..., sm_clock_max_mhz: _Optional[_Iterable[int]] = ..., sm_clock_max_mhz_absent: _Optional[_Iterable[bool]] = ..., temp_c: _Optional[_Iterable[float]] = ..., temp_c_absent: _Optional[_Iterable[bool]] = ..., power_w: _Optional[_Iterable[float]] = ..., power_w_absent: _Optional[_Iterable[bool]] = ..., power_limit_w: _Optional[_Iterable[float]] = ..., power_limit_w_absent: _Optional[_Iterable[bool]] = ..., throttle_reasons_mask: _Optional[_Iterable[int]] = ..., throttle_reasons: _Optional[_Iterable[str]] = ..., ecc_sbe_volatile: _Optional[_Iterable[int]] = ..., ecc_sbe_volatile_absent: _Optional[_Iterable[bool]] = ..., ecc_dbe_volatile: _Optional[_Iterable[int]] = ..., ecc_dbe_volatile_absent: _Optional[_Iterable[bool]] = ..., pcie_tx_kbps: _Optional[_Iterable[int]] = ..., pcie_tx_kbps_absent: _Optional[_Iterable[bool]] = ..., pcie_rx_kbps: _Optional[_Iterable[int]] = ..., pcie_rx_kbps_absent: _Optional[_Iterable[bool]] = ..., pcie_replay_count: _Optional[_Iterable[int]] = ..., pcie_replay_count_absent: _Optional[_Iterable[bool]] = ..., nvlink_tx_bytes: _Optional[_Iterable[int]] = ..., nvlink_tx_bytes_absent: _Optional[_Iterable[bool]] = ..., nvlink_rx_bytes: _Optional[_Iterable[int]] = ..., nvlink_rx_bytes_absent: _Optional[_Iterable[bool]] = ..., pcie_link_gen: _Optional[_Iterable[int]] = ..., pcie_link_gen_absent: _Optional[_Iterable[bool]] = ..., pcie_link_gen_max: _Optional[_Iterable[int]] = ..., pcie_link_gen_max_absent: _Optional[_Iterable[bool]] = ..., pcie_link_width: _Optional[_Iterable[int]] = ..., pcie_link_width_absent: _Optional[_Iterable[bool]] = ..., pcie_link_width_max: _Optional[_Iterable[int]] = ..., pcie_link_width_max_absent: _Optional[_Iterable[bool]] = ..., retired_pages_sbe: _Optional[_Iterable[int]] = ..., retired_pages_sbe_absent: _Optional[_Iterable[bool]] = ..., retired_pages_dbe: _Optional[_Iterable[int]] = ..., retired_pages_dbe_absent: _Optional[_Iterable[bool]] = ..., retired_pages_pending: _Optional[_Iterable[int]] = ..., retired_pages_pending_absent: _Optional[_Iterable[bool]] = ..., remapped_rows_correctable: _Optional[_Iterable[int]] = ..., remapped_rows_correctable_absent: _Optional[_Iterable[bool]] = ..., remapped_rows_uncorrectable: _Optional[_Iterable[int]] = ..., remapped_rows_uncorrectable_absent: _Optional[_Iterable[bool]] = ..., row_remap_pending: _Optional[_Iterable[int]] = ..., row_remap_pending_absent: _Optional[_Iterable[bool]] = ..., row_remap_failure: _Optional[_Iterable[int]] = ..., row_remap_failure_absent: _Optional[_Iterable[bool]] = ..., nvlink_crc_flit_errors: _Optional[_Iterable[int]] = ..., nvlink_crc_flit_errors_absent: _Optional[_Iterable[bool]] = ..., nvlink_crc_data_errors: _Optional[_Iterable[int]] = ..., nvlink_crc_data_errors_absent: _Optional[_Iterable[bool]] = ..., nvlink_replay_errors: _Optional[_Iterable[int]] = ..., nvlink_replay_errors_absent: _Optional[_Iterable[bool]] = ..., nvlink_recovery_errors: _Optional[_Iterable[int]] = ..., nvlink_recovery_errors_absent: _Optional[_Iterable[bool]] = ...) -> None: ...

class XidEventColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "gpu_index", "xid", "message")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    GPU_INDEX_FIELD_NUMBER: _ClassVar[int]
    XID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    gpu_index: _containers.RepeatedScalarFieldContainer[int]
    xid: _containers.RepeatedScalarFieldContainer[int]
    message: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., gpu_index: _Optional[_Iterable[int]] = ..., xid: _Optional[_Iterable[int]] = ..., message: _Optional[_Iterable[str]] = ...) -> None: ...

class HostSampleColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "interval_ns", "num_cpus", "cpu_busy_pct", "cpu_iowait_pct", "load_1m", "mem_total_bytes", "mem_available_bytes", "disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_rx_bytes_per_s", "net_tx_bytes_per_s", "num_procs_running")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    NUM_CPUS_FIELD_NUMBER: _ClassVar[int]
    CPU_BUSY_PCT_FIELD_NUMBER: _ClassVar[int]
    CPU_IOWAIT_PCT_FIELD_NUMBER: _ClassVar[int]
    LOAD_1M_FIELD_NUMBER: _ClassVar[int]
    MEM_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEM_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_READ_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    DISK_WRITE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NUM_PROCS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    interval_ns: _containers.RepeatedScalarFieldContainer[int]
    num_cpus: _containers.RepeatedScalarFieldContainer[int]
    cpu_busy_pct: _containers.RepeatedScalarFieldContainer[float]
    cpu_iowait_pct: _containers.RepeatedScalarFieldContainer[float]
    load_1m: _containers.RepeatedScalarFieldContainer[float]
    mem_total_bytes: _containers.RepeatedScalarFieldContainer[int]
    mem_available_bytes: _containers.RepeatedScalarFieldContainer[int]
    disk_read_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    disk_write_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    net_rx_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    net_tx_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    num_procs_running: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., interval_ns: _Optional[_Iterable[int]] = ..., num_cpus: _Optional[_Iterable[int]] = ..., cpu_busy_pct: _Optional[_Iterable[float]] = ..., cpu_iowait_pct: _Optional[_Iterable[float]] = ..., load_1m: _Optional[_Iterable[float]] = ..., mem_total_bytes: _Optional[_Iterable[int]] = ..., mem_available_bytes: _Optional[_Iterable[int]] = ..., disk_read_bytes_per_s: _Optional[_Iterable[float]] = ..., disk_write_bytes_per_s: _Optional[_Iterable[float]] = ..., net_rx_bytes_per_s: _Optional[_Iterable[float]] = ..., net_tx_bytes_per_s: _Optional[_Iterable[float]] = ..., num_procs_running: _Optional[_Iterable[int]] = ...) -> None: ...

class ProcSampleColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "interval_ns", "cpu_pct", "rss_bytes", "num_threads", "read_bytes_per_s", "write_bytes_per_s", "num_ctx_switches_involuntary", "last_cpu", "num_state_samples", "num_stopped", "num_disk_wait")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_PCT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_THREADS_FIELD_NUMBER: _ClassVar[int]
    READ_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    WRITE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NUM_CTX_SWITCHES_INVOLUNTARY_FIELD_NUMBER: _ClassVar[int]
    LAST_CPU_FIELD_NUMBER: _ClassVar[int]
    NUM_STATE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    NUM_STOPPED_FIELD_NUMBER: _ClassVar[int]
    NUM_DISK_WAIT_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    interval_ns: _containers.RepeatedScalarFieldContainer[int]
    cpu_pct: _containers.RepeatedScalarFieldContainer[float]
    rss_bytes: _containers.RepeatedScalarFieldContainer[int]
    num_threads: _containers.RepeatedScalarFieldContainer[int]
    read_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    write_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    num_ctx_switches_involuntary: _containers.RepeatedScalarFieldContainer[int]
    last_cpu: _containers.RepeatedScalarFieldContainer[int]
    num_state_samples: _containers.RepeatedScalarFieldContainer[int]
    num_stopped: _containers.RepeatedScalarFieldContainer[int]
    num_disk_wait: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., interval_ns: _Optional[_Iterable[int]] = ..., cpu_pct: _Optional[_Iterable[float]] = ..., rss_bytes: _Optional[_Iterable[int]] = ..., num_threads: _Optional[_Iterable[int]] = ..., read_bytes_per_s: _Optional[_Iterable[float]] = ..., write_bytes_per_s: _Optional[_Iterable[float]] = ..., num_ctx_switches_involuntary: _Optional[_Iterable[int]] = ..., last_cpu: _Optional[_Iterable[int]] = ..., num_state_samples: _Optional[_Iterable[int]] = ..., num_stopped: _Optional[_Iterable[int]] = ..., num_disk_wait: _Optional[_Iterable[int]] = ...) -> None: ...

class HookHealthColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "num_emitted", "num_sent", "num_dropped", "num_errors", "last_error", "queue_depth", "final", "num_queue_dropped", "num_fr_dropped", "num_undelivered", "num_unencodable", "num_oversize", "health_interval_ns")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    NUM_EMITTED_FIELD_NUMBER: _ClassVar[int]
    NUM_SENT_FIELD_NUMBER: _ClassVar[int]
    NUM_DROPPED_FIELD_NUMBER: _ClassVar[int]
    NUM_ERRORS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    NUM_QUEUE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    NUM_FR_DROPPED_FIELD_NUMBER: _ClassVar[int]
    NUM_UNDELIVERED_FIELD_NUMBER: _ClassVar[int]
    NUM_UNENCODABLE_FIELD_NUMBER: _ClassVar[int]
    NUM_OVERSIZE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    num_emitted: _containers.RepeatedScalarFieldContainer[int]
    num_sent: _containers.RepeatedScalarFieldContainer[int]
    num_dropped: _containers.RepeatedScalarFieldContainer[int]
    num_errors: _containers.RepeatedScalarFieldContainer[int]
    last_error: _containers.RepeatedScalarFieldContainer[str]
    queue_depth: _containers.RepeatedScalarFieldContainer[int]
    final: _containers.RepeatedScalarFieldContainer[bool]
    num_queue_dropped: _containers.RepeatedScalarFieldContainer[int]
    num_fr_dropped: _containers.RepeatedScalarFieldContainer[int]
    num_undelivered: _containers.RepeatedScalarFieldContainer[int]
    num_unencodable: _containers.RepeatedScalarFieldContainer[int]
    num_oversize: _containers.RepeatedScalarFieldContainer[int]
    health_interval_ns: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., num_emitted: _Optional[_Iterable[int]] = ..., num_sent: _Optional[_Iterable[int]] = ..., num_dropped: _Optional[_Iterable[int]] = ..., num_errors: _Optional[_Iterable[int]] = ..., last_error: _Optional[_Iterable[str]] = ..., queue_depth: _Optional[_Iterable[int]] = ..., final: _Optional[_Iterable[bool]] = ..., num_queue_dropped: _Optional[_Iterable[int]] = ..., num_fr_dropped: _Optional[_Iterable[int]] = ..., num_undelivered: _Optional[_Iterable[int]] = ..., num_unencodable: _Optional[_Iterable[int]] = ..., num_oversize: _Optional[_Iterable[int]] = ..., health_interval_ns: _Optional[_Iterable[int]] = ...) -> None: ...

class CollectorErrorColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "collector", "message", "unavailable")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    collector: _containers.RepeatedScalarFieldContainer[str]
    message: _containers.RepeatedScalarFieldContainer[str]
    unavailable: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., collector: _Optional[_Iterable[str]] = ..., message: _Optional[_Iterable[str]] = ..., unavailable: _Optional[_Iterable[bool]] = ...) -> None: ...

class ClockSyncColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "offset_ns", "rtt_ns")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    OFFSET_NS_FIELD_NUMBER: _ClassVar[int]
    RTT_NS_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    offset_ns: _containers.RepeatedScalarFieldContainer[int]
    rtt_ns: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., offset_ns: _Optional[_Iterable[int]] = ..., rtt_ns: _Optional[_Iterable[int]] = ...) -> None: ...

class RankInfoColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "world_size", "local_world_size", "node_rank", "run_id", "argv", "torch_version", "backend", "device", "cuda_visible_devices", "device_uuid", "nccl_timing")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    CUDA_VISIBLE_DEVICES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_UUID_FIELD_NUMBER: _ClassVar[int]
    NCCL_TIMING_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    world_size: _containers.RepeatedScalarFieldContainer[int]
    local_world_size: _containers.RepeatedScalarFieldContainer[int]
    node_rank: _containers.RepeatedScalarFieldContainer[int]
    run_id: _containers.RepeatedScalarFieldContainer[str]
    argv: _containers.RepeatedScalarFieldContainer[str]
    torch_version: _containers.RepeatedScalarFieldContainer[str]
    backend: _containers.RepeatedScalarFieldContainer[str]
    device: _containers.RepeatedScalarFieldContainer[str]
    cuda_visible_devices: _containers.RepeatedScalarFieldContainer[str]
    device_uuid: _containers.RepeatedScalarFieldContainer[str]
    nccl_timing: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., world_size: _Optional[_Iterable[int]] = ..., local_world_size: _Optional[_Iterable[int]] = ..., node_rank: _Optional[_Iterable[int]] = ..., run_id: _Optional[_Iterable[str]] = ..., argv: _Optional[_Iterable[str]] = ..., torch_version: _Optional[_Iterable[str]] = ..., backend: _Optional[_Iterable[str]] = ..., device: _Optional[_Iterable[str]] = ..., cuda_visible_devices: _Optional[_Iterable[str]] = ..., device_uuid: _Optional[_Iterable[str]] = ..., nccl_timing: _Optional[_Iterable[bool]] = ...) -> None: ...

class RunEventColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "phase", "run_id", "command", "nnodes", "nproc_per_node", "exit_code", "duration_ns")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    NPROC_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    phase: _containers.RepeatedScalarFieldContainer[str]
    run_id: _containers.RepeatedScalarFieldContainer[str]
    command: _containers.RepeatedScalarFieldContainer[str]
    nnodes: _containers.RepeatedScalarFieldContainer[int]
    nproc_per_node: _containers.RepeatedScalarFieldContainer[int]
    exit_code: _containers.RepeatedScalarFieldContainer[int]
    duration_ns: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., phase: _Optional[_Iterable[str]] = ..., run_id: _Optional[_Iterable[str]] = ..., command: _Optional[_Iterable[str]] = ..., nnodes: _Optional[_Iterable[int]] = ..., nproc_per_node: _Optional[_Iterable[int]] = ..., exit_code: _Optional[_Iterable[int]] = ..., duration_ns: _Optional[_Iterable[int]] = ...) -> None: ...

class ProfileWindowColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "window_id", "trigger", "request_id", "num_steps", "start_ns", "end_ns", "duration_ns", "device", "num_ops", "num_kernels", "trace_path", "trace_bytes", "late", "ok", "error")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    NUM_OPS_FIELD_NUMBER: _ClassVar[int]
    NUM_KERNELS_FIELD_NUMBER: _ClassVar[int]
    TRACE_PATH_FIELD_NUMBER: _ClassVar[int]
    TRACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LATE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    window_id: _containers.RepeatedScalarFieldContainer[str]
    trigger: _containers.RepeatedScalarFieldContainer[str]
    request_id: _containers.RepeatedScalarFieldContainer[str]
    num_steps: _containers.RepeatedScalarFieldContainer[int]
    start_ns: _containers.RepeatedScalarFieldContainer[int]
    end_ns: _containers.RepeatedScalarFieldContainer[int]
    duration_ns: _containers.RepeatedScalarFieldContainer[int]
    device: _containers.RepeatedScalarFieldContainer[str]
    num_ops: _containers.RepeatedScalarFieldContainer[int]
    num_kernels: _containers.RepeatedScalarFieldContainer[int]
    trace_path: _containers.RepeatedScalarFieldContainer[str]
    trace_bytes: _containers.RepeatedScalarFieldContainer[int]
    late: _containers.RepeatedScalarFieldContainer[bool]
    ok: _containers.RepeatedScalarFieldContainer[bool]
    error: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., window_id: _Optional[_Iterable[str]] = ..., trigger: _Optional[_Iterable[str]] = ..., request_id: _Optional[_Iterable[str]] = ..., num_steps: _Optional[_Iterable[int]] = ..., start_ns: _Optional[_Iterable[int]] = ..., end_ns: _Optional[_Iterable[int]] = ..., duration_ns: _Optional[_Iterable[int]] = ..., device: _Optional[_Iterable[str]] = ..., num_ops: _Optional[_Iterable[int]] = ..., num_kernels: _Optional[_Iterable[int]] = ..., trace_path: _Optional[_Iterable[str]] = ..., trace_bytes: _Optional[_Iterable[int]] = ..., late: _Optional[_Iterable[bool]] = ..., ok: _Optional[_Iterable[bool]] = ..., error: _Optional[_Iterable[str]] = ...) -> None: ...

class KernelSummaryColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "window_id", "name", "category", "device", "num_calls", "total_ns", "median_ns", "max_ns", "step_share", "input_shapes")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    NUM_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_NS_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_NS_FIELD_NUMBER: _ClassVar[int]
    STEP_SHARE_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPES_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    window_id: _containers.RepeatedScalarFieldContainer[str]
    name: _containers.RepeatedScalarFieldContainer[str]
    category: _containers.RepeatedScalarFieldContainer[str]
    device: _containers.RepeatedScalarFieldContainer[str]
    num_calls: _containers.RepeatedScalarFieldContainer[int]
    total_ns: _containers.RepeatedScalarFieldContainer[int]
    median_ns: _containers.RepeatedScalarFieldContainer[int]
    max_ns: _containers.RepeatedScalarFieldContainer[int]
    step_share: _containers.RepeatedScalarFieldContainer[float]
    input_shapes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., window_id: _Optional[_Iterable[str]] = ..., name: _Optional[_Iterable[str]] = ..., category: _Optional[_Iterable[str]] = ..., device: _Optional[_Iterable[str]] = ..., num_calls: _Optional[_Iterable[int]] = ..., total_ns: _Optional[_Iterable[int]] = ..., median_ns: _Optional[_Iterable[int]] = ..., max_ns: _Optional[_Iterable[int]] = ..., step_share: _Optional[_Iterable[float]] = ..., input_shapes: _Optional[_Iterable[str]] = ...) -> None: ...

class HangReportColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "stalled_since_ns", "stall_ns", "threshold_ns", "last_step", "pg_name", "seq_id", "op", "input_sizes", "dtype", "enqueue_ns", "last_enqueued_seq", "last_completed_seq", "fr_tail_json", "pg_status_json", "fr_ok", "num_threads")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STALLED_SINCE_NS_FIELD_NUMBER: _ClassVar[int]
    STALL_NS_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    PG_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    INPUT_SIZES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_ENQUEUED_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_SEQ_FIELD_NUMBER: _ClassVar[int]
    FR_TAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    PG_STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    FR_OK_FIELD_NUMBER: _ClassVar[int]
    NUM_THREADS_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    stalled_since_ns: _containers.RepeatedScalarFieldContainer[int]
    stall_ns: _containers.RepeatedScalarFieldContainer[int]
    threshold_ns: _containers.RepeatedScalarFieldContainer[int]
    last_step: _containers.RepeatedScalarFieldContainer[int]
    pg_name: _containers.RepeatedScalarFieldContainer[str]
    seq_id: _containers.RepeatedScalarFieldContainer[int]
    op: _containers.RepeatedScalarFieldContainer[str]
    input_sizes: _containers.RepeatedScalarFieldContainer[str]
    dtype: _containers.RepeatedScalarFieldContainer[str]
    enqueue_ns: _containers.RepeatedScalarFieldContainer[int]
    last_enqueued_seq: _containers.RepeatedScalarFieldContainer[int]
    last_completed_seq: _containers.RepeatedScalarFieldContainer[int]
    fr_tail_json: _containers.RepeatedScalarFieldContainer[str]
    pg_status_json: _containers.RepeatedScalarFieldContainer[str]
    fr_ok: _containers.RepeatedScalarFieldContainer[bool]
    num_threads: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., stalled_since_ns: _Optional[_Iterable[int]] = ..., stall_ns: _Optional[_Iterable[int]] = ..., threshold_ns: _Optional[_Iterable[int]] = ..., last_step: _Optional[_Iterable[int]] = ..., pg_name: _Optional[_Iterable[str]] = ..., seq_id: _Optional[_Iterable[int]] = ..., op: _Optional[_Iterable[str]] = ..., input_sizes: _Optional[_Iterable[str]] = ..., dtype: _Optional[_Iterable[str]] = ..., enqueue_ns: _Optional[_Iterable[int]] = ..., last_enqueued_seq: _Optional[_Iterable[int]] = ..., last_completed_seq: _Optional[_Iterable[int]] = ..., fr_tail_json: _Optional[_Iterable[str]] = ..., pg_status_json: _Optional[_Iterable[str]] = ..., fr_ok: _Optional[_Iterable[bool]] = ..., num_threads: _Optional[_Iterable[int]] = ...) -> None: ...

class StackDumpColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "reason", "origin", "thread_id", "thread_name", "is_main", "frames", "num_frames")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NAME_FIELD_NUMBER: _ClassVar[int]
    IS_MAIN_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    reason: _containers.RepeatedScalarFieldContainer[str]
    origin: _containers.RepeatedScalarFieldContainer[str]
    thread_id: _containers.RepeatedScalarFieldContainer[int]
    thread_name: _containers.RepeatedScalarFieldContainer[str]
    is_main: _containers.RepeatedScalarFieldContainer[bool]
    frames: _containers.RepeatedScalarFieldContainer[str]
    num_frames: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., reason: _Optional[_Iterable[str]] = ..., origin: _Optional[_Iterable[str]] = ..., thread_id: _Optional[_Iterable[int]] = ..., thread_name: _Optional[_Iterable[str]] = ..., is_main: _Optional[_Iterable[bool]] = ..., frames: _Optional[_Iterable[str]] = ..., num_frames: _Optional[_Iterable[int]] = ...) -> None: ...

class ExceptionEventColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "thread_name", "is_main", "exc_type", "message", "frames", "num_frames")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NAME_FIELD_NUMBER: _ClassVar[int]
    IS_MAIN_FIELD_NUMBER: _ClassVar[int]
    EXC_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    thread_name: _containers.RepeatedScalarFieldContainer[str]
    is_main: _containers.RepeatedScalarFieldContainer[bool]
    exc_type: _containers.RepeatedScalarFieldContainer[str]
    message: _containers.RepeatedScalarFieldContainer[str]
    frames: _containers.RepeatedScalarFieldContainer[str]
    num_frames: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., thread_name: _Optional[_Iterable[str]] = ..., is_main: _Optional[_Iterable[bool]] = ..., exc_type: _Optional[_Iterable[str]] = ..., message: _Optional[_Iterable[str]] = ..., frames: _Optional[_Iterable[str]] = ..., num_frames: _Optional[_Iterable[int]] = ...) -> None: ...

class RankExitColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "observer", "exit_code", "exit_code_absent", "signal", "first_failure")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    OBSERVER_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    FIRST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    observer: _containers.RepeatedScalarFieldContainer[str]
    exit_code: _containers.RepeatedScalarFieldContainer[int]
    exit_code_absent: _containers.RepeatedScalarFieldContainer[bool]
    signal: _containers.RepeatedScalarFieldContainer[int]
    first_failure: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., observer: _Optional[_Iterable[str]] = ..., exit_code: _Optional[_Iterable[int]] = ..., exit_code_absent: _Optional[_Iterable[bool]] = ..., signal: _Optional[_Iterable[int]] = ..., first_failure: _Optional[_Iterable[bool]] = ...) -> None: ...

class NumericsSampleColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "loss", "loss_absent", "grad_norm", "grad_norm_absent", "num_grads", "num_nonfinite_grads", "loss_scale", "loss_scale_absent")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    LOSS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    GRAD_NORM_ABSENT_FIELD_NUMBER: _ClassVar[int]
    NUM_GRADS_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_GRADS_FIELD_NUMBER: _ClassVar[int]
    LOSS_SCALE_FIELD_NUMBER: _ClassVar[int]
    LOSS_SCALE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    loss: _containers.RepeatedScalarFieldContainer[float]
    loss_absent: _containers.RepeatedScalarFieldContainer[bool]
    grad_norm: _containers.RepeatedScalarFieldContainer[float]
    grad_norm_absent: _containers.RepeatedScalarFieldContainer[bool]
    num_grads: _containers.RepeatedScalarFieldContainer[int]
    num_nonfinite_grads: _containers.RepeatedScalarFieldContainer[int]
    loss_scale: _containers.RepeatedScalarFieldContainer[float]
    loss_scale_absent: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., loss: _Optional[_Iterable[float]] = ..., loss_absent: _Optional[_Iterable[bool]] = ..., grad_norm: _Optional[_Iterable[float]] = ..., grad_norm_absent: _Optional[_Iterable[bool]] = ..., num_grads: _Optional[_Iterable[int]] = ..., num_nonfinite_grads: _Optional[_Iterable[int]] = ..., loss_scale: _Optional[_Iterable[float]] = ..., loss_scale_absent: _Optional[_Iterable[bool]] = ...) -> None: ...

class NonFiniteColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "where", "module", "tensor", "num_nonfinite", "num_elements", "method", "reproduced", "loss", "loss_absent")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    MODULE_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_FIELD_NUMBER: _ClassVar[int]
    NUM_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REPRODUCED_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    LOSS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    where: _containers.RepeatedScalarFieldContainer[str]
    module: _containers.RepeatedScalarFieldContainer[str]
    tensor: _containers.RepeatedScalarFieldContainer[str]
    num_nonfinite: _containers.RepeatedScalarFieldContainer[int]
    num_elements: _containers.RepeatedScalarFieldContainer[int]
    method: _containers.RepeatedScalarFieldContainer[str]
    reproduced: _containers.RepeatedScalarFieldContainer[bool]
    loss: _containers.RepeatedScalarFieldContainer[float]
    loss_absent: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., where: _Optional[_Iterable[str]] = ..., module: _Optional[_Iterable[str]] = ..., tensor: _Optional[_Iterable[str]] = ..., num_nonfinite: _Optional[_Iterable[int]] = ..., num_elements: _Optional[_Iterable[int]] = ..., method: _Optional[_Iterable[str]] = ..., reproduced: _Optional[_Iterable[bool]] = ..., loss: _Optional[_Iterable[float]] = ..., loss_absent: _Optional[_Iterable[bool]] = ...) -> None: ...

class ParamFingerprintColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "checksum", "dp_group", "dp_size", "num_tensors", "num_params_sampled", "num_params_total")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    DP_GROUP_FIELD_NUMBER: _ClassVar[int]
    DP_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMS_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    NUM_PARAMS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    checksum: _containers.RepeatedScalarFieldContainer[int]
    dp_group: _containers.RepeatedScalarFieldContainer[str]
    dp_size: _containers.RepeatedScalarFieldContainer[int]
    num_tensors: _containers.RepeatedScalarFieldContainer[int]
    num_params_sampled: _containers.RepeatedScalarFieldContainer[int]
    num_params_total: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., checksum: _Optional[_Iterable[int]] = ..., dp_group: _Optional[_Iterable[str]] = ..., dp_size: _Optional[_Iterable[int]] = ..., num_tensors: _Optional[_Iterable[int]] = ..., num_params_sampled: _Optional[_Iterable[int]] = ..., num_params_total: _Optional[_Iterable[int]] = ...) -> None: ...

class BatchStatsColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "reason", "num_tensors", "num_elements", "num_nonfinite", "min_value", "min_value_absent", "max_value", "max_value_absent", "mean_abs", "mean_abs_absent", "sampled")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    NUM_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_FIELD_NUMBER: _ClassVar[int]
    MIN_VALUE_FIELD_NUMBER: _ClassVar[int]
    MIN_VALUE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    MAX_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAX_VALUE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    MEAN_ABS_FIELD_NUMBER: _ClassVar[int]
    MEAN_ABS_ABSENT_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    reason: _containers.RepeatedScalarFieldContainer[str]
    num_tensors: _containers.RepeatedScalarFieldContainer[int]
    num_elements: _containers.RepeatedScalarFieldContainer[int]
    num_nonfinite: _containers.RepeatedScalarFieldContainer[int]
    min_value: _containers.RepeatedScalarFieldContainer[float]
    min_value_absent: _containers.RepeatedScalarFieldContainer[bool]
    max_value: _containers.RepeatedScalarFieldContainer[float]
    max_value_absent: _containers.RepeatedScalarFieldContainer[bool]
    mean_abs: _containers.RepeatedScalarFieldContainer[float]
    mean_abs_absent: _containers.RepeatedScalarFieldContainer[bool]
    sampled: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., reason: _Optional[_Iterable[str]] = ..., num_tensors: _Optional[_Iterable[int]] = ..., num_elements: _Optional[_Iterable[int]] = ..., num_nonfinite: _Optional[_Iterable[int]] = ..., min_value: _Optional[_Iterable[float]] = ..., min_value_absent: _Optional[_Iterable[bool]] = ..., max_value: _Optional[_Iterable[float]] = ..., max_value_absent: _Optional[_Iterable[bool]] = ..., mean_abs: _Optional[_Iterable[float]] = ..., mean_abs_absent: _Optional[_Iterable[bool]] = ..., sampled: _Optional[_Iterable[bool]] = ...) -> None: ...

class ProbeResultEventColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "request_id", "probe", "device", "status", "metric", "value", "value_absent", "unit", "detail", "params_json", "lower_is_better", "duration_ns")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUE_ABSENT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    LOWER_IS_BETTER_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    request_id: _containers.RepeatedScalarFieldContainer[str]
    probe: _containers.RepeatedScalarFieldContainer[str]
    device: _containers.RepeatedScalarFieldContainer[str]
    status: _containers.RepeatedScalarFieldContainer[str]
    metric: _containers.RepeatedScalarFieldContainer[str]
    value: _containers.RepeatedScalarFieldContainer[float]
    value_absent: _containers.RepeatedScalarFieldContainer[bool]
    unit: _containers.RepeatedScalarFieldContainer[str]
    detail: _containers.RepeatedScalarFieldContainer[str]
    params_json: _containers.RepeatedScalarFieldContainer[str]
    lower_is_better: _containers.RepeatedScalarFieldContainer[bool]
    duration_ns: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., request_id: _Optional[_Iterable[str]] = ..., probe: _Optional[_Iterable[str]] = ..., device: _Optional[_Iterable[str]] = ..., status: _Optional[_Iterable[str]] = ..., metric: _Optional[_Iterable[str]] = ..., value: _Optional[_Iterable[float]] = ..., value_absent: _Optional[_Iterable[bool]] = ..., unit: _Optional[_Iterable[str]] = ..., detail: _Optional[_Iterable[str]] = ..., params_json: _Optional[_Iterable[str]] = ..., lower_is_better: _Optional[_Iterable[bool]] = ..., duration_ns: _Optional[_Iterable[int]] = ...) -> None: ...

class ProcessGroupInfoColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pg_name", "pg_desc", "ranks_json", "size", "backend")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PG_NAME_FIELD_NUMBER: _ClassVar[int]
    PG_DESC_FIELD_NUMBER: _ClassVar[int]
    RANKS_JSON_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pg_name: _containers.RepeatedScalarFieldContainer[str]
    pg_desc: _containers.RepeatedScalarFieldContainer[str]
    ranks_json: _containers.RepeatedScalarFieldContainer[str]
    size: _containers.RepeatedScalarFieldContainer[int]
    backend: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pg_name: _Optional[_Iterable[str]] = ..., pg_desc: _Optional[_Iterable[str]] = ..., ranks_json: _Optional[_Iterable[str]] = ..., size: _Optional[_Iterable[int]] = ..., backend: _Optional[_Iterable[str]] = ...) -> None: ...

class HostProcessColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "interval_ns", "cpu_pct", "cmd", "last_cpu")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_PCT_FIELD_NUMBER: _ClassVar[int]
    CMD_FIELD_NUMBER: _ClassVar[int]
    LAST_CPU_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    interval_ns: _containers.RepeatedScalarFieldContainer[int]
    cpu_pct: _containers.RepeatedScalarFieldContainer[float]
    cmd: _containers.RepeatedScalarFieldContainer[str]
    last_cpu: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., interval_ns: _Optional[_Iterable[int]] = ..., cpu_pct: _Optional[_Iterable[float]] = ..., cmd: _Optional[_Iterable[str]] = ..., last_cpu: _Optional[_Iterable[int]] = ...) -> None: ...

class TcpPeerSampleColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "local_ip", "remote_ip", "remote_host", "interval_ns", "num_conns", "bytes_sent", "bytes_acked", "bytes_retrans", "num_retrans", "rtt_us", "min_rtt_us", "send_queue_bytes", "busy_us", "rwnd_limited_us", "sndbuf_limited_us")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOCAL_IP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_IP_FIELD_NUMBER: _ClassVar[int]
    REMOTE_HOST_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    NUM_CONNS_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    BYTES_ACKED_FIELD_NUMBER: _ClassVar[int]
    BYTES_RETRANS_FIELD_NUMBER: _ClassVar[int]
    NUM_RETRANS_FIELD_NUMBER: _ClassVar[int]
    RTT_US_FIELD_NUMBER: _ClassVar[int]
    MIN_RTT_US_FIELD_NUMBER: _ClassVar[int]
    SEND_QUEUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BUSY_US_FIELD_NUMBER: _ClassVar[int]
    RWND_LIMITED_US_FIELD_NUMBER: _ClassVar[int]
    SNDBUF_LIMITED_US_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    local_ip: _containers.RepeatedScalarFieldContainer[str]
    remote_ip: _containers.RepeatedScalarFieldContainer[str]
    remote_host: _containers.RepeatedScalarFieldContainer[str]
    interval_ns: _containers.RepeatedScalarFieldContainer[int]
    num_conns: _containers.RepeatedScalarFieldContainer[int]
    bytes_sent: _containers.RepeatedScalarFieldContainer[int]
    bytes_acked: _containers.RepeatedScalarFieldContainer[int]
    bytes_retrans: _containers.RepeatedScalarFieldContainer[int]
    num_retrans: _containers.RepeatedScalarFieldContainer[int]
    rtt_us: _containers.RepeatedScalarFieldContainer[float]
    min_rtt_us: _containers.RepeatedScalarFieldContainer[float]
    send_queue_bytes: _containers.RepeatedScalarFieldContainer[int]
    busy_us: _containers.RepeatedScalarFieldContainer[int]
    rwnd_limited_us: _containers.RepeatedScalarFieldContainer[int]
    sndbuf_limited_us: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., local_ip: _Optional[_Iterable[str]] = ..., remote_ip: _Optional[_Iterable[str]] = ..., remote_host: _Optional[_Iterable[str]] = ..., interval_ns: _Optional[_Iterable[int]] = ..., num_conns: _Optional[_Iterable[int]] = ..., bytes_sent: _Optional[_Iterable[int]] = ..., bytes_acked: _Optional[_Iterable[int]] = ..., bytes_retrans: _Optional[_Iterable[int]] = ..., num_retrans: _Optional[_Iterable[int]] = ..., rtt_us: _Optional[_Iterable[float]] = ..., min_rtt_us: _Optional[_Iterable[float]] = ..., send_queue_bytes: _Optional[_Iterable[int]] = ..., busy_us: _Optional[_Iterable[int]] = ..., rwnd_limited_us: _Optional[_Iterable[int]] = ..., sndbuf_limited_us: _Optional[_Iterable[int]] = ...) -> None: ...

class NicSampleColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "device", "port", "link_layer", "interval_ns", "rx_bytes_per_s", "tx_bytes_per_s", "num_drops", "num_errors", "num_xmit_wait")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    LINK_LAYER_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NUM_DROPS_FIELD_NUMBER: _ClassVar[int]
    NUM_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NUM_XMIT_WAIT_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    device: _containers.RepeatedScalarFieldContainer[str]
    port: _containers.RepeatedScalarFieldContainer[int]
    link_layer: _containers.RepeatedScalarFieldContainer[str]
    interval_ns: _containers.RepeatedScalarFieldContainer[int]
    rx_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    tx_bytes_per_s: _containers.RepeatedScalarFieldContainer[float]
    num_drops: _containers.RepeatedScalarFieldContainer[int]
    num_errors: _containers.RepeatedScalarFieldContainer[int]
    num_xmit_wait: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., device: _Optional[_Iterable[str]] = ..., port: _Optional[_Iterable[int]] = ..., link_layer: _Optional[_Iterable[str]] = ..., interval_ns: _Optional[_Iterable[int]] = ..., rx_bytes_per_s: _Optional[_Iterable[float]] = ..., tx_bytes_per_s: _Optional[_Iterable[float]] = ..., num_drops: _Optional[_Iterable[int]] = ..., num_errors: _Optional[_Iterable[int]] = ..., num_xmit_wait: _Optional[_Iterable[int]] = ...) -> None: ...

class HookSilentColumns(_message.Message):
    __slots__ = ("ts_ns", "host", "rank", "local_rank", "job_id", "source", "seq", "step", "pid", "hook_source", "silent_ns", "health_interval_ns", "last_health_seq", "last_error")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    HOOK_SOURCE_FIELD_NUMBER: _ClassVar[int]
    SILENT_NS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_INTERVAL_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEALTH_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    host: _containers.RepeatedScalarFieldContainer[str]
    rank: _containers.RepeatedScalarFieldContainer[int]
    local_rank: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[str]
    source: _containers.RepeatedScalarFieldContainer[str]
    seq: _containers.RepeatedScalarFieldContainer[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    pid: _containers.RepeatedScalarFieldContainer[int]
    hook_source: _containers.RepeatedScalarFieldContainer[str]
    silent_ns: _containers.RepeatedScalarFieldContainer[int]
    health_interval_ns: _containers.RepeatedScalarFieldContainer[int]
    last_health_seq: _containers.RepeatedScalarFieldContainer[int]
    last_error: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ts_ns: _Optional[_Iterable[int]] = ..., host: _Optional[_Iterable[str]] = ..., rank: _Optional[_Iterable[int]] = ..., local_rank: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[str]] = ..., source: _Optional[_Iterable[str]] = ..., seq: _Optional[_Iterable[int]] = ..., step: _Optional[_Iterable[int]] = ..., pid: _Optional[_Iterable[int]] = ..., hook_source: _Optional[_Iterable[str]] = ..., silent_ns: _Optional[_Iterable[int]] = ..., health_interval_ns: _Optional[_Iterable[int]] = ..., last_health_seq: _Optional[_Iterable[int]] = ..., last_error: _Optional[_Iterable[str]] = ...) -> None: ...

class EventColumns(_message.Message):
    __slots__ = ("num_rows", "step", "collective", "checkpoint", "gpu", "xid", "host", "proc", "hook_health", "collector_error", "clock", "rank_info", "run", "profile_window", "kernel", "hang", "stack", "exception", "rank_exit", "numerics", "nonfinite", "fingerprint", "batch_stats", "probe_result", "process_group", "host_process", "tcp_peer", "nic", "hook_silent")
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    XID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PROC_FIELD_NUMBER: _ClassVar[int]
    HOOK_HEALTH_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_ERROR_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    RANK_INFO_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    PROFILE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    HANG_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    RANK_EXIT_FIELD_NUMBER: _ClassVar[int]
    NUMERICS_FIELD_NUMBER: _ClassVar[int]
    NONFINITE_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BATCH_STATS_FIELD_NUMBER: _ClassVar[int]
    PROBE_RESULT_FIELD_NUMBER: _ClassVar[int]
    PROCESS_GROUP_FIELD_NUMBER: _ClassVar[int]
    HOST_PROCESS_FIELD_NUMBER: _ClassVar[int]
    TCP_PEER_FIELD_NUMBER: _ClassVar[int]
    NIC_FIELD_NUMBER: _ClassVar[int]
    HOOK_SILENT_FIELD_NUMBER: _ClassVar[int]
    num_rows: int
    step: StepEventColumns
    collective: CollectiveEventColumns
    checkpoint: CheckpointEventColumns
    gpu: GpuSampleColumns
    xid: XidEventColumns
    host: HostSampleColumns
    proc: ProcSampleColumns
    hook_health: HookHealthColumns
    collector_error: CollectorErrorColumns
    clock: ClockSyncColumns
    rank_info: RankInfoColumns
    run: RunEventColumns
    profile_window: ProfileWindowColumns
    kernel: KernelSummaryColumns
    hang: HangReportColumns
    stack: StackDumpColumns
    exception: ExceptionEventColumns
    rank_exit: RankExitColumns
    numerics: NumericsSampleColumns
    nonfinite: NonFiniteColumns
    fingerprint: ParamFingerprintColumns
    batch_stats: BatchStatsColumns
    probe_result: ProbeResultEventColumns
    process_group: ProcessGroupInfoColumns
    host_process: HostProcessColumns
    tcp_peer: TcpPeerSampleColumns
    nic: NicSampleColumns
    hook_silent: HookSilentColumns
    def __init__(self, num_rows: _Optional[int] = ..., step: _Optional[_Union[StepEventColumns, _Mapping]] = ..., collective: _Optional[_Union[CollectiveEventColumns, _Mapping]] = ..., checkpoint: _Optional[_Union[CheckpointEventColumns, _Mapping]] = ..., gpu: _Optional[_Union[GpuSampleColumns, _Mapping]] = ..., xid: _Optional[_Union[XidEventColumns, _Mapping]] = ..., host: _Optional[_Union[HostSampleColumns, _Mapping]] = ..., proc: _Optional[_Union[ProcSampleColumns, _Mapping]] = ..., hook_health: _Optional[_Union[HookHealthColumns, _Mapping]] = ..., collector_error: _Optional[_Union[CollectorErrorColumns, _Mapping]] = ..., clock: _Optional[_Union[ClockSyncColumns, _Mapping]] = ..., rank_info: _Optional[_Union[RankInfoColumns, _Mapping]] = ..., run: _Optional[_Union[RunEventColumns, _Mapping]] = ..., profile_window: _Optional[_Union[ProfileWindowColumns, _Mapping]] = ..., kernel: _Optional[_Union[KernelSummaryColumns, _Mapping]] = ..., hang: _Optional[_Union[HangReportColumns, _Mapping]] = ..., stack: _Optional[_Union[StackDumpColumns, _Mapping]] = ..., exception: _Optional[_Union[ExceptionEventColumns, _Mapping]] = ..., rank_exit: _Optional[_Union[RankExitColumns, _Mapping]] = ..., numerics: _Optional[_Union[NumericsSampleColumns, _Mapping]] = ..., nonfinite: _Optional[_Union[NonFiniteColumns, _Mapping]] = ..., fingerprint: _Optional[_Union[ParamFingerprintColumns, _Mapping]] = ..., batch_stats: _Optional[_Union[BatchStatsColumns, _Mapping]] = ..., probe_result: _Optional[_Union[ProbeResultEventColumns, _Mapping]] = ..., process_group: _Optional[_Union[ProcessGroupInfoColumns, _Mapping]] = ..., host_process: _Optional[_Union[HostProcessColumns, _Mapping]] = ..., tcp_peer: _Optional[_Union[TcpPeerSampleColumns, _Mapping]] = ..., nic: _Optional[_Union[NicSampleColumns, _Mapping]] = ..., hook_silent: _Optional[_Union[HookSilentColumns, _Mapping]] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("schema_version", "sender", "sent_ns", "events", "columns")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    SENT_NS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    schema_version: str
    sender: str
    sent_ns: int
    events: _containers.RepeatedCompositeFieldContainer[Event]
    columns: _containers.RepeatedCompositeFieldContainer[EventColumns]
    def __init__(self, schema_version: _Optional[str] = ..., sender: _Optional[str] = ..., sent_ns: _Optional[int] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., columns: _Optional[_Iterable[_Union[EventColumns, _Mapping]]] = ...) -> None: ...

class IngestReply(_message.Message):
    __slots__ = ("num_accepted", "num_duplicates", "analyzer_time_ns", "schema_version")
    NUM_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    NUM_DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    ANALYZER_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    num_accepted: int
    num_duplicates: int
    analyzer_time_ns: int
    schema_version: str
    def __init__(self, num_accepted: _Optional[int] = ..., num_duplicates: _Optional[int] = ..., analyzer_time_ns: _Optional[int] = ..., schema_version: _Optional[str] = ...) -> None: ...

class TimeRequest(_message.Message):
    __slots__ = ("client_send_ns",)
    CLIENT_SEND_NS_FIELD_NUMBER: _ClassVar[int]
    client_send_ns: int
    def __init__(self, client_send_ns: _Optional[int] = ...) -> None: ...

class TimeReply(_message.Message):
    __slots__ = ("analyzer_time_ns", "schema_version")
    ANALYZER_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    analyzer_time_ns: int
    schema_version: str
    def __init__(self, analyzer_time_ns: _Optional[int] = ..., schema_version: _Optional[str] = ...) -> None: ...

class SummaryRequest(_message.Message):
    __slots__ = ("run_dir",)
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    run_dir: str
    def __init__(self, run_dir: _Optional[str] = ...) -> None: ...

class SummaryReply(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class ProfileRequest(_message.Message):
    __slots__ = ("request_id", "seq", "at_step", "num_steps", "ranks", "requested_ns", "expires_ns")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_STEP_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_NS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    seq: int
    at_step: int
    num_steps: int
    ranks: _containers.RepeatedScalarFieldContainer[int]
    requested_ns: int
    expires_ns: int
    def __init__(self, request_id: _Optional[str] = ..., seq: _Optional[int] = ..., at_step: _Optional[int] = ..., num_steps: _Optional[int] = ..., ranks: _Optional[_Iterable[int]] = ..., requested_ns: _Optional[int] = ..., expires_ns: _Optional[int] = ...) -> None: ...

class ProbeRequest(_message.Message):
    __slots__ = ("request_id", "seq", "probe", "params_json", "host", "device", "rank", "requested_ns", "expires_ns")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_NS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    seq: int
    probe: str
    params_json: str
    host: str
    device: str
    rank: int
    requested_ns: int
    expires_ns: int
    def __init__(self, request_id: _Optional[str] = ..., seq: _Optional[int] = ..., probe: _Optional[str] = ..., params_json: _Optional[str] = ..., host: _Optional[str] = ..., device: _Optional[str] = ..., rank: _Optional[int] = ..., requested_ns: _Optional[int] = ..., expires_ns: _Optional[int] = ...) -> None: ...

class ControlMessage(_message.Message):
    __slots__ = ("profile", "probe")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    profile: ProfileRequest
    probe: ProbeRequest
    def __init__(self, profile: _Optional[_Union[ProfileRequest, _Mapping]] = ..., probe: _Optional[_Union[ProbeRequest, _Mapping]] = ...) -> None: ...

class ControlPoll(_message.Message):
    __slots__ = ("host", "daemon", "after_seq")
    HOST_FIELD_NUMBER: _ClassVar[int]
    DAEMON_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    host: str
    daemon: str
    after_seq: int
    def __init__(self, host: _Optional[str] = ..., daemon: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class ControlReply(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ControlMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ControlMessage, _Mapping]]] = ...) -> None: ...
