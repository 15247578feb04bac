"""RunStore: layout, atomic parts, dedupe and order, validation, corrupt parts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from diag.errors import InputError
from diag.schema import StepEvent
from diag.store import dataframes
from diag.store.run_store import RunStore
from tests.fakes.events import Source, keys

#: The step columns a store keeps in memory: what an analysis pass reads.
HELD = RunStore(".").resident_columns("step")


def test_flush_writes_one_part_per_kind_and_frame_merges_buffer(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path)
    src = Source(rank=0)
    store.append([src.step(0), src.collective(0)])
    written = store.flush()
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "store/collective/part-000000.parquet",
        "store/step/part-000000.parquet",
    ]
    store.append([src.step(1)])
    assert len(store.frame("step")) == 2  # one stored, one buffered
    store.flush()
    assert [p.name for p in store.part_paths("step")] == [
        "part-000000.parquet",
        "part-000001.parquet",
    ]
    assert not list(tmp_path.rglob("*.tmp"))
    reread = RunStore.open(tmp_path)
    assert reread.kinds() == ["step", "collective"]
    assert keys(reread.frame("step")) == [(src.name, 0), (src.name, 2)]


def test_frame_dedupes_on_source_seq_and_sorts_by_time(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path)
    a, b = Source(rank=0), Source(rank=1)
    late, early = a.step(5), b.step(1)
    store.append([late, early])
    store.flush()
    store.append([late, early])  # the same events again, buffered
    df = store.frame("step")
    assert keys(df) == [(b.name, 0), (a.name, 0)]
    assert df["ts_ns"].is_monotonic_increasing


def test_empty_store_gives_empty_frames_with_columns(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path)
    df = store.frame("gpu")
    assert len(df) == 0 and "util_pct" in df.columns
    assert store.kinds() == []


def test_open_refuses_what_is_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=": not a diag run directory \\(no store/: "):
        RunStore.open(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        RunStore.open(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a diag run directory"):
        RunStore.open(tmp_path / "file")


def _store_with_corrupt_part(tmp_path: Path) -> tuple[Path, Source]:
    store = RunStore.create(tmp_path)
    src = Source(rank=0)
    store.append([src.step(0)])
    store.flush()
    store.append([src.step(1)])
    (bad,) = [p for p in store.flush()]
    bad.write_bytes(bad.read_bytes()[:40])  # truncated
    store.append([src.step(2)])
    store.flush()
    return bad, src


def test_corrupt_part_is_one_line_input_error_naming_the_file(tmp_path: Path) -> None:
    bad, _ = _store_with_corrupt_part(tmp_path)
    with pytest.raises(InputError) as info:
        RunStore.open(tmp_path).frame("step")
    assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_quarantine_moves_corrupt_parts_aside_and_keeps_the_rest(tmp_path: Path) -> None:
    bad, src = _store_with_corrupt_part(tmp_path)
    (tmp_path / "store" / "step" / ".part-000009.parquet.tmp").write_bytes(b"half")
    store = RunStore.open(tmp_path)
    moved = store.quarantine_corrupt_parts()
    assert moved == [bad.with_name(bad.name + ".corrupt")] and moved[0].exists()
    assert keys(store.frame("step")) == [(src.name, 0), (src.name, 2)]
    assert not list(tmp_path.rglob("*.tmp"))
    store.append([src.step(3)])
    (new,) = store.flush()
    assert new.name == "part-000003.parquet"  # never reuses the corrupt part's number


def test_a_snapshot_reads_the_run_as_it_was_while_ingest_and_flushes_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from diag.store import run_store

    store = RunStore.create(tmp_path)
    src = Source(rank=0)
    store.append([src.step(0)])
    store.flush()
    store.append([src.step(1)])
    snap = store.snapshot()
    store.append([src.step(2)])
    store.flush()  # step 1 moves from the buffer to a part the snapshot sees too: one row still
    store.append([src.step(3)])  # buffered after the snapshot: not in it
    assert keys(snap.frame("step")) == [(src.name, 0), (src.name, 1), (src.name, 2)]
    assert len(store.frame("step")) == 4
    # what a snapshot read is kept: the next one reads no part twice
    reads: list[str] = []
    real = run_store.read_part
    monkeypatch.setattr(
        run_store, "read_part", lambda k, p, c=None: reads.append(p.name) or real(k, p, c)
    )
    fresh = RunStore.open(tmp_path)
    held = fresh.resident_columns("step")  # what the analysis reads: all it keeps in memory
    first = fresh.snapshot()
    first.frame("step", held)
    fresh.adopt(first)
    assert sorted(reads) == ["part-000000.parquet", "part-000001.parquet"]
    fresh.snapshot().frame("step", held)
    assert len(reads) == 2


def test_columns_left_on_disk_read_back_in_the_frames_row_order(tmp_path: Path) -> None:
    """The step cache leaves the columns no analysis reads on disk; a frame that asks for every
    column gets them read from the parts and the buffer, each on its own row (rows replayed,
    out of time order, flushed and buffered), and the cache stays without them."""
    from diag.store.run_store import DETACHED

    store = RunStore.create(tmp_path)
    a, b = Source(rank=0), Source(rank=1)

    def step(src: Source, i: int, ts: int) -> StepEvent:
        return replace(src.step(i), ts_ns=ts, other_ns=1000 * ts + src.rank, num_backward=i + 2)

    b0 = step(b, 0, 40)
    store.append([step(a, 0, 50), b0])
    store.flush()
    store.append([step(a, 1, 30), step(b, 1, 60), b0])  # b's step 0 sent again
    store.flush()
    store.append([step(a, 2, 45)])  # buffered
    detached = sorted(DETACHED["step"])
    assert not set(detached) & set(store.resident_columns("step"))
    assert not set(detached) & set(store.frame("step", store.resident_columns("step")).columns)
    whole = store.frame("step")
    assert list(whole.columns) == list(dataframes.dtypes("step"))
    assert whole["ts_ns"].tolist() == [30, 40, 45, 50, 60]
    assert whole["other_ns"].tolist() == [30000, 40001, 45000, 50000, 60001]
    assert whole["num_backward"].tolist() == [3, 2, 4, 2, 3]
    assert whole["device_compute_ns"].isna().all()
    only = store.frame("step", ["num_backward", "rank"])
    assert list(only.columns) == ["num_backward", "rank"] and only["rank"].tolist() == [
        0,
        1,
        0,
        0,
        1,
    ]
    snap = store.snapshot()
    assert snap.frame("step")["other_ns"].tolist() == whole["other_ns"].tolist()
    with pytest.raises(InputError, match="no column 'nope'"):
        store.frame("step", ["nope"])
    # rows that do not line up with the parts' (a row held here that they lack, rows left out)
    # are matched on (source, seq): each value still lands on its own row
    held = store.frame("step", HELD)
    odd = pd.concat([held.iloc[[3, 0]], held.iloc[[0]].assign(seq=99)], ignore_index=True)
    got = store._read_detached("step", ["other_ns"], odd)["other_ns"]
    assert got.tolist()[:2] == [50000, 30000] and pd.isna(got.iloc[2])
    # the same frame as a store that keeps every column in memory
    store.flush()
    assert RunStore.open(tmp_path, detached={}).frame("step").equals(store.frame("step"))


def test_frames_read_again_are_the_same_and_cannot_be_changed_through_a_reader(
    tmp_path: Path,
) -> None:
    """frame() keeps each kind deduplicated and sorted once per new part (a triage reads each
    kind several times): what it returns is the same each time, a reader adding or changing
    columns changes nobody else's copy, and new parts and rows show."""
    store = RunStore.create(tmp_path)
    a, b = Source(rank=0), Source(rank=1)
    store.append([a.step(3), b.step(1), a.step(3)])
    store.flush()
    first = store.frame("step")
    first["extra"] = 1
    first.loc[0, "duration_ns"] = -1
    again = store.frame("step")
    assert "extra" not in again.columns and (again["duration_ns"] > 0).all()
    assert keys(again) == [(b.name, 0), (a.name, 0), (a.name, 1)]
    store.append([b.step(5)])  # buffered: shows at once
    assert keys(store.frame("step"))[-1] == (b.name, 1)
    store.flush()  # now a part: read and sorted in
    assert keys(store.frame("step")) == [(b.name, 0), (a.name, 0), (a.name, 1), (b.name, 1)]
    reread = RunStore.open(tmp_path)
    assert keys(reread.frame("step")) == keys(store.frame("step"))


def test_a_snapshot_hands_back_its_sorted_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live triage reads a snapshot; what it deduplicated and sorted the store adopts, so
    the next snapshot neither reads a part again nor sorts the same rows again."""
    from diag.store import run_store

    store = RunStore.create(tmp_path)
    src = Source(rank=0)
    store.append([src.step(s) for s in (2, 0, 1)])
    store.flush()
    fresh = RunStore.open(tmp_path)
    snap = fresh.snapshot()
    assert keys(snap.frame("step")) == [(src.name, 1), (src.name, 2), (src.name, 0)]
    fresh.adopt(snap)
    sorts: list[int] = []
    real = run_store._unique_sorted
    monkeypatch.setattr(run_store, "_unique_sorted", lambda df: sorts.append(len(df)) or real(df))
    held = fresh.resident_columns("step")  # what a pass reads (the rest is read from disk)
    assert keys(fresh.snapshot().frame("step", held)) == keys(snap.frame("step", held))
    assert sorts == []


def test_frame_with_rows_buffered_is_every_row_once_in_order_whatever_comes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A live pass reads frames while rows are buffered: the newest rows are merged after the
    stored ones without sorting these again, and a pass reads the merge once. Whatever the
    order of appends, resent events, late rows, flushes, snapshots and reads, frame() is every
    row appended, the first of each (source, seq) kept, sorted by (ts_ns, source, seq)."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    from diag import schema
    from tests.fakes.events import MS, T0

    ops = st.lists(
        st.one_of(
            st.tuples(st.just("new"), st.integers(0, 2), st.integers(0, 3)),  # source, steps
            st.tuples(st.just("late"), st.integers(0, 2), st.integers(1, 3)),  # an older ts
            st.tuples(st.just("resend"), st.integers(0, 20), st.integers(1, 3)),
            # the same (source, seq) again with a newer time stamp: the first still wins
            st.tuples(st.just("restamped"), st.integers(0, 20), st.integers(1, 3)),
            st.tuples(st.just("flush"), st.just(0), st.just(0)),
            st.tuples(st.just("snapshot"), st.just(0), st.just(0)),
        ),
        max_size=14,
    )

    @settings(max_examples=80, deadline=None)
    @given(ops)
    @example([("new", 0, 2), ("flush", 0, 0), ("restamped", 1, 2), ("new", 1, 1)])
    @example([("new", 0, 2), ("snapshot", 0, 0), ("late", 1, 1), ("flush", 0, 0)])
    def check(plan: list[tuple[str, int, int]]) -> None:
        store = RunStore.create(tmp_path_factory.mktemp("run"))
        reader = store
        sent: list[schema.StepEvent] = []
        clock = [0]
        sources = [Source(rank=r) for r in range(3)]

        for op, a, n in plan:
            if op in ("new", "late"):
                batch = []
                for _ in range(n):
                    clock[0] += 1
                    ts = T0 + (clock[0] if op == "new" else -clock[0]) * MS
                    ev = sources[a].step(clock[0])
                    batch.append(_with_ts(ev, ts))
                store.append(batch)
                sent += batch
            elif op in ("resend", "restamped") and sent:
                batch = sent[-min(a + 1, len(sent)) :][:n]
                if op == "restamped":
                    clock[0] += 1
                    batch = [_with_ts(ev, T0 + (clock[0] + 100) * MS) for ev in batch]
                store.append(batch)
                sent += batch
            elif op == "flush":
                store.flush()
            elif op == "snapshot":
                reader = store.snapshot()
                sent_then = list(sent)
                assert keys(reader.frame("step")) == _expected(sent_then)
                store.adopt(reader)
                reader = store
            got = store.frame("step")
            assert keys(got) == _expected(sent)
            assert keys(store.frame("step")) == keys(got)  # read again: the same
            got["x"] = 1  # a reader's change is its own
            assert "x" not in store.frame("step").columns
        store.flush()
        assert keys(RunStore.open(store.run_dir).frame("step")) == _expected(sent)

    check()


def test_the_newest_rows_buffered_are_sorted_alone_and_merged_once_per_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from diag.store import run_store

    store = RunStore.create(tmp_path)
    srcs = [Source(rank=r) for r in range(4)]
    store.append([s.step(i) for i in range(10) for s in srcs])
    store.flush()
    store.frame("step", HELD)  # sorted once, as a pass after the flush would
    sorts: list[int] = []
    real = run_store._unique_sorted
    monkeypatch.setattr(run_store, "_unique_sorted", lambda df: sorts.append(len(df)) or real(df))
    store.append([s.step(10) for s in srcs])
    snap = store.snapshot()
    first = snap.frame("step", HELD)
    assert keys(first)[-4:] == [(s.name, 10) for s in srcs] and len(first) == 44
    assert keys(snap.frame("step", HELD)) == keys(first)
    assert sorts == [4]  # the four new rows, once for both reads
    store.append([srcs[0].step(3)])  # a late row, as old as stored ones: sorted in with them
    again = store.frame("step", HELD)
    assert len(again) == 45 and again["ts_ns"].is_monotonic_increasing
    assert (srcs[0].name, 11) in keys(again) and sorts[-1] == 45


def _with_ts(ev: StepEvent, ts: int) -> StepEvent:
    from dataclasses import replace

    return replace(ev, ts_ns=ts)


def _expected(sent: list[StepEvent]) -> list[tuple[str, int]]:
    seen: dict[tuple[str, int], tuple[int, str, int]] = {}
    for ev in sent:
        seen.setdefault((ev.source, ev.seq), (ev.ts_ns, ev.source, ev.seq))
    return [(s, q) for _, s, q in sorted(seen.values())]


def test_a_flush_of_newer_rows_keeps_the_cached_frame_sorted_without_sorting_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from diag.store import run_store

    store = RunStore.create(tmp_path)
    srcs = [Source(rank=r, host=f"h{r}") for r in range(3)]
    store.append([s.step(i) for i in range(4) for s in srcs])
    store.flush()
    assert len(store.frame("step", HELD)) == 12  # read and sorted once
    sorted_rows: list[int] = []
    real = run_store._unique_sorted
    monkeypatch.setattr(
        run_store, "_unique_sorted", lambda df: sorted_rows.append(len(df)) or real(df)
    )
    late = Source(rank=3, host="h3")  # a new rank (a new category) with the newer rows
    cached = store._cached["step"]
    store.append([s.step(i) for i in range(4, 6) for s in [*srcs, late]])
    store.flush()
    store.append([s.step(6) for s in srcs])
    store.flush()
    assert store._cached["step"] is cached  # a flush copies nothing of what is cached
    df = store.frame("step", HELD)  # folds both flushes' rows in, once
    assert max(sorted_rows) <= 8  # each flush's rows alone, never the whole frame again
    assert len(df) == 12 + 8 + 3 and df["host"].dtype == "category"
    monkeypatch.setattr(run_store, "_unique_sorted", real)
    assert keys(df) == keys(RunStore.open(tmp_path).frame("step"))  # as a fresh reader has it
    assert df["ts_ns"].is_monotonic_increasing


def test_a_fold_that_fails_loses_no_row_the_next_read_loads_the_parts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from diag.store import dataframes

    store = RunStore.create(tmp_path)
    srcs = [Source(rank=r) for r in range(2)]
    store.append([s.step(i) for i in range(3) for s in srcs])
    store.flush()
    assert len(store.frame("step")) == 6
    store.append([s.step(i) for i in range(3, 5) for s in srcs])
    store.flush()  # kept aside, folded at the next read: the cached frame is handed on then
    real = dataframes.concat_frames

    def out_of_memory(parts: list) -> object:
        raise MemoryError

    monkeypatch.setattr(dataframes, "concat_frames", out_of_memory)
    with pytest.raises(MemoryError):
        store.frame("step")
    monkeypatch.setattr(dataframes, "concat_frames", real)
    df = store.frame("step")
    assert len(df) == 10 and keys(df) == keys(RunStore.open(tmp_path).frame("step"))


def test_a_snapshot_folds_the_flushed_rows_and_the_store_adopts_them_unless_it_flushed_since(
    tmp_path: Path,
) -> None:
    store = RunStore.create(tmp_path)
    a, b = Source(rank=0), Source(rank=1)
    store.append([s.step(i) for i in range(3) for s in (a, b)])
    store.flush()
    store.frame("step")  # cached
    store.append([s.step(3) for s in (a, b)])
    store.flush()  # kept aside, not folded yet
    snap = store.snapshot()
    want = [(s.name, i) for i in range(4) for s in (a, b)]
    assert sorted(keys(snap.frame("step"))) == sorted(want)
    store.adopt(snap)  # nothing flushed since: the store takes the folded frame
    assert not store._tails and store._cached["step"] is snap._cached["step"]
    snap2 = store.snapshot()
    snap2.frame("step")
    store.append([a.step(4)])
    store.flush()  # flushed after snap2 was taken: snap2 lacks these rows, so no adopting
    store.adopt(snap2)
    assert sorted(keys(store.frame("step"))) == sorted([*want, (a.name, 4)])
    assert keys(store.frame("step")) == keys(RunStore.open(tmp_path).frame("step"))


def test_a_batch_flushed_twice_is_stored_once_when_the_flushes_are_folded_together(
    tmp_path: Path,
) -> None:
    store = RunStore.create(tmp_path)
    a, b = Source(rank=0), Source(rank=1)
    store.append([s.step(i) for i in range(3) for s in (a, b)])
    store.flush()
    store.frame("step")
    resent = [s.step(i) for i in range(3, 5) for s in (a, b)]
    store.append(resent)
    store.flush()
    store.append([*resent[2:], a.step(5)])  # a daemon's retry of a batch, then a new row
    store.flush()
    got = keys(store.frame("step"))
    assert sorted(got) == sorted({(s.name, i) for i in range(5) for s in (a, b)} | {(a.name, 5)})
    assert got == keys(RunStore.open(tmp_path).frame("step"))


def test_a_part_is_written_in_row_groups_and_reads_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    from diag.store import run_store

    monkeypatch.setattr(run_store, "ROW_GROUP_ROWS", 4)
    store = RunStore.create(tmp_path)
    srcs = [Source(rank=r, host=f"h{r}") for r in range(3)]
    store.append([s.step(i, loss=None if i == 2 else float(i)) for i in range(3) for s in srcs])
    want = store.frame("step")
    (part,) = store.flush()
    assert pq.ParquetFile(part).metadata.num_row_groups == 3  # 9 rows, 4 per group
    pd.testing.assert_frame_equal(RunStore.open(tmp_path).frame("step"), want)


def test_the_cache_holds_index_columns_in_32_bits_and_frames_hand_out_the_schemas_dtypes(
    tmp_path: Path,
) -> None:
    """The analysis reads rank, local_rank, step and seq as int32 (half the memory of the step
    cache's index); a frame for anyone else has the kind's dtypes, the same values; a value
    beyond 32 bits keeps its column 64-bit, in the cache and merged with narrower rows."""
    store = RunStore.create(tmp_path)
    a, b = Source(rank=3), Source(rank=70_000)
    store.append([a.step(0), b.step(0)])
    store.flush()
    store.append([a.step(1), b.step(1)])  # buffered: merged with the cache
    held = store.resident_frame("step")
    assert {str(held[c].dtype) for c in dataframes.INDEX_COLUMNS} == {"int32"}
    whole = store.frame("step")
    assert {str(whole[c].dtype) for c in dataframes.INDEX_COLUMNS} == {"int64"}
    assert whole["rank"].tolist() == held["rank"].tolist() == [3, 70_000, 3, 70_000]
    assert whole["step"].tolist() == [0, 0, 1, 1]
    big = replace(b.step(2), seq=2**40)
    store.append([big])
    store.flush()
    held = store.resident_frame("step")
    assert str(held["seq"].dtype) == "int64" and str(held["rank"].dtype) == "int32"
    assert held["seq"].tolist()[-1] == 2**40 and len(held) == 5
    assert store.frame("step")["seq"].tolist() == held["seq"].tolist()


def test_a_steps_phase_times_are_held_in_32_bits_where_they_fit_and_read_exactly(
    tmp_path: Path,
) -> None:
    """A step's phase times and counts (``NARROW``) are int32 in the cache while every value
    fits (a 2.1 s phase does not: that column alone stays 64-bit, merged with narrower parts);
    frames hand out int64, the features read the same milliseconds from both widths, and a sum
    of two near-limit phases does not wrap in the features (converted first)."""
    from diag.diagnose.features import Features

    limit = 2**31 - 1
    store = RunStore.create(tmp_path)
    a = Source(rank=0)
    first = replace(a.step(0), duration_ns=limit, compute_ns=limit, cpu_wait_ns=0)
    store.append([first, a.step(1)])
    store.flush()
    held = store.resident_frame("step")
    narrowed = [c for c in dataframes.NARROW["step"] if c in held.columns]
    assert narrowed and {str(held[c].dtype) for c in narrowed} == {"int32"}
    assert {str(store.frame("step")[c].dtype) for c in dataframes.NARROW["step"]} == {"int64"}
    long_ckpt = replace(a.step(2), checkpoint_ns=3 * 10**9)  # 3 s: beyond 32 bits
    store.append([long_ckpt])
    store.flush()
    held = store.resident_frame("step")
    assert str(held["checkpoint_ns"].dtype) == "int64" and str(held["duration_ns"].dtype) == "int32"
    assert held["checkpoint_ns"].tolist()[-1] == 3 * 10**9
    whole = store.frame("step")
    for c in narrowed:
        assert whole[c].tolist() == held[c].tolist(), c
    steps = Features.from_store(store).steps
    assert steps["duration_ms"].iloc[0] == limit / 1e6
    assert steps["compute_ms"].iloc[0] == limit / 1e6
    assert steps["ckpt_ms"].iloc[-1] == 3000.0


def test_a_nullable_column_no_row_sets_is_not_held_until_one_does(tmp_path: Path) -> None:
    """On a CPU job every step's device_wait_ns is <NA>: the cache does not hold it (the
    analysis checks for it) and a frame fills it with <NA>; once a step has one, the older
    rows read <NA> and the new one its value, in memory and on disk alike."""
    from diag.store.run_store import OPTIONAL

    assert "device_wait_ns" in OPTIONAL["step"]
    store = RunStore.create(tmp_path)
    a = Source(rank=0)
    store.append([a.step(0), a.step(1)])
    store.flush()
    assert "device_wait_ns" not in store.resident_frame("step").columns
    whole = store.frame("step")
    assert str(whole["device_wait_ns"].dtype) == "Int64" and whole["device_wait_ns"].isna().all()
    assert store.frame("step", ["device_wait_ns"])["device_wait_ns"].isna().all()
    store.append([replace(a.step(2), device_wait_ns=7_000_000)])
    for _ in range(2):  # buffered, then flushed and folded into the cache
        held = store.resident_frame("step")
        assert held["device_wait_ns"].tolist() == [pd.NA, pd.NA, 7_000_000]
        assert store.frame("step")["device_wait_ns"].tolist() == [pd.NA, pd.NA, 7_000_000]
        store.flush()
    again = RunStore.open(tmp_path)
    assert again.resident_frame("step")["device_wait_ns"].tolist() == [pd.NA, pd.NA, 7_000_000]


def test_unique_sorted_is_a_drop_of_repeated_keys_then_a_stable_sort_whatever_the_rows() -> None:
    """The cheap checks (one key per row, the order told from neighbours) decide only whether
    to copy: the rows are those of pandas' own de-duplication and sort, in any case (repeats,
    ties in time, sources out of order, a missing source, a seq beyond 32 bits)."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from diag.store.run_store import _unique_sorted

    rows = st.lists(
        st.tuples(
            st.integers(0, 4),
            st.sampled_from(["a", "b", "c", None]),
            st.sampled_from([0, 1, 2, 3, 2**33]),
        ),
        max_size=12,
    )

    @given(rows, st.booleans(), st.booleans())
    @settings(max_examples=300, deadline=None)
    def check(got: list[tuple[int, str | None, int]], in_order: bool, narrow: bool) -> None:
        if in_order:
            got = sorted(got, key=lambda r: (r[0], r[1] or "~", r[2]))
        seqs = [r[2] for r in got]
        df = pd.DataFrame(
            {
                "ts_ns": np.array([r[0] for r in got], dtype=np.int64),
                "source": pd.Categorical([r[1] for r in got], categories=["a", "b", "c"]),
                # as the cache holds it: int32 where every value fits
                "seq": np.array(
                    seqs, dtype=np.int32 if narrow and max(seqs, default=0) < 2**31 else np.int64
                ),
                "value": np.arange(len(got)),
            }
        )
        want = (
            df.drop_duplicates(subset=["source", "seq"], keep="first")
            .sort_values(["ts_ns", "source", "seq"], kind="stable")
            .reset_index(drop=True)
        )
        pd.testing.assert_frame_equal(_unique_sorted(df.copy()), want)

    check()
