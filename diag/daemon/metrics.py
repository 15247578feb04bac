"""The node daemon's Prometheus metrics: what its ranks and GPUs do, under names dashboards know.

Fed by the daemon with every event that passes through it (the hooks' batches and its own
collector samples: :meth:`NodeMetrics.observe`), served by ``diag daemon --metrics-port``
(:func:`diag.transport.metrics_http.serve_metrics`). Nothing here runs in the training job.

Per rank (labels ``job_id``, ``host``, ``rank``; not ``job``, which Prometheus gives the scrape
job), histograms in seconds of each step's phases, from
its :class:`~diag.schema.StepEvent`: ``diag_step_seconds``, ``diag_compute_seconds``,
``diag_collective_wait_seconds``, ``diag_data_wait_seconds``, ``diag_checkpoint_seconds``,
``diag_cpu_wait_seconds``; gauges ``diag_rank_step`` (the newest step) and, from the hook's
:class:`~diag.schema.HookHealth`, ``diag_hook_events_emitted_total``,
``diag_hook_events_sent_total``, ``diag_hook_errors_total`` and
``diag_hook_events_dropped_total`` (label ``reason``: ``queue``, ``fr``, ``undelivered``,
``unencodable``, ``oversize``, ``other``), ``diag_hook_gil_pauses_total`` and
``diag_hook_gil_paused_seconds_total`` (the hook thread's pacing: pauses it made so that the
training thread got the GIL back): counters the hook keeps itself (they restart with its
process, as counters do).

Per GPU, the latest :class:`~diag.schema.GpuSample` under the DCGM exporter's names and labels
(``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``), so that a dashboard built on
``dcgm-exporter`` reads them unchanged: ``DCGM_FI_DEV_SM_CLOCK``, ``DCGM_FI_DEV_MEM_CLOCK`` (MHz),
``DCGM_FI_DEV_GPU_TEMP`` (C), ``DCGM_FI_DEV_POWER_USAGE``, ``DCGM_FI_DEV_POWER_MGMT_LIMIT`` (W),
``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_MEM_COPY_UTIL`` (%), ``DCGM_FI_DEV_FB_USED``,
``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` (the NVML mask),
``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL``, ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``,
``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``, ``DCGM_FI_DEV_PCIE_TX_THROUGHPUT``,
``DCGM_FI_DEV_PCIE_RX_THROUGHPUT`` (KB/s), ``DCGM_FI_DEV_PCIE_LINK_GEN``,
``DCGM_FI_DEV_PCIE_LINK_WIDTH``, ``DCGM_FI_DEV_PCIE_MAX_LINK_GEN``,
``DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH``, ``DCGM_FI_DEV_RETIRED_SBE``, ``DCGM_FI_DEV_RETIRED_DBE``,
``DCGM_FI_DEV_RETIRED_PENDING``, ``DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS``,
``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS``, ``DCGM_FI_DEV_ROW_REMAP_PENDING``,
``DCGM_FI_DEV_ROW_REMAP_FAILURE``, ``DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL``,
``DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL``, ``DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL``,
``DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL`` and ``DCGM_FI_DEV_XID_ERRORS`` (the last XID of
the device, as DCGM reports it). A field the device did not report is left out, not zero.

Node level: ``diag_node_cpu_busy_percent``, ``diag_node_load1`` and ``diag_node_procs_running``
from :class:`~diag.schema.HostSample`; the daemon's node-side collective summaries
(:mod:`diag.daemon.collsum`, label ``Hostname``): ``diag_daemon_collectives_summarizing`` (1 while
it ships summaries), ``diag_daemon_collectives_summarized_total`` (raw rows summed),
``diag_daemon_collective_summaries_total``, ``diag_daemon_collectives_retained`` (raw rows held
for a fetch) and ``..._retained_bytes``, ``diag_daemon_collectives_fetched_total`` and
``diag_daemon_collectives_evicted_total`` (rows that aged out of the ring unasked: its turnover;
a fetch of older steps finds nothing). Label values are the events' own text, bounded in length.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from diag import schema
from diag.daemon.collsum import SummaryStats
from diag.transport.metrics_http import DROP_REASONS, label

#: step-phase buckets, seconds: 1 ms to 2 min
BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
)  # fmt: skip
RANK_LABELS = ("job_id", "host", "rank")
GPU_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")

#: (metric, help, StepEvent field in ns)
PHASES: tuple[tuple[str, str, str], ...] = (
    ("diag_step_seconds", "Step duration of the rank", "duration_ns"),
    ("diag_compute_seconds", "Step minus collective wait, data wait and checkpoint", "compute_ns"),
    ("diag_collective_wait_seconds", "Time blocked on collectives", "collective_wait_ns"),
    ("diag_data_wait_seconds", "Time waiting for the data loader", "data_wait_ns"),
    ("diag_checkpoint_seconds", "Time in checkpoint saves and loads", "checkpoint_ns"),
    ("diag_cpu_wait_seconds", "Run-queue delay of the training thread", "cpu_wait_ns"),
)

#: (DCGM exporter name, help, value of a GpuSample or None)
DCGM: tuple[tuple[str, str, Callable[[schema.GpuSample], float | None]], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.mem_clock_mhz),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temp_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", lambda g: g.power_limit_w),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.util_pct),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g.mem_util_pct),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
     lambda g: None if g.mem_used_bytes is None else g.mem_used_bytes / 2**20),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
     lambda g: None if g.mem_used_bytes is None or g.mem_total_bytes is None
     else (g.mem_total_bytes - g.mem_used_bytes) / 2**20),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Throttle reasons (NVML bit mask).",
     lambda g: g.throttle_reasons_mask),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.",
     lambda g: g.ecc_sbe_volatile),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
     lambda g: g.ecc_dbe_volatile),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.",
     lambda g: g.pcie_replay_count),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "PCIe Tx throughput (in KB/s).", lambda g: g.pcie_tx_kbps),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "PCIe Rx throughput (in KB/s).", lambda g: g.pcie_rx_kbps),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe current link generation.", lambda g: g.pcie_link_gen),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe current link width.", lambda g: g.pcie_link_width),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "PCIe max link generation.",
     lambda g: g.pcie_link_gen_max),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "PCIe max link width.", lambda g: g.pcie_link_width_max),
    ("DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors.",
     lambda g: g.retired_pages_sbe),
    ("DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors.",
     lambda g: g.retired_pages_dbe),
    ("DCGM_FI_DEV_RETIRED_PENDING", "Total number of pages pending retirement.",
     lambda g: g.retired_pages_pending),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors.",
     lambda g: g.remapped_rows_correctable),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
     "Number of remapped rows for uncorrectable errors.",
     lambda g: g.remapped_rows_uncorrectable),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether remapping of rows is pending (1) or not (0).",
     lambda g: g.row_remap_pending),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed (1) or not (0).",
     lambda g: g.row_remap_failure),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
     "Total number of NVLink flow-control CRC errors.", lambda g: g.nvlink_crc_flit_errors),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors.",
     lambda g: g.nvlink_crc_data_errors),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.",
     lambda g: g.nvlink_replay_errors),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.",
     lambda g: g.nvlink_recovery_errors),
)  # fmt: skip


class _Latest:
    """A collector of gauges from the newest values the daemon saw (read at scrape time)."""

    def __init__(self, owner: NodeMetrics) -> None:
        self._owner = owner

    def describe(self) -> list[Metric]:
        return []  # unchecked: the families depend on what the node has

    def collect(self) -> Iterator[Metric]:
        o = self._owner
        with o.lock:
            steps = dict(o.last_step)
            health = dict(o.health)
            gpus = dict(o.gpus)
            xids = dict(o.xids)
            host = o.host_sample
            summaries = o.summary_stats
        fam = GaugeMetricFamily("diag_rank_step", "Newest step of the rank", labels=RANK_LABELS)
        for key, step in sorted(steps.items()):
            fam.add_metric(key, step)
        yield fam
        yield from _health_families(health)
        yield from _gpu_families(gpus, xids)
        if host is not None:
            labels = ("Hostname",)
            for name, help_, value in (
                ("diag_node_cpu_busy_percent", "CPU busy over all cores (%)", host.cpu_busy_pct),
                ("diag_node_load1", "Load average over 1 minute", host.load_1m),
                ("diag_node_procs_running", "Runnable processes", host.num_procs_running),
            ):
                fam = GaugeMetricFamily(name, help_, labels=labels)
                fam.add_metric((label(host.host),), float(value))
                yield fam
        if summaries is not None:
            yield from _summary_families(o.hostname, summaries())


def _summary_families(hostname: str, st: SummaryStats) -> Iterator[Metric]:
    key = (label(hostname),)
    for name, help_, value in (
        ("diag_daemon_collectives_summarizing", "1 while the daemon ships summaries", st.active),
        ("diag_daemon_collectives_retained", "Summed raw collectives held for a fetch",
         st.num_retained),
        ("diag_daemon_collectives_retained_bytes", "Their size, encoded", st.retained_bytes),
    ):  # fmt: skip
        gauge = GaugeMetricFamily(name, help_, labels=("Hostname",))
        gauge.add_metric(key, float(value))
        yield gauge
    for name, help_, value in (
        ("diag_daemon_collectives_summarized", "Raw collectives shipped as summaries",
         st.num_summarized),
        ("diag_daemon_collective_summaries", "Collective summaries shipped", st.num_summaries),
        ("diag_daemon_collectives_fetched", "Raw collectives shipped again on request",
         st.num_fetched),
        ("diag_daemon_collectives_evicted", "Raw collectives aged out of the ring unfetched",
         st.num_evicted),
    ):  # fmt: skip
        counter = CounterMetricFamily(name, help_, labels=("Hostname",))
        counter.add_metric(key, float(value))
        yield counter


def _health_families(health: dict[tuple[str, str, str], schema.HookHealth]) -> Iterator[Metric]:
    emitted = CounterMetricFamily(
        "diag_hook_events_emitted", "Events the rank's hook emitted", labels=RANK_LABELS
    )
    sent = CounterMetricFamily("diag_hook_events_sent", "Events the hook sent", labels=RANK_LABELS)
    errors = CounterMetricFamily(
        "diag_hook_errors", "diag's own failures counted in the hook", labels=RANK_LABELS
    )
    dropped = CounterMetricFamily(
        "diag_hook_events_dropped",
        "Events the hook dropped, by reason",
        labels=(*RANK_LABELS, "reason"),
    )
    pauses = CounterMetricFamily(
        "diag_hook_gil_pauses",
        "Pauses the hook thread made so that the training thread got the GIL back",
        labels=RANK_LABELS,
    )
    paused = CounterMetricFamily(
        "diag_hook_gil_paused_seconds", "Time the hook thread spent in those pauses",
        labels=RANK_LABELS,
    )  # fmt: skip
    for key, h in sorted(health.items()):
        pauses.add_metric(key, h.num_gil_pauses)
        paused.add_metric(key, h.gil_paused_ns / 1e9)
        emitted.add_metric(key, h.num_emitted)
        sent.add_metric(key, h.num_sent)
        errors.add_metric(key, h.num_errors)
        named = 0
        for reason, field in DROP_REASONS:
            value = int(getattr(h, field))
            named += value
            dropped.add_metric((*key, reason), value)
        dropped.add_metric((*key, "other"), max(h.num_dropped - named, 0))
    yield from (emitted, sent, errors, dropped, pauses, paused)


def _gpu_families(
    gpus: dict[tuple[str, int], schema.GpuSample], xids: dict[tuple[str, int], int]
) -> Iterator[Metric]:
    def labels(g: schema.GpuSample) -> tuple[str, ...]:
        return (str(g.gpu_index), label(g.uuid), f"nvidia{g.gpu_index}", label(g.name),
                label(g.host))  # fmt: skip

    for name, help_, get in DCGM:
        fam = GaugeMetricFamily(name, help_, labels=GPU_LABELS)
        for _, g in sorted(gpus.items()):
            value = get(g)
            if value is not None:
                fam.add_metric(labels(g), float(value))
        yield fam
    fam = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.",
                            labels=GPU_LABELS)  # fmt: skip
    for key, g in sorted(gpus.items()):
        fam.add_metric(labels(g), float(xids.get(key, 0)))
    yield fam


class NodeMetrics:
    """The daemon's registry: histograms per rank and the newest samples (thread-safe)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.lock = threading.Lock()
        self.last_step: dict[tuple[str, str, str], int] = {}
        self.health: dict[tuple[str, str, str], schema.HookHealth] = {}
        self.gpus: dict[tuple[str, int], schema.GpuSample] = {}
        self.xids: dict[tuple[str, int], int] = {}
        self.host_sample: schema.HostSample | None = None
        #: the daemon's summarizer counters, read at scrape time (set by the daemon)
        self.summary_stats: Callable[[], SummaryStats] | None = None
        self.hostname = ""
        self._phases: list[tuple[Histogram, str]] = [
            (Histogram(name, help_, RANK_LABELS, buckets=BUCKETS, registry=self.registry), field)
            for name, help_, field in PHASES
        ]
        self.registry.register(_Latest(self))

    def observe(self, events: Iterable[schema.Event]) -> None:
        """Take in events passing through the daemon (any kinds; the ones above are read)."""
        for ev in events:
            if isinstance(ev, schema.StepEvent):
                self._step(ev)
            elif isinstance(ev, schema.GpuSample):
                with self.lock:
                    self.gpus[(ev.host, ev.gpu_index)] = ev
            elif isinstance(ev, schema.HookHealth):
                with self.lock:
                    self.health[_rank_key(ev)] = ev
            elif isinstance(ev, schema.XidEvent):
                with self.lock:
                    self.xids[(ev.host, ev.gpu_index)] = ev.xid
            elif isinstance(ev, schema.HostSample):
                with self.lock:
                    self.host_sample = ev

    def _step(self, ev: schema.StepEvent) -> None:
        key = _rank_key(ev)
        for hist, field in self._phases:
            value = getattr(ev, field)
            if value >= 0:
                hist.labels(*key).observe(value / 1e9)
        with self.lock:
            if ev.step > self.last_step.get(key, -1):
                self.last_step[key] = ev.step

    def text(self) -> bytes:
        """The exposition text of everything (what a scrape gets)."""
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))


def _rank_key(ev: Any) -> tuple[str, str, str]:
    return (label(ev.job_id), label(ev.host), str(ev.rank))
