"""A GPU driver the daemon found wedged (its NVML calls past their deadline) is a critical
``node`` finding naming the host and its ranks: ``hang`` when they stopped stepping after it."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.diagnose.detectors import gpu_wedged
from diag.diagnose.features import Features
from diag.diagnose.triage import triage
from diag.gpu import deadline
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source


def _run(tmp_path: Path, *, wedge_at_step: int, steps: int = 20) -> RunStore:
    ranks = {r: Source(host=f"node{r // 2}", rank=r) for r in range(4)}
    daemon = Source(host="node1")
    events: list[schema.Event] = [src.step(s) for s in range(steps) for src in ranks.values()]
    ts = T0 + wedge_at_step * 200 * MS
    for k in range(3):
        events.append(
            schema.CollectorError(
                **daemon.env(ts + k * 1000 * MS),
                collector="gpu",
                message="GpuWedged: GPU driver wedged: read (NVML device queries) did not "
                "return within 2 s",
            )
        )
    events.append(  # another collector's failure is not a GPU finding
        schema.CollectorError(**Source(host="node0").env(ts), collector="host", message="EIO")
    )
    store = RunStore.create(tmp_path)
    store.append(events)
    store.flush()
    return RunStore.open(tmp_path)


def test_a_wedged_driver_whose_ranks_stopped_is_a_critical_node_hang(tmp_path: Path) -> None:
    store = _run(tmp_path, wedge_at_step=30)  # after the last step: nothing ran since
    (found,) = gpu_wedged.detect(Features.from_store(store))
    assert (found.cause, found.symptom, found.severity) == ("node", "hang", "critical")
    assert found.hosts == ("node1",) and found.ranks == (2, 3)
    (ev,) = found.evidence
    assert ev.metric == "gpu_driver_wedged" and ev.value == 3 and "did not return" in ev.note
    assert any(f.id == found.id for f in triage(store).findings)


def test_ranks_that_go_on_stepping_make_it_a_slowdown(tmp_path: Path) -> None:
    (found,) = gpu_wedged.detect(Features.from_store(_run(tmp_path, wedge_at_step=5)))
    assert found.symptom == "slowdown" and found.severity == "critical"


def test_the_detector_reads_the_word_the_deadline_writes(tmp_path: Path) -> None:
    assert gpu_wedged.WEDGED == deadline.WEDGED
    store = RunStore.create(tmp_path)
    store.append([Source(rank=0).step(0)])
    store.flush()
    assert gpu_wedged.detect(Features.from_store(RunStore.open(tmp_path))) == []
