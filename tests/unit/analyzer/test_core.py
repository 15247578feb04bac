"""AnalyzerCore: dedupe, all-or-nothing validation, WAL durability and start-up recovery."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from diag.analyzer.core import AnalyzerCore, IngestResult
from diag.analyzer.wal import read_wal, wal_paths
from diag.errors import SchemaError
from diag.store.run_store import RunStore
from diag.transport import codec
from tests.fakes.events import Source, batch, keys


def _core(run_dir: Path) -> AnalyzerCore:
    return AnalyzerCore(RunStore.create(run_dir), clock=lambda: 42)


def _on_disk(run_dir: Path) -> Counter[tuple[str, int]]:
    """Every (source, seq) in every readable part, counted: a duplicate on disk shows up as 2."""
    c: Counter[tuple[str, int]] = Counter()
    for part in (run_dir / "store").glob("*/part-*.parquet"):
        t = pq.read_table(part, columns=["source", "seq"])
        c.update(zip(t["source"].to_pylist(), t["seq"].to_pylist(), strict=True))
    return c


def test_accepts_new_events_and_drops_repeats(tmp_path: Path) -> None:
    core = _core(tmp_path)
    src = Source(rank=0)
    evs = [src.step(i) for i in range(4)]
    assert core.ingest(batch(evs[:2])) == IngestResult(2, 0)
    assert core.ingest(batch(evs[1:])) == IngestResult(2, 1)
    assert core.ingest(batch([evs[3], evs[3]])) == IngestResult(0, 2)
    assert core.high_water() == {src.name: 3}
    assert keys(core.store.frame("step")) == [(src.name, i) for i in range(4)]


def test_gaps_are_allowed_and_older_seqs_are_duplicates(tmp_path: Path) -> None:
    core = _core(tmp_path)
    src = Source(rank=0)
    evs = [src.step(i) for i in range(6)]
    assert core.ingest(batch([evs[0], evs[4]])) == IngestResult(2, 0)
    assert core.ingest(batch([evs[2], evs[5]])) == IngestResult(1, 1)


def test_one_bad_event_rejects_the_whole_batch(tmp_path: Path) -> None:
    core = _core(tmp_path)
    src = Source(rank=0)
    core.ingest(batch([src.step(0)]))
    bad = batch([src.step(1), src.step(2)])
    bad.events[1].ClearField("step")
    with pytest.raises(SchemaError):
        core.ingest(bad)
    old = batch([src.step(3)])
    old.schema_version = "9.0"
    with pytest.raises(SchemaError, match="schema version"):
        core.ingest(old)
    assert core.high_water() == {src.name: 0}
    assert len(core.store.frame("step")) == 1
    assert sum(len(read_wal(p).payloads) for p in wal_paths(core.store.wal_dir)) == 1


def test_flush_folds_the_wal_into_parts(tmp_path: Path) -> None:
    core = _core(tmp_path)
    src = Source(rank=0)
    core.ingest(batch([src.step(0), src.collective(0)]))
    assert len(wal_paths(core.store.wal_dir)) == 1
    assert core.flush() == 2
    assert wal_paths(core.store.wal_dir) == []
    core.ingest(batch([src.step(1)]))
    core.close()
    assert wal_paths(core.store.wal_dir) == [] and core.closed
    assert _on_disk(tmp_path) == Counter({(src.name, 0): 1, (src.name, 1): 1, (src.name, 2): 1})


def test_dedupe_survives_a_restart(tmp_path: Path) -> None:
    src = Source(rank=0)
    evs = [src.step(i) for i in range(3)]
    core = _core(tmp_path)
    core.ingest(batch(evs[:2]))
    core.close()
    again = _core(tmp_path)
    assert again.high_water() == {src.name: 1}
    assert again.ingest(batch(evs)) == IngestResult(1, 2)


def test_unflushed_wal_is_replayed_after_a_crash(tmp_path: Path) -> None:
    src = Source(rank=0)
    evs = [src.step(i) for i in range(3)]
    crashed = _core(tmp_path)  # never closed: as if SIGKILLed after the replies
    crashed.ingest(batch(evs))
    again = _core(tmp_path)
    assert again.recovery.num_replayed == 3 and again.recovery.num_wal_files == 1
    assert wal_paths(again.store.wal_dir) == []  # folded into parts at start-up
    assert again.ingest(batch(evs)) == IngestResult(0, 3)
    assert _on_disk(tmp_path) == Counter({(src.name, i): 1 for i in range(3)})


def test_truncated_wal_tail_keeps_the_whole_frames(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = Source(rank=0)
    batches = [batch([src.step(i)]) for i in range(3)]
    crashed = _core(tmp_path)
    for b in batches:
        crashed.ingest(b)
    (wal,) = wal_paths(crashed.store.wal_dir)
    wal.write_bytes(wal.read_bytes()[:-7])  # the last write torn by a crash
    with caplog.at_level(logging.WARNING, logger="diag"):
        again = _core(tmp_path)
    torn = [r for r in caplog.records if "torn" in r.getMessage()]
    assert len(torn) == 1 and "\n" not in torn[0].getMessage()
    assert again.recovery.num_torn_wal_files == 1 and again.recovery.num_replayed == 2
    kept = wal.with_name(wal.name + ".damaged")
    assert again.recovery.damaged_wal_files == (kept,) and kept.name in torn[0].getMessage()
    assert kept.exists() and wal_paths(again.store.wal_dir) == []  # folded; the copy stays
    results = [again.ingest(b) for b in batches]  # the daemon resends what it has not seen acked
    assert results == [IngestResult(0, 1), IngestResult(0, 1), IngestResult(1, 0)]
    again.close()
    assert _on_disk(tmp_path) == Counter({(src.name, i): 1 for i in range(3)})


@pytest.mark.parametrize("where", ["payload", "length"])
def test_damaged_wal_frame_costs_that_batch_only_and_the_file_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    src = Source(rank=0)
    batches = [batch([src.step(i)]) for i in range(5)]
    crashed = _core(tmp_path)
    for b in batches:
        crashed.ingest(b)
    (wal,) = wal_paths(crashed.store.wal_dir)
    data = bytearray(wal.read_bytes())
    frame = len(data) // 5  # five frames of the same size
    data[frame * 2 + (frame - 3 if where == "payload" else 6)] ^= 0x10  # the middle frame
    wal.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="diag"):
        again = _core(tmp_path)
    (line,) = caplog.messages
    kept = wal.with_name(wal.name + ".damaged")
    assert str(wal) in line and kept.name in line and "4 intact frame(s)" in line
    assert again.recovery.num_replayed == 4 and again.recovery.damaged_wal_files == (kept,)
    assert kept.read_bytes() == bytes(data) and wal_paths(again.store.wal_dir) == []
    assert keys(again.store.frame("step")) == [(src.name, i) for i in (0, 1, 3, 4)]
    again.close()
    assert _core(tmp_path).recovery.num_wal_files == 0  # the kept copy is never replayed again


def test_wal_of_the_format_before_checksums_is_replayed(tmp_path: Path) -> None:
    src = Source(rank=0)
    store = RunStore.create(tmp_path)
    payloads = [batch([src.step(i)]).SerializeToString() for i in range(3)]
    (store.wal_dir / "000000.wal").write_bytes(
        b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    )
    again = _core(tmp_path)
    assert again.recovery.num_replayed == 3 and again.recovery.damaged_wal_files == ()
    assert keys(again.store.frame("step")) == [(src.name, i) for i in range(3)]
    assert wal_paths(again.store.wal_dir) == []


def test_crash_between_parts_and_wal_delete_stores_nothing_twice(tmp_path: Path) -> None:
    src = Source(rank=0)
    crashed = _core(tmp_path)
    crashed.ingest(batch([src.step(0), src.collective(0), src.step(1)]))
    crashed.store.flush()  # parts written; the WAL delete never happens
    again = _core(tmp_path)
    assert again.recovery.num_already_stored == 3 and again.recovery.num_replayed == 0
    assert _on_disk(tmp_path) == Counter({(src.name, i): 1 for i in range(3)})


def test_crash_in_the_middle_of_a_flush_loses_nothing(tmp_path: Path) -> None:
    # One source, two kinds: the step part made it to disk, the collective part did not. The
    # step part's high-water mark (2) is above the lost collective (1): exact keys restore it.
    src = Source(rank=0)
    crashed = _core(tmp_path)
    crashed.ingest(batch([src.step(0), src.collective(0), src.step(1)]))
    crashed.store.flush()
    (tmp_path / "store" / "collective" / "part-000000.parquet").unlink()
    again = _core(tmp_path)
    assert again.recovery.num_replayed == 1 and again.recovery.num_already_stored == 2
    assert keys(again.store.frame("collective")) == [(src.name, 1)]
    assert _on_disk(tmp_path) == Counter({(src.name, i): 1 for i in range(3)})


def test_corrupt_part_is_moved_aside_at_start_up(tmp_path: Path) -> None:
    src, other = Source(rank=0), Source(rank=1)
    core = _core(tmp_path)
    core.ingest(batch([src.step(0), other.step(0)]))
    core.flush()
    core.ingest(batch([src.collective(1)]))
    core.close()
    part = tmp_path / "store" / "step" / "part-000000.parquet"
    part.write_bytes(b"PAR1 not really")
    again = _core(tmp_path)
    assert again.recovery.corrupt_parts == (part.with_name(part.name + ".corrupt"),)
    assert keys(again.store.frame("collective")) == [(src.name, 1)]
    # The lost steps' marks are gone, so a resend would store them again; the rest is untouched.
    assert again.high_water() == {src.name: 1}


def test_a_closed_core_refuses_batches(tmp_path: Path) -> None:
    core = _core(tmp_path)
    core.close()
    core.close()
    with pytest.raises(Exception, match="shutting down"):
        core.ingest(batch([Source().collective(0)]))


def test_ingest_goes_on_while_a_triage_pass_reads_the_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI under load: the live triage (nice 19) read every frame under the ingest lock; the
    # daemon's Ingest calls ran past their deadline and batches were left in its spool.
    import threading

    from diag.analyzer import core as core_mod

    c = _core(tmp_path)
    src = Source(rank=0)
    c.ingest(batch([src.step(0)]))
    reading, release = threading.Event(), threading.Event()
    real = core_mod.Features.from_store

    def slow_read(store: RunStore) -> object:
        reading.set()
        release.wait(20)
        return real(store)

    monkeypatch.setattr(core_mod.Features, "from_store", staticmethod(slow_read))
    triage = threading.Thread(target=c.triage)
    triage.start()
    try:
        assert reading.wait(10)
        done: list[IngestResult] = []
        ingest = threading.Thread(target=lambda: done.append(c.ingest(batch([src.step(1)]))))
        ingest.start()
        ingest.join(10)
        assert done == [IngestResult(1, 0)]  # not waiting for the pass
    finally:
        release.set()
        triage.join(20)
    assert len(c.store.frame("step")) == 2


def test_column_blocks_are_stored_whatever_the_order_of_a_sources_seqs(tmp_path: Path) -> None:
    """A column block groups a batch's events by kind, so one source's seqs come out of order
    (steps 0, 2, then collective 1): every event is new once, a duplicate when sent again."""
    core = _core(tmp_path)
    src = Source(rank=0)
    evs = [src.step(0), src.collective(0), src.step(1), src.collective(1)]
    sent = codec.with_columns(batch(evs))
    assert [b.WhichOneof("payload") for b in sent.columns] == ["step", "collective"]
    assert core.ingest(sent) == IngestResult(4, 0)
    assert core.high_water() == {src.name: 3}
    assert core.ingest(sent) == IngestResult(0, 4)
    assert core.ingest(batch(evs)) == IngestResult(0, 4)
    assert keys(core.store.frame("step")) == [(src.name, 0), (src.name, 2)]
    assert core.control.progress().newest_step == 1


def test_a_replay_overlapping_stored_columns_keeps_the_new_rows_once(tmp_path: Path) -> None:
    a, b = Source(rank=0), Source(rank=1)
    evs = [e for i in range(4) for e in (a.step(i), b.step(i))]
    crashed = _core(tmp_path)  # never closed: its WAL is all that holds the events
    assert crashed.ingest(codec.with_columns(batch(evs[:5]))) == IngestResult(5, 0)
    assert crashed.ingest(codec.with_columns(batch(evs))) == IngestResult(3, 5)
    frame = crashed.store.frame("step")
    assert sorted(keys(frame)) == sorted((e.source, e.seq) for e in evs)
    again = _core(tmp_path)
    assert again.recovery.num_replayed == len(evs)
    assert _on_disk(tmp_path) == Counter((e.source, e.seq) for e in evs)


def test_a_malformed_column_block_stores_nothing(tmp_path: Path) -> None:
    core = _core(tmp_path)
    src = Source(rank=0)
    sent = codec.with_columns(batch([src.step(0), src.step(1)]))
    del sent.columns[0].step.compute_ns[-1]
    with pytest.raises(SchemaError, match="compute_ns has 1 values for 2 rows"):
        core.ingest(sent)
    assert core.high_water() == {} and core.store.num_buffered == 0


def test_the_wal_keeps_the_received_bytes_when_every_event_is_new(tmp_path: Path) -> None:
    core = _core(tmp_path)
    src = Source(rank=0)
    sent = codec.with_columns(batch([src.step(0), src.step(1)]))
    raw = sent.SerializeToString()
    assert core.ingest(sent, raw) == IngestResult(2, 0)
    assert [p for path in wal_paths(core.store.wal_dir) for p in read_wal(path).payloads] == [raw]


def test_a_triage_pass_flushes_first_and_holds_no_second_copy_of_a_frame(
    tmp_path: Path,
) -> None:
    # A snapshot with rows buffered merges them into a whole new copy of each kind's frame,
    # held through the pass beside the store's: the pass flushes first, and reads one copy.
    core = _core(tmp_path)
    srcs = [Source(rank=r, host=f"h{r}") for r in range(4)]
    core.ingest(batch([s.step(i) for i in range(6) for s in srcs]))
    core.flush()
    stored = core.store.frame("step")  # cached and sorted
    core.ingest(batch([s.step(6) for s in srcs]))  # one more step, buffered
    assert core.store.num_buffered == 4
    core.triage()
    assert core.store.num_buffered == 0 and wal_paths(core.store.wal_dir) == []
    assert not core.store._tails  # folded under the lock, before the snapshot
    assert _on_disk(tmp_path) == Counter({(s.name, i): 1 for s in srcs for i in range(7)})
    assert len(core.store.frame("step")) == len(stored) + 4
    core.close()
