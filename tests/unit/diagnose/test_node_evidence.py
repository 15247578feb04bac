"""Node findings corroborated by GPU telemetry, host contention and the culprit's own history.

Real stores: a :class:`Scenario` run plus the daemons' GPU, host and process samples (every
0.5 s on each host), as a node daemon would send them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from diag import schema
from diag.diagnose.detectors import node, node_evidence
from diag.diagnose.features import Features
from diag.findings import Finding
from diag.store.run_store import RunStore
from tests.fakes.events import MS, Source
from tests.fakes.scenarios import Scenario

# Rank 2 (node1, local rank 2) is slow from step 50, by little enough that the detector's own
# confidence (~0.76) leaves room to see what corroboration adds.
SLOW = Scenario(slow_ranks=(2,), onset_step=50, severity=0.1)
SAMPLE_NS = 500 * MS


def _store(tmp_path: Path, sc: Scenario, extra: list[schema.Event]) -> Features:
    store = RunStore.create(tmp_path)
    store.append([*sc.events(), *extra])
    store.flush()
    return Features.from_store(RunStore.open(tmp_path))


def _times(sc: Scenario) -> tuple[list[int], int]:
    """Sample times over the run, and the wall-clock start of the onset step."""
    steps = [e for e in sc.events() if isinstance(e, schema.StepEvent)]
    first, last = min(e.start_ns for e in steps), max(e.end_ns for e in steps)
    onset = min(e.start_ns for e in steps if e.step == sc.onset_step)
    return list(range(first, last + SAMPLE_NS, SAMPLE_NS)), onset


Gpu = Callable[[str, int, int], dict[str, Any]]  # (host, gpu index, ts_ns) -> GpuSample fields


def _gpu(daemon: Source, ts_ns: int, index: int, **fields: Any) -> schema.GpuSample:
    values = {"uuid": f"GPU-{daemon.host}-{index}", "util_pct": 95.0, "sm_clock_mhz": 1980}
    return schema.GpuSample(**daemon.env(ts_ns), gpu_index=index, **{**values, **fields})


def _gpus(sc: Scenario, fields: Gpu) -> list[schema.Event]:
    """Samples of the GPU of every rank: its local rank (Source.env: local_rank = rank % 8)."""
    times, _ = _times(sc)
    hosts = sorted({sc.host(r) for r in range(sc.ranks)})
    daemons = {h: Source(h, -1, pid=50 + i) for i, h in enumerate(hosts)}
    out: list[schema.Event] = []
    for t in times:
        for r in range(sc.ranks):
            host = sc.host(r)
            out.append(_gpu(daemons[host], t, r, **fields(host, r, t)))
    return out


def _healthy(host: str, index: int, t: int) -> dict[str, Any]:
    return {"temp_c": 65.0, "power_w": 600.0}


def _detect(features: Features) -> Finding:
    (found,) = node.detect(features)
    return found


def _metrics(found: Finding) -> list[str]:
    return [e.metric for e in found.evidence]


def test_own_history_and_nothing_else_without_telemetry(tmp_path: Path) -> None:
    found = _detect(_store(tmp_path, SLOW, []))
    assert _metrics(found) == ["compute_ms", "peers_wait_ms", "own_compute_ms", "peers"]
    own = found.evidence[2]
    assert own.subject == "rank 2" and own.reference == pytest.approx(100, rel=0.05)
    assert own.value == pytest.approx(100 + SLOW.extra_ms, rel=0.05)
    assert "(1.1" in own.note  # the ratio, 114 / 100


def test_healthy_telemetry_adds_nothing(tmp_path: Path) -> None:
    bare = _detect(_store(tmp_path / "a", SLOW, []))
    found = _detect(_store(tmp_path / "b", SLOW, _gpus(SLOW, _healthy) + _host(SLOW, 0.0)))
    assert _metrics(found) == _metrics(bare)
    assert found.confidence == bare.confidence


def test_a_throttled_gpu_on_the_culprit_shows(tmp_path: Path) -> None:
    _, onset = _times(SLOW)

    def throttled(host: str, index: int, t: int) -> dict[str, Any]:
        if (host, index) == ("node1", 2) and t >= onset:
            return {"sm_clock_mhz": 1200, "throttle_reasons": "hw_slowdown", "temp_c": 88.0,
                    "power_w": 350.0}  # fmt: skip
        return _healthy(host, index, t)

    bare = _detect(_store(tmp_path / "a", SLOW, []))
    assert bare.confidence < 0.85
    found = _detect(_store(tmp_path / "b", SLOW, _gpus(SLOW, throttled)))
    assert (found.ranks, found.onset_step) == (bare.ranks, bare.onset_step)
    gpu = {e.metric: e for e in found.evidence if e.metric.startswith("gpu_")}
    assert set(gpu) == {"gpu_sm_clock_mhz", "gpu_throttled_share", "gpu_temp_c", "gpu_power_w"}
    assert gpu["gpu_sm_clock_mhz"].subject == "node1 GPU 2 (rank 2)"
    assert (gpu["gpu_sm_clock_mhz"].value, gpu["gpu_sm_clock_mhz"].reference) == (1200, 1980)
    share = gpu["gpu_throttled_share"]
    assert share.value > 0.9 and share.reference == 0 and "hw_slowdown" in share.note
    assert gpu["gpu_temp_c"].value == 88 and gpu["gpu_power_w"].reference == 600
    assert "lower" in gpu["gpu_power_w"].note
    # One source (the GPU's slowdown), however many of its signals agree: +0.05.
    assert found.confidence == pytest.approx(bare.confidence + 0.05)


def test_xid_and_ecc_errors_are_a_second_source(tmp_path: Path) -> None:
    _, onset = _times(SLOW)

    def ecc(host: str, index: int, t: int) -> dict[str, Any]:
        grown = (host, index) == ("node1", 2) and t >= onset
        return {**_healthy(host, index, t), "ecc_sbe_volatile": 7 if grown else 0,
                "ecc_dbe_volatile": 0, "sm_clock_mhz": 1500 if grown else 1980}  # fmt: skip

    daemon = Source("node1", -1, pid=51)
    xid = schema.XidEvent(**daemon.env(onset + 100 * MS), gpu_index=2, xid=79, message="fell off")
    bare = _detect(_store(tmp_path / "a", SLOW, []))
    found = _detect(_store(tmp_path / "b", SLOW, [*_gpus(SLOW, ecc), xid]))
    by_metric = {e.metric: e for e in found.evidence}
    assert by_metric["gpu_xid_events"].value == 1 and "XID 79" in by_metric["gpu_xid_events"].note
    assert by_metric["gpu_ecc_sbe_volatile"].value == 7
    assert "gpu_ecc_dbe_volatile" not in by_metric
    assert found.confidence == pytest.approx(bare.confidence + 0.10)


def test_a_downtrained_pcie_link_and_a_pending_row_remap_show(tmp_path: Path) -> None:
    _, onset = _times(SLOW)

    def degraded(host: str, index: int, t: int) -> dict[str, Any]:
        link = dict(
            pcie_link_width=16, pcie_link_width_max=16, pcie_link_gen=5, pcie_link_gen_max=5
        )
        link.update(row_remap_pending=0, nvlink_crc_flit_errors=10)
        if (host, index) == ("node1", 2) and t >= onset:
            link.update(pcie_link_width=8, pcie_link_gen=3, row_remap_pending=1)
            link.update(nvlink_crc_flit_errors=10 + (t - onset) // MS)  # growing
        elif (host, index) == ("node0", 1):
            link.update(pcie_link_gen=1, util_pct=0.0)  # an idle peer: its generation steps down
        return {**_healthy(host, index, t), **link}

    bare = _detect(_store(tmp_path / "a", SLOW, []))
    found = _detect(_store(tmp_path / "b", SLOW, _gpus(SLOW, degraded)))
    gpu = {e.metric: e for e in found.evidence if e.metric.startswith("gpu_")}
    assert set(gpu) == {
        "gpu_pcie_link_width",
        "gpu_pcie_link_gen",
        "gpu_row_remap_pending",
        "gpu_nvlink_crc_flit_errors",
    }
    assert (gpu["gpu_pcie_link_width"].value, gpu["gpu_pcie_link_width"].reference) == (8, 16)
    assert "x8 of x16" in gpu["gpu_pcie_link_width"].note
    assert (gpu["gpu_pcie_link_gen"].value, gpu["gpu_pcie_link_gen"].reference) == (3, 5)
    assert gpu["gpu_row_remap_pending"].value > 0.5 and gpu["gpu_row_remap_pending"].reference == 0
    assert (
        gpu["gpu_nvlink_crc_flit_errors"].value > 0
        and gpu["gpu_nvlink_crc_flit_errors"].reference == 0
    )
    # two sources: the GPU's slowdown (its link) and its errors
    assert found.confidence == pytest.approx(bare.confidence + 0.10)


def test_an_idle_link_at_a_lower_generation_is_not_evidence(tmp_path: Path) -> None:
    def idle_link(host: str, index: int, t: int) -> dict[str, Any]:
        low = (host, index) == ("node1", 2)
        return {**_healthy(host, index, t), "pcie_link_gen": 1 if low else 5,
                "pcie_link_gen_max": 5, "util_pct": 0.0 if low else 95.0}  # fmt: skip

    found = _detect(_store(tmp_path, SLOW, _gpus(SLOW, idle_link)))
    assert not [e for e in found.evidence if e.metric.startswith("gpu_pcie")]


def _host(sc: Scenario, extra_cores: float, *, ranks_pct: float = 100.0) -> list[schema.Event]:
    """Host and rank-process samples of every host: 16 CPUs, each rank using ``ranks_pct``,
    0.5 cores of other processes, ``extra_cores`` more on node1 from the onset."""
    times, onset = _times(sc)
    out: list[schema.Event] = []
    for i, host in enumerate(sorted({sc.host(r) for r in range(sc.ranks)})):
        daemon = Source(host, -1, pid=60 + i)
        ranks = [r for r in range(sc.ranks) if sc.host(r) == host]
        for t in times:
            others = 0.5 + (extra_cores if host == "node1" and t >= onset else 0.0)
            busy = len(ranks) * ranks_pct / 100 + others
            out.append(schema.HostSample(**daemon.env(t), interval_ns=SAMPLE_NS, num_cpus=16,
                                         cpu_busy_pct=100 * busy / 16))  # fmt: skip
            out.extend(
                schema.ProcSample(**{**daemon.env(t), "rank": r, "local_rank": r % 8},
                                  pid=1000 + r, interval_ns=SAMPLE_NS, cpu_pct=ranks_pct)
                for r in ranks
            )  # fmt: skip
    return out


def test_host_contention_shows(tmp_path: Path) -> None:
    bare = _detect(_store(tmp_path / "a", SLOW, []))
    found = _detect(_store(tmp_path / "b", SLOW, _host(SLOW, 6.0)))
    host = [e for e in found.evidence if e.metric == "host_other_cpu_cores"]
    assert [e.subject for e in host] == ["node1", "node1"]
    before, elsewhere = host
    assert before.value == pytest.approx(6.5) and before.reference == pytest.approx(0.5)
    assert "before onset" in before.note
    assert elsewhere.reference == pytest.approx(0.5) and "other hosts" in elsewhere.note
    assert found.confidence == pytest.approx(bare.confidence + 0.05)


def test_steady_load_on_every_host_is_no_contention(tmp_path: Path) -> None:
    # Busy ranks (data-loader workers count as "others") but the same before and on every host.
    found = _detect(_store(tmp_path, SLOW, _host(SLOW, 0.0, ranks_pct=300.0)))
    assert "host_other_cpu_cores" not in _metrics(found)


def test_cpu_ranks_get_no_gpu_evidence(tmp_path: Path) -> None:
    _, onset = _times(SLOW)

    def throttled(host: str, index: int, t: int) -> dict[str, Any]:
        slow = (host, index) == ("node1", 2) and t >= onset
        return {"sm_clock_mhz": 1200} if slow else {}

    infos = [
        schema.RankInfo(**Source(SLOW.host(r), r, pid=1000 + r).env(0), pid=1000 + r, device="cpu")
        for r in range(SLOW.ranks)
    ]
    found = _detect(_store(tmp_path, SLOW, [*_gpus(SLOW, throttled), *infos]))
    assert not [m for m in _metrics(found) if m.startswith("gpu_")]


def test_rank_info_device_maps_the_gpu(tmp_path: Path) -> None:
    # Each rank announces cuda:<its index on the host>; rank 2 uses node1's GPU 0.
    infos = [
        schema.RankInfo(**Source(SLOW.host(r), r, pid=1000 + r).env(0), pid=1000 + r,
                        device=f"cuda:{r % 2}")
        for r in range(SLOW.ranks)
    ]  # fmt: skip
    _, onset = _times(SLOW)
    gpus = []
    daemons = {h: Source(h, -1, pid=70) for h in ("node0", "node1")}
    for t in _times(SLOW)[0]:
        for r in range(SLOW.ranks):
            slow = r == 2 and t >= onset
            gpus.append(_gpu(daemons[SLOW.host(r)], t, r % 2, sm_clock_mhz=1000 if slow else 1980))
    features = _store(tmp_path, SLOW, [*gpus, *infos])
    assert node_evidence.gpu_of_ranks(features) == {
        0: ("node0", 0), 1: ("node0", 1), 2: ("node1", 0), 3: ("node1", 1)
    }  # fmt: skip
    clock = [e for e in _detect(features).evidence if e.metric == "gpu_sm_clock_mhz"]
    assert [(e.subject, e.value) for e in clock] == [("node1 GPU 0 (rank 2)", 1000)]


def test_the_device_uuid_maps_the_gpu_whatever_cuda_visible_devices_says(tmp_path: Path) -> None:
    # CUDA_VISIBLE_DEVICES=1,0 on each host: every rank's cuda:N is NVML's GPU 1 - N; only the
    # UUID (torch writes it bare, NVML with "GPU-") says which. Rank 2's GPU (node1's 1) slows.
    infos = [
        schema.RankInfo(**Source(SLOW.host(r), r, pid=1000 + r).env(0), pid=1000 + r,
                        device=f"cuda:{r % 2}", cuda_visible_devices="1,0",
                        device_uuid=f"{SLOW.host(r)}-{1 - r % 2}")
        for r in range(SLOW.ranks)
    ]  # fmt: skip
    times, onset = _times(SLOW)
    daemons = {h: Source(h, -1, pid=70) for h in ("node0", "node1")}
    gpus = [
        _gpu(daemons[h], t, i, sm_clock_mhz=1000 if (h, i) == ("node1", 1) and t >= onset else 1980)
        for t in times
        for h in daemons
        for i in (0, 1)
    ]
    features = _store(tmp_path, SLOW, [*gpus, *infos])
    assert node_evidence.gpu_of_ranks(features) == {
        0: ("node0", 1), 1: ("node0", 0), 2: ("node1", 1), 3: ("node1", 0)
    }  # fmt: skip
    clock = [e for e in _detect(features).evidence if e.metric == "gpu_sm_clock_mhz"]
    assert [(e.subject, e.value) for e in clock] == [("node1 GPU 1 (rank 2)", 1000)]


def test_slow_from_the_start_gets_gpu_evidence_but_no_history(tmp_path: Path) -> None:
    sc = Scenario(slow_ranks=(3,), onset_step=0, severity=0.2)

    def slow_clock(host: str, index: int, t: int) -> dict[str, Any]:
        return {"sm_clock_mhz": 1400 if (host, index) == ("node1", 3) else 1980}

    found = _detect(_store(tmp_path, sc, _gpus(sc, slow_clock)))
    assert (found.cause, found.onset_step) == ("node", None)
    assert _metrics(found) == ["compute_ms", "peers_wait_ms", "peers", "gpu_sm_clock_mhz"]


def test_slow_host_compares_its_gpus_with_the_other_hosts(tmp_path: Path) -> None:
    sc = Scenario(slow_ranks=(2, 3), onset_step=50, severity=0.35)
    _, onset = _times(sc)

    def hot(host: str, index: int, t: int) -> dict[str, Any]:
        return {"temp_c": 90.0 if host == "node1" and t >= onset else 60.0}

    found = _detect(_store(tmp_path, sc, _gpus(sc, hot)))
    assert found.id == "node-node1"
    assert [m for m in _metrics(found) if m != "gpu_temp_c"] == [
        "compute_ms", "compute_ms", "peers_wait_ms", "own_compute_ms", "own_compute_ms", "peers"
    ]  # fmt: skip
    (temp,) = [e for e in found.evidence if e.metric == "gpu_temp_c"]
    assert temp.subject == "node1 GPUs 2, 3 (ranks 2, 3)" and temp.value == 90


def test_missing_or_partial_telemetry_never_fails(tmp_path: Path) -> None:
    def no_values(host: str, index: int, t: int) -> dict[str, Any]:
        return {"sm_clock_mhz": None, "util_pct": None, "temp_c": None}

    found = _detect(_store(tmp_path, SLOW, _gpus(SLOW, no_values)))
    assert not [m for m in _metrics(found) if m.startswith("gpu_")]


def test_confidence_is_capped(tmp_path: Path) -> None:
    sc = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2)
    _, onset = _times(sc)

    def slow_clock(host: str, index: int, t: int) -> dict[str, Any]:
        return {"sm_clock_mhz": 1200 if (host, index) == ("node1", 2) and t >= onset else 1980}

    found = _detect(_store(tmp_path, sc, [*_gpus(sc, slow_clock), *_host(sc, 6.0)]))
    assert {"gpu_sm_clock_mhz", "host_other_cpu_cores"} <= set(_metrics(found))
    assert found.confidence == 0.99
