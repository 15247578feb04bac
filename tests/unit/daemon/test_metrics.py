"""The node daemon's Prometheus metrics: served for real on 127.0.0.1:0 and scraped over HTTP."""

from __future__ import annotations

import dataclasses

import pytest

from diag import schema
from diag.daemon.metrics import DCGM, NodeMetrics
from diag.errors import TransportError
from diag.transport.metrics_http import serve_metrics
from tests.fakes.events import MS, T0, Source
from tests.fakes.scrape import scrape


def _health(src: Source, **kw: int) -> schema.HookHealth:
    return schema.HookHealth(**src.env(T0), pid=100, **kw)


def test_steps_gpus_and_health_are_scraped_with_their_labels() -> None:
    metrics = NodeMetrics()
    r0, r1, daemon = Source("n0", 0), Source("n0", 1), Source("n0")
    metrics.observe([r0.step(s, compute_ms=100, wait_ms=20) for s in range(5)])
    metrics.observe([r1.step(s, compute_ms=150, wait_ms=2) for s in range(7)])
    metrics.observe([daemon.gpu(T0, 0, temp_c=71.0, power_w=350.5, mem_used_bytes=2 * 2**30,
                                mem_total_bytes=80 * 2**30, throttle_reasons_mask=4,
                                pcie_link_width=8, pcie_link_width_max=16,
                                row_remap_pending=1)])  # fmt: skip
    metrics.observe([schema.XidEvent(**daemon.env(T0), gpu_index=0, xid=79)])
    metrics.observe([_health(r1, num_emitted=100, num_sent=90, num_dropped=10,
                             num_queue_dropped=6, num_fr_dropped=3, num_gil_pauses=40,
                             gil_paused_ns=120 * MS)])  # fmt: skip
    server = serve_metrics(metrics.registry, "127.0.0.1", 0)
    try:
        assert server.port > 0 and server.url.startswith("http://127.0.0.1:")
        got = scrape(server.url)
    finally:
        server.close()

    counts = {lab["rank"]: v for lab, v in got["diag_step_seconds_count"]}
    assert counts == {"0": 5, "1": 7}
    sums = {lab["rank"]: v for lab, v in got["diag_compute_seconds_sum"]}
    assert sums["0"] == pytest.approx(0.5) and sums["1"] == pytest.approx(1.05)
    labels = got["diag_step_seconds_count"][0][0]
    assert set(labels) == {"job_id", "host", "rank"} and labels["job_id"] == "job1"
    assert {lab["rank"]: v for lab, v in got["diag_rank_step"]} == {"0": 4, "1": 6}

    names = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
             "DCGM_FI_DEV_XID_ERRORS")  # fmt: skip
    gpu = {name: got[name] for name in names}
    for name, series in gpu.items():
        assert len(series) == 1, name
        lab = series[0][0]
        assert lab == {"gpu": "0", "UUID": "GPU-0", "device": "nvidia0", "modelName": "H100",
                       "Hostname": "n0"}, name  # fmt: skip
    assert gpu["DCGM_FI_DEV_GPU_TEMP"][0][1] == 71.0
    assert gpu["DCGM_FI_DEV_POWER_USAGE"][0][1] == 350.5
    assert gpu["DCGM_FI_DEV_SM_CLOCK"][0][1] == 1980
    assert gpu["DCGM_FI_DEV_XID_ERRORS"][0][1] == 79
    assert got["DCGM_FI_DEV_FB_USED"][0][1] == 2048
    assert got["DCGM_FI_DEV_FB_FREE"][0][1] == 78 * 1024
    assert got["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"][0][1] == 4
    assert got["DCGM_FI_DEV_PCIE_LINK_WIDTH"][0][1] == 8
    assert got["DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"][0][1] == 16
    assert got["DCGM_FI_DEV_ROW_REMAP_PENDING"][0][1] == 1
    # a field the device did not report is absent, not zero
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" not in got
    assert "DCGM_FI_DEV_RETIRED_DBE" not in got

    drops = {
        lab["reason"]: v for lab, v in got["diag_hook_events_dropped_total"] if lab["rank"] == "1"
    }
    assert drops == {"queue": 6, "fr": 3, "undelivered": 0, "unencodable": 0, "oversize": 0,
                     "other": 1}  # fmt: skip
    assert got["diag_hook_events_emitted_total"] == [
        ({"job_id": "job1", "host": "n0", "rank": "1"}, 100)
    ]
    rank1 = {"job_id": "job1", "host": "n0", "rank": "1"}
    assert got["diag_hook_gil_pauses_total"] == [(rank1, 40)]
    assert got["diag_hook_gil_paused_seconds_total"] == [(rank1, pytest.approx(0.12))]


def test_the_dcgm_names_are_the_exporters() -> None:
    names = {name for name, _, _ in DCGM}
    assert all(n.startswith("DCGM_FI_DEV_") for n in names)
    assert {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_PCIE_LINK_WIDTH",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_RETIRED_PENDING",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"} <= names  # fmt: skip
    assert len(names) == len(DCGM)  # one series family per name


def test_a_port_in_use_is_one_line() -> None:
    metrics = NodeMetrics()
    first = serve_metrics(metrics.registry, "127.0.0.1", 0)
    try:
        with pytest.raises(TransportError, match=f"cannot serve metrics on 127.0.0.1:{first.port}"):
            serve_metrics(metrics.registry, "127.0.0.1", first.port)
    finally:
        first.close()


def test_a_negative_step_time_is_not_observed() -> None:
    metrics = NodeMetrics()
    src = Source("n0", 0)
    step = src.step(0)
    metrics.observe([dataclasses.replace(step, cpu_wait_ns=-1)])
    text = metrics.text().decode()
    assert 'diag_cpu_wait_seconds_count{host="n0",job_id="job1",rank="0"}' not in text
    assert 'diag_step_seconds_count{host="n0",job_id="job1",rank="0"} 1.0' in text
