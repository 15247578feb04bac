"""Feature frames from a real store: columns, units, uniqueness; the shared persistence helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.diagnose.features import (
    CKPT_COLUMNS,
    STEP_COLUMNS,
    Features,
    peer_median,
    persistence,
    persistent_columns,
    quick_runs,
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


def _noise_table(steps: int, cols: int, seed: int = 0) -> np.ndarray:
    """Strengths of a clean run: mostly below the flag (1), now and then just over it."""
    return np.random.default_rng(seed).normal(0.0, 0.6, size=(steps, cols))


def test_a_few_steps_far_beyond_the_flag_are_a_quick_run() -> None:
    strength = _noise_table(60, 4)
    strength[30:, 2] = 5.0  # column 2 from position 30 on: five times its flag's threshold
    quick = quick_runs(strength, strength >= 1, alpha=0.01, min_run=3, max_run=5)
    assert np.flatnonzero(quick[:, 2] >= 0)[0] == 32 and quick[32, 2] == 30  # three in a row
    assert (quick[:, [0, 1, 3]] < 0).all()
    run = persistence(strength[:, 2] >= 1, 10, 0.8, 6, quick[:, 2])
    assert run is not None and (run.onset_pos, run.detected_pos, run.end_pos) == (30, 32, 59)
    slower = persistence(strength[:, 2] >= 1, 10, 0.8, 6)
    assert slower is not None and slower.detected_pos == 35  # the plain run: the sixth step
    assert persistent_columns(strength[:33] >= 1, 10, 0.8, 6, quick[:33]).tolist() == [
        False, False, True, False,
    ]  # fmt: skip


def test_a_level_the_other_columns_reach_often_needs_a_longer_run() -> None:
    strength = _noise_table(60, 4)
    strength[::3, [0, 1, 3]] = 5.0  # the other columns reach 5 on a third of their steps
    strength[30:34, 2] = 5.0
    strength[34:, 2] = 1.5
    quick = quick_runs(strength, strength >= 1, alpha=0.01, min_run=3, max_run=5)
    assert (quick[:, 2] < 0).all()  # 4 in a row at 5 is as common as noise makes it here
    single = quick_runs(strength[:, 2:3], strength[:, 2:3] >= 1, alpha=0.01, min_run=3, max_run=5)
    assert (single < 0).all()  # no other column: nothing to judge the odds by


def test_bursts_are_not_a_persistent_slowdown_however_strong() -> None:
    strength = _noise_table(80, 4, seed=1)
    burst = np.zeros(80, dtype=bool)
    for start in (20, 35, 50, 65):  # three bad steps in a row now and then, fine between
        burst[start : start + 3] = True
    strength[:, 1] = np.where(burst, 6.0, strength[:, 1])
    flags = strength >= 1
    quick = quick_runs(strength, flags, alpha=0.01, min_run=3, max_run=5)
    assert (quick[:, 1] >= 0).any()  # each burst is a quick run ...
    assert persistence(flags[:, 1], 10, 0.8, 6, quick[:, 1]) is None  # ... but not persistent


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


def test_wide_is_the_pivot_it_replaced_and_each_reader_gets_its_own() -> None:
    """wide(): one scatter per column, kept for the next detector; the same table as
    ``pivot_table(aggfunc="last").dropna()``, missing values, repeats and all."""
    import pandas as pd

    rng = np.random.default_rng(7)
    tables = []
    for _ in range(50):
        n = int(rng.integers(1, 70))
        steps = pd.DataFrame(
            {
                "rank": rng.integers(0, 5, n).astype("int64"),
                "step": rng.integers(0, 9, n).astype("int64"),
                "compute_ms": np.where(rng.random(n) < 0.15, np.nan, rng.standard_normal(n)),
            }
        )
        # as the features build it: unique on (step, rank), sorted (one cell a row, scattered)
        unique = steps.drop_duplicates(["step", "rank"], keep="last")
        unique = unique.sort_values(["step", "rank"]).reset_index(drop=True)
        # every cell present (row i is cell i: no scatter), a rank or a step all NaN, or not
        s, r = int(rng.integers(1, 6)), int(rng.integers(1, 5))
        values = rng.standard_normal(s * r)
        values[rng.random(s * r) < rng.choice([0.0, 0.05, 0.3])] = np.nan
        if rng.random() < 0.3:
            values[np.arange(s * r) % r == 0] = np.nan  # rank 0 has no value
        dense = pd.DataFrame(
            {"step": np.repeat(np.arange(s), r), "rank": np.tile(np.arange(r), s),
             "compute_ms": values}
        )  # fmt: skip
        # a live pass's table: complete steps, then partial ones (a rank's rows not in yet),
        # or a partial step among complete ones
        partial = dense[(dense["step"] < s - 1) | (dense["rank"] < r - 1)] if r > 1 else dense
        middle = dense[(dense["step"] != s // 2) | (dense["rank"] != 0)]
        tables += [steps, unique, dense]
        tables += [t.reset_index(drop=True) for t in (partial, middle) if len(t)]
    for steps in tables:
        f = Features(steps=steps, ckpt=pd.DataFrame(), host=pd.DataFrame(), proc=pd.DataFrame())
        want = steps.pivot_table(index="step", columns="rank", values="compute_ms", aggfunc="last")
        want = want.dropna().astype(float).sort_index()
        pd.testing.assert_frame_equal(f.wide("compute_ms"), want, check_exact=True)
        pd.testing.assert_frame_equal(f.wide("compute_ms", 2), want.iloc[2:], check_exact=True)
    mine = f.wide("compute_ms")
    mine.iloc[:, :] = -1.0
    mine["new"] = 1.0
    pd.testing.assert_frame_equal(f.wide("compute_ms"), want, check_exact=True)


def test_a_full_runs_wide_table_is_its_steps_column_and_a_readers_write_stays_its_own() -> None:
    """Every (step, rank) present, in order: the table is the steps' column reshaped, not a
    copy (five of them at 131,072 ranks were ~250 MB); a reader that writes to it gets its own."""
    steps = pd.DataFrame(
        {"step": np.repeat(np.arange(4), 3), "rank": np.tile(np.arange(3), 4),
         "compute_ms": np.arange(12, dtype=float)}
    )  # fmt: skip
    f = Features(steps=steps, ckpt=pd.DataFrame(), host=pd.DataFrame(), proc=pd.DataFrame())
    table = f.wide("compute_ms")
    assert np.shares_memory(table.to_numpy(), f.steps["compute_ms"].to_numpy())
    assert table.to_numpy().tolist() == np.arange(12.0).reshape(4, 3).tolist()
    table.iloc[0, 0] = -1.0
    assert f.steps["compute_ms"].iloc[0] == 0.0 and f.wide("compute_ms").iloc[0, 0] == 0.0


def test_a_live_passs_wide_table_is_its_complete_steps_rows_reshaped() -> None:
    """The newest steps partial (their rows arrive rank by rank): the table is the complete
    steps' rows of the column, reshaped (each of the five was a copy at 131,072 ranks: ~310 MB
    in a live pass of 59 steps); the partial steps are not in it, as a pivot drops them."""
    step = np.repeat(np.arange(5), 3)
    steps = pd.DataFrame(
        {"step": step, "rank": np.tile(np.arange(3), 5), "compute_ms": np.arange(15, dtype=float)}
    ).iloc[:13]  # step 4 has rank 0 only... and step 3 all three: the last two rows are gone
    steps = steps[(steps["step"] < 4) | (steps["rank"] == 0)].reset_index(drop=True)
    f = Features(steps=steps, ckpt=pd.DataFrame(), host=pd.DataFrame(), proc=pd.DataFrame())
    table = f.wide("compute_ms")
    assert table.index.tolist() == [0, 1, 2, 3] and table.columns.tolist() == [0, 1, 2]
    assert np.shares_memory(table.to_numpy(), f.steps["compute_ms"].to_numpy())
    table.iloc[0, 0] = -1.0
    assert f.steps["compute_ms"].iloc[0] == 0.0 and f.wide("compute_ms").iloc[0, 0] == 0.0


@given(
    st.integers(1, 6).flatmap(
        lambda rows: st.integers(2, 9).flatmap(
            lambda cols: st.lists(
                st.one_of(st.sampled_from([0.0, 1.0, 2.0, 2.0, 5.0, np.nan]), st.floats(-9, 9)),
                min_size=rows * cols,
                max_size=rows * cols,
            ).map(lambda v: np.array(v, dtype=float).reshape(rows, cols))
        )
    )
)
@settings(max_examples=300, deadline=None)
def test_peer_median_is_the_median_of_the_other_ranks(values: np.ndarray) -> None:
    # ties, NaNs, even and odd numbers of peers: exactly np.median of the row without the rank
    import pandas as pd

    got = peer_median(pd.DataFrame(values)).to_numpy()
    for i, row in enumerate(values):
        for j in range(len(row)):
            want = np.median(np.delete(row, j))
            assert (np.isnan(want) and np.isnan(got[i, j])) or got[i, j] == want, (i, j)
    # worked on in blocks of rows (one row, two rows at a time): the same table
    from unittest import mock

    import diag.diagnose.features as features_mod

    for cells in (1, 2 * values.shape[1]):
        with mock.patch.object(features_mod, "_PEER_BLOCK_CELLS", cells):
            blocked = peer_median(pd.DataFrame(values)).to_numpy()
        np.testing.assert_array_equal(blocked, got)


def _steps_by_pandas(df: pd.DataFrame) -> pd.DataFrame:
    """The steps table as pandas says it: every row converted, then the last per (rank, step)
    kept and sorted (what ``_steps`` builds without a second copy of the frame)."""
    from diag.diagnose.features import with_device_split

    df = df[df["rank"] >= 0]
    cpu_wait = df["cpu_wait_ns"].fillna(0).astype(float).clip(lower=0)
    # the delay met making a batch is not the compute's (schema 1.18), at most the step's
    in_data = df["cpu_wait_data_ns"].fillna(0).astype(float).clip(lower=0).clip(upper=cpu_wait)
    out = pd.DataFrame(
        {
            "rank": df["rank"].astype("int64"),
            "step": df["step"].astype("int64"),
            "host": df["host"],
            "duration_ms": df["duration_ns"].astype(float) / 1e6,
            "compute_ms": (df["compute_ns"].astype(float) - (cpu_wait - in_data)) / 1e6,
            "cpu_wait_ms": cpu_wait / 1e6,
            "wait_ms": df["collective_wait_ns"].astype(float) / 1e6,
            "data_ms": df["data_wait_ns"].astype(float) / 1e6,
            "ckpt_ms": df["checkpoint_ns"].astype(float) / 1e6,
            "start_ns": df["start_ns"].astype("int64"),
            "end_ns": df["end_ns"].astype("int64"),
        },
        columns=list(STEP_COLUMNS),
    )
    with_device_split(out, df["device_wait_ns"])  # row by row: the same before or after dedup
    out = out.drop_duplicates(subset=["rank", "step"], keep="last")
    return out.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4),  # step
            st.integers(-1, 3),  # rank (-1: not a training rank's step)
            st.integers(0, 10**9),  # compute_ns
            st.integers(-5, 10**8),  # cpu_wait_ns (a negative one is clipped)
            st.integers(-5, 2 * 10**8),  # cpu_wait_data_ns (clipped to 0 and cpu_wait_ns)
            st.one_of(st.none(), st.integers(0, 10**8)),  # device_wait_ns
            st.sampled_from(["h0", "h1", "h2"]),
        ),
        min_size=0,
        max_size=40,
    )
)
def test_steps_table_is_pandas_convert_dedup_then_sort(rows: list) -> None:
    from diag.diagnose.features import _steps
    from diag.store import dataframes

    n = len(rows)
    cols: dict[str, list] = {name: [0] * n for name in dataframes.dtypes("step")}
    for i, (step, rank, compute, cpu_wait, in_data, device, host) in enumerate(rows):
        cols["step"][i], cols["rank"][i], cols["host"][i] = step, rank, host
        cols["compute_ns"][i], cols["cpu_wait_ns"][i] = compute, cpu_wait
        cols["cpu_wait_data_ns"][i] = in_data
        cols["duration_ns"][i] = compute + 3 * i
        cols["collective_wait_ns"][i] = 2 * i
        cols["start_ns"][i], cols["end_ns"][i] = 10 * i, 10 * i + 7
        cols["device_wait_ns"][i] = device
        cols["device_duration_ns"][i] = cols["device_compute_ns"][i] = None
        cols["loss"][i] = None
    for name in ("job_id", "source"):
        cols[name] = ["j"] * n
    df = dataframes.columns_to_frame("step", cols)
    pd.testing.assert_frame_equal(_steps(df), _steps_by_pandas(df))


def test_each_ranks_host_is_its_last_rows_as_the_group_by_had_it() -> None:
    """``hosts_of`` picks each rank's last row by position (a group-by's keys were ~100 MB at
    131,072 ranks): the same as ``groupby("rank")["host"].last()``, null hosts and all."""
    from diag.diagnose.features import _rank_hosts

    rng = np.random.default_rng(3)
    for _ in range(60):
        n = int(rng.integers(1, 50))
        hosts = rng.choice(["a", "b", "c", None], n, p=[0.3, 0.3, 0.3, 0.1] if rng.random() < 0.3
                           else [1 / 3, 1 / 3, 1 / 3, 0.0])  # fmt: skip
        steps = pd.DataFrame(
            {"rank": rng.integers(0, 9, n), "step": np.sort(rng.integers(0, 5, n)),
             "host": pd.Categorical(hosts)}
        )  # fmt: skip
        want = {int(r): str(h) for r, h in steps.groupby("rank")["host"].last().items()}
        assert _rank_hosts(steps) == want
