"""Feature frames from a real store: columns, units, uniqueness; the shared persistence helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diag.diagnose.features import (
    CKPT_COLUMNS,
    STEP_COLUMNS,
    Features,
    peer_median,
    persistence,
    persistent_columns,
)
from tests.fakes.scenarios import Scenario


def test_steps_and_ckpt_frames(tmp_path: Path) -> None:
    sc = Scenario(ranks=2, steps=10, ckpt_every=5, ckpt_ms=500, ckpt_bytes=10**9)
    f = Features.from_store(sc.write(tmp_path))
    assert tuple(f.steps.columns) == STEP_COLUMNS
    assert len(f.steps) == 20 and not f.steps.duplicated(["rank", "step"]).any()
    row = f.steps.iloc[-1]
    assert row["duration_ms"] == pytest.approx(
        row["compute_ms"] + row["wait_ms"] + row["data_ms"] + row["ckpt_ms"], abs=0.01
    )
    assert tuple(f.ckpt.columns) == CKPT_COLUMNS
    assert len(f.ckpt) == 4 and set(f.ckpt["step"]) == {4, 9}
    assert f.ckpt["throughput_mb_s"].tolist() == pytest.approx([2000.0] * 4)
    assert f.hosts_of() == {0: "node0", 1: "node0"}
    assert f.wide("compute_ms", warmup_steps=3).shape == (7, 2)


def test_empty_store_gives_empty_frames(tmp_path: Path) -> None:
    f = Features.from_store(Scenario(steps=0).write(tmp_path))
    assert f.steps.empty and f.ckpt.empty and f.host.empty and f.proc.empty
    assert f.wide("compute_ms").empty


def test_peer_median_excludes_the_rank() -> None:
    import pandas as pd

    wide = pd.DataFrame([[1.0, 2.0, 9.0]], columns=[0, 1, 2])
    assert peer_median(wide).iloc[0].tolist() == [5.5, 5.0, 1.5]


def test_persistence_onset_end_and_consistency() -> None:
    flags = np.array([0] * 10 + [1, 1, 0, 1, 1, 1, 1, 1, 1, 1] + [1] * 5 + [0] * 5, dtype=bool)
    run = persistence(flags, window=10, min_frac=0.8)
    assert run is not None
    assert (run.onset_pos, run.detected_pos, run.end_pos) == (10, 18, 24)
    assert run.consistency == pytest.approx(14 / 15)
    assert persistence(flags[:12], window=10, min_frac=0.8) is None
    assert persistence(np.zeros(30, dtype=bool), window=10, min_frac=0.8) is None


def test_a_run_of_flagged_steps_is_found_sooner_than_the_window() -> None:
    flags = np.array([0, 1, 0] + [0] * 7 + [1] * 12 + [0] * 8, dtype=bool)
    window = persistence(flags, window=10, min_frac=0.8)
    sooner = persistence(flags, window=10, min_frac=0.8, run=6)
    assert window is not None and sooner is not None
    assert (window.onset_pos, window.detected_pos) == (10, 17)  # the 8th flagged step
    assert (sooner.onset_pos, sooner.detected_pos, sooner.end_pos) == (10, 15, 21)  # the 6th
    assert persistence(flags[:16], window=10, min_frac=0.8) is None
    assert persistence(flags[:16], window=10, min_frac=0.8, run=6) is not None
    broken = np.array(([1] * 5 + [0] * 3) * 4, dtype=bool)  # never 6 in a row nor 8 of 10
    assert persistence(broken, window=10, min_frac=0.8, run=6) is None
    table = np.stack([flags[:16], broken[:16]], axis=1)
    assert persistent_columns(table, 10, 0.8, 6).tolist() == [True, False]
    assert persistent_columns(table, 10, 0.8).tolist() == [False, False]


def test_compute_is_the_ranks_own_less_its_run_queue_delay(tmp_path: Path) -> None:
    import dataclasses

    from diag import schema
    from diag.store.run_store import RunStore

    events = Scenario(ranks=2, steps=3).events()
    delayed = [
        dataclasses.replace(e, cpu_wait_ns=7_000_000)
        if isinstance(e, schema.StepEvent) and e.rank == 1
        else e
        for e in events
    ]
    store = RunStore.create(tmp_path)
    store.append(delayed)
    store.flush()
    steps = Features.from_store(RunStore.open(tmp_path)).steps.set_index(["rank", "step"])
    raw = {(e.rank, e.step): e.compute_ns / 1e6 for e in events if isinstance(e, schema.StepEvent)}
    assert steps.loc[(1, 2), "cpu_wait_ms"] == pytest.approx(7.0)
    assert steps.loc[(1, 2), "compute_ms"] == pytest.approx(raw[(1, 2)] - 7.0)
    assert steps.loc[(0, 2), "compute_ms"] == pytest.approx(raw[(0, 2)])
