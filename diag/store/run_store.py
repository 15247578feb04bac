"""The run store: the events of one run as Parquet parts in its run directory.

Layout (see ``docs/DESIGN.md``)::

    RUN_DIR/store/wal/NNNNNN.wal             the ingest write-ahead log (``diag.analyzer.wal``)
    RUN_DIR/store/<kind>/part-NNNNNN.parquet one file per flush per kind, columns = dataclass fields

Why Parquet parts read with pandas: the store needs no server (the analyzer may die, ``diag report``
runs after it), any tool reads it (pandas, pyarrow, DuckDB, Spark, polars), and appending is writing
one more immutable part per flush, so a crash can never damage what is already there. Runs are small
enough (millions of rows) that concatenating parts in pandas is fast; a query engine such as DuckDB
is not needed yet and can read these same files when it is.

Writes are atomic (a temporary name, fsync, then rename); a reader sees whole parts or none.
``frame(kind)`` returns stored and not yet flushed rows together, deduplicated on ``(source, seq)``
and sorted by ``(ts_ns, source, seq)``. A :class:`RunStore` is not thread-safe; the ingest core
serializes access to it.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from diag import schema
from diag.errors import InputError
from diag.fsutil import atomic_open
from diag.store import dataframes
from diag.store.memory import release_free_memory

log = logging.getLogger(__name__)

STORE_DIR = "store"
#: The analyzer's lock in ``store/``: held while an analyzer writes the run.
ANALYZER_LOCK = "analyzer.lock"
WAL_DIR = "wal"
_PART_RE = re.compile(r"^part-(\d{6,})\.parquet(\.corrupt)?$")
_SORT = ["ts_ns", "source", "seq"]
_KEY = ["source", "seq"]
#: Rows per row group of a part (each converted to Arrow and written on its own).
ROW_GROUP_ROWS = 1 << 17
#: Columns kept on disk only, per kind: the cache of a kind holds its other columns, and a frame
#: that asks for one of these reads it from the parts and the buffer then (in the cache's row
#: order). The step frame's columns that no detector, no feature and no run summary reads: 34
#: of the ~195 bytes a step row holds in memory (at 131,072 ranks x 50 steps, 220 MB that the
#: analyzer held between passes for ``diag report`` and the exports alone).
DETACHED: Mapping[str, frozenset[str]] = {
    "step": frozenset({"other_ns", "num_backward", "device_duration_ns", "device_compute_ns"}),
}
#: Nullable columns, per kind, that the cache holds only once some row has a value: until then
#: :meth:`RunStore.resident_frame` lacks them (its readers check) and :meth:`RunStore.frame`
#: fills them with ``<NA>``. On a CPU job a step's ``device_wait_ns`` is ``<NA>`` on every row:
#: 9 bytes a row, 56 MiB at 131,072 ranks x 50 steps.
OPTIONAL: Mapping[str, frozenset[str]] = {"step": frozenset({"device_wait_ns"})}


class RunStore:
    """The events of one run directory: Parquet parts plus rows appended since the last flush.

    ``RunStore(run_dir)`` touches nothing on disk until :meth:`create` or :meth:`flush`; use
    :meth:`open` to read an existing run directory (it checks that it is one).
    """

    def __init__(
        self, run_dir: str | Path, detached: Mapping[str, Collection[str]] = DETACHED
    ) -> None:
        self.run_dir = Path(run_dir)
        # per kind, the columns the cache leaves on disk (:data:`DETACHED`)
        self._detached = {k: frozenset(v) for k, v in detached.items() if v}
        self.store_dir = self.run_dir / STORE_DIR
        self.wal_dir = self.store_dir / WAL_DIR
        # per kind, chunks of rows not yet flushed: a list of events, or columns (field -> values,
        # as the analyzer's ingest decodes a batch: no Python object per event)
        self._buffer: dict[str, list[Chunk]] = {}
        # Parts are immutable: each is read once and kept, per kind, as one concatenated frame.
        self._loaded: dict[str, set[str]] = {}
        self._cached: dict[str, pd.DataFrame] = {}
        # Per cached kind, the rows flushed since it was last read, not yet folded into it: a
        # flush appends its rows here (O(the new rows)) and the next read folds them in once.
        # Folding at every flush copied the whole run each time: at 131,072 ranks x 50 steps a
        # 1.2 GB step frame concatenated per flush, the analyzer flushing every second.
        self._tails: dict[str, list[pd.DataFrame]] = {}
        # Kinds whose cached frame is already unique on (source, seq) and sorted as
        # :meth:`frame` returns it: a triage reads each kind several times (features, the run
        # summary, detectors), and at 16k ranks each dedup-and-sort of the step frame took ~1 s.
        self._clean: set[str] = set()
        # A live triage pass reads each kind several times while rows are buffered: the last
        # merge of the stored and buffered rows per kind, with the store's version it was made
        # at (bumped by every change of the buffer or the cache), and per clean kind the highest
        # seq per source stored (what tells buffered rows that cannot be duplicates).
        self._version = 0
        self._merged: dict[str, tuple[int, pd.DataFrame]] = {}
        self._max_seq: dict[str, pd.Series] = {}

    def writer_pid(self, locks: str | Path = "/proc/locks") -> int | None:
        """The pid of another process's analyzer that holds this run directory now (the run is
        still being written), ``None`` when none does (or the kernel's lock table cannot be
        read). Read from the kernel's table of locks, by the lock file's device and inode: the
        file is never opened here, since closing any descriptor of a file drops the POSIX locks
        this process holds on it (asked from inside the analyzer, an open-and-close would
        release its own guard)."""
        try:
            st = os.stat(self.store_dir / ANALYZER_LOCK)
            with open(locks, encoding="ascii", errors="replace") as fh:
                table = fh.read(1 << 22)
        except OSError:
            return None
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in table.splitlines():
            # "1: POSIX  ADVISORY  WRITE 7260 fe:00:2278367 0 EOF"
            parts = line.split()
            if len(parts) >= 6 and parts[1] == "POSIX" and parts[5] == key:
                try:
                    pid = int(parts[4])
                except ValueError:
                    continue
                if pid > 0 and pid != os.getpid():
                    return pid
        return None

    @staticmethod
    def not_a_run(path: str | Path) -> InputError:
        """The one wording of "this is not a run directory", for every command."""
        return InputError(
            f"{path}: not a diag run directory (no {STORE_DIR}/: diag run, diag attach and "
            "diag analyzer write one)"
        )

    @classmethod
    def open(
        cls, run_dir: str | Path, detached: Mapping[str, Collection[str]] = DETACHED
    ) -> RunStore:
        """An existing run directory, for reading; :class:`InputError` if it is not one."""
        path = Path(run_dir)
        if not path.exists():
            raise InputError(f"{path} does not exist")
        if not path.is_dir() or not (path / STORE_DIR).is_dir():
            raise cls.not_a_run(path)
        return cls(path, detached)

    @classmethod
    def create(cls, run_dir: str | Path) -> RunStore:
        """A run directory for writing: creates ``RUN_DIR/store/wal/`` if needed."""
        store = cls(run_dir)
        store.wal_dir.mkdir(parents=True, exist_ok=True)
        return store

    # -- writing ------------------------------------------------------------------------------

    def append(self, events: Iterable[schema.Event]) -> None:
        """Buffer events: visible to :meth:`frame` at once, on disk after :meth:`flush`."""
        by_kind: dict[str, list[schema.Event]] = {}
        for ev in events:
            by_kind.setdefault(type(ev).kind, []).append(ev)
        for kind, evs in by_kind.items():
            self._buffer.setdefault(kind, []).append(evs)
            self._merged.pop(kind, None)  # stale now: hold no second copy of the kind
        self._version += 1

    def append_columns(self, kind: str, columns: Mapping[str, Sequence[object]]) -> None:
        """Buffer rows of ``kind`` given as columns (every field of the kind, equal lengths)."""
        if _chunk_len(columns):
            self._buffer.setdefault(kind, []).append(columns)
            self._merged.pop(kind, None)
            self._version += 1

    @property
    def num_buffered(self) -> int:
        return sum(_chunk_len(c) for chunks in self._buffer.values() for c in chunks)

    def _buffered_frame(self, kind: str) -> pd.DataFrame | None:
        chunks = self._buffer.get(kind)
        if not chunks:
            return None
        # consecutive chunks of one form joined first: one frame per run of them, so a label
        # column is categorized once per flush (per 4,096-row batch it was 9 of 34 s of a
        # flush at 32,768 ranks, and concatenating 400 frames' categories 7 more)
        frames = []
        for is_events, run in itertools.groupby(chunks, key=lambda c: isinstance(c, list)):
            group = list(run)
            if is_events:
                events = [ev for c in group if isinstance(c, list) for ev in c]
                frames.append(dataframes.events_to_frame(kind, events))
            else:
                blocks = [c for c in group if not isinstance(c, list)]
                frames.append(dataframes.columns_to_frame(kind, _join_columns(blocks)))
        return _concat(frames)

    def flush(self) -> list[Path]:
        """Write one part per kind with buffered rows; returns the new part files.

        Each part is written under a temporary name, fsynced and renamed, and leaves the buffer
        only once it is in place: if writing fails, the rest stays buffered for the next flush.
        """
        written: list[Path] = []
        # a live pass's merge of the cached and the buffered rows is the cache after this flush
        merged = {k: f for k, (v, f) in self._merged.items() if v == self._version}
        self._version += 1
        self._merged.clear()
        for kind in sorted(self._buffer):
            df = self._buffered_frame(kind)
            if df is None or not len(df):
                continue
            path = self._write_part(kind, df)
            del self._buffer[kind]
            written.append(path)
            if kind in self._cached:
                self._loaded[kind].add(path.name)
                # a current merge is the cache and exactly these rows, merged and sorted (no
                # tails then: a read folds them before merging, and a flush bumps the version)
                done = merged.get(kind)
                if done is not None:
                    self._cached[kind] = done
                    self._clean.add(kind)
                    self._max_seq.pop(kind, None)
                else:
                    self._tails.setdefault(kind, []).append(self._resident(kind, df))
        if written:
            release_free_memory()  # the buffers just freed
        return written

    def _write_part(self, kind: str, df: pd.DataFrame) -> Path:
        kind_dir = self.store_dir / kind
        kind_dir.mkdir(parents=True, exist_ok=True)
        path = kind_dir / f"part-{self._next_part_number(kind_dir):06d}.parquet"
        with atomic_open(path, "wb", durable=True) as fh:
            # one row group of at most ROW_GROUP_ROWS at a time: the Arrow copy of a flush is
            # that, not the whole flush (at 131,072 ranks a flush every 10 steps is 1.3 M rows)
            writer = None
            for start in range(0, max(len(df), 1), ROW_GROUP_ROWS):
                table = dataframes.frame_to_table(kind, df.iloc[start : start + ROW_GROUP_ROWS])
                if writer is None:
                    writer = pq.ParquetWriter(fh, table.schema)
                writer.write_table(table)
                del table
            assert writer is not None
            writer.close()
        return path

    @staticmethod
    def _next_part_number(kind_dir: Path) -> int:
        numbers = [int(m.group(1)) for p in kind_dir.iterdir() if (m := _PART_RE.match(p.name))]
        return max(numbers, default=-1) + 1

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self) -> RunStore:
        """A reader of the run as it is now that shares no mutable state with this store: the
        caller takes it under its lock (a copy of the buffered rows' lists and of the cache's
        bookkeeping: microseconds to milliseconds) and reads frames from it without the lock,
        while ingest and flushes go on here. It holds every row of the moment it was taken,
        and may show newer ones: parts flushed meanwhile are read from disk by it too (the rows
        they hold that are also in its copy of the buffer, :meth:`frame`'s deduplication on
        (source, seq) keeps once); rows only buffered here after it was taken are not in it.

        Why: the analyzer's live triage runs at nice 19 and read every frame under the ingest
        lock; on a loaded host it held the lock for seconds, the daemons' ``Ingest`` calls ran
        past their deadline and the run ended with batches left in a spool (a ``diag attach``
        store with one step from three of its four ranks)."""
        snap = RunStore(self.run_dir, self._detached)
        snap._buffer = {k: list(v) for k, v in self._buffer.items() if v}
        snap._loaded = {k: set(v) for k, v in self._loaded.items()}
        snap._cached = dict(self._cached)  # frames are never changed in place, only replaced
        snap._tails = {k: list(v) for k, v in self._tails.items() if v}
        snap._clean = set(self._clean)
        snap._version = self._version
        snap._merged = dict(self._merged)
        snap._max_seq = dict(self._max_seq)
        return snap

    def adopt(self, snap: RunStore) -> None:
        """Keep the parts that ``snap`` (a :meth:`snapshot` of this store) read since, so the
        next snapshot does not read them again: per kind, when it has loaded every part this
        store has and more, or every part this store has, deduplicated and sorted where this
        store's copy is not yet. Cheap; the caller holds its lock."""
        for kind, names in snap._loaded.items():
            mine = self._loaded.get(kind, set())
            if kind not in snap._cached or not names >= mine or snap._tails.get(kind):
                continue
            cleaner = kind in snap._clean and kind not in self._clean
            # no part flushed here since (names == mine): the snapshot folded the same tails
            folded = bool(self._tails.get(kind))
            if names > mine or cleaner or folded:
                self._cached[kind] = snap._cached[kind]
                self._tails.pop(kind, None)
                self._loaded[kind] = set(names)
                self._max_seq.pop(kind, None)
                if kind in snap._clean:
                    self._clean.add(kind)
                else:
                    self._clean.discard(kind)

    # -- reading ------------------------------------------------------------------------------

    def kinds(self) -> list[str]:
        """Kinds with stored parts or buffered rows, in schema order."""
        on_disk = {k for k in schema.EVENT_TYPES if self._part_paths(k)}
        return [k for k in schema.EVENT_TYPES if k in on_disk or self._buffer.get(k)]

    def part_paths(self, kind: str) -> list[Path]:
        """The readable part files of ``kind``, oldest first."""
        return self._part_paths(kind)

    def _part_paths(self, kind: str) -> list[Path]:
        kind_dir = self.store_dir / kind
        if not kind_dir.is_dir():
            return []
        found = []
        for p in kind_dir.iterdir():
            m = _PART_RE.match(p.name)
            if m and not m.group(2):
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

    def resident_columns(self, kind: str) -> list[str]:
        """The columns of ``kind`` that this store keeps in memory once read (in the kind's
        order): :meth:`frame` with these (or fewer) reads nothing more from disk. (An
        :data:`OPTIONAL` column among them is in :meth:`resident_frame` only once a row has a
        value.)"""
        gone = self._detached.get(kind, frozenset())
        return [c for c in dataframes.dtypes(kind) if c not in gone]

    def _resident(self, kind: str, df: pd.DataFrame) -> pd.DataFrame:
        """``df`` as the cache holds it: without the columns of ``kind`` that stay on disk and
        the :data:`OPTIONAL` ones with no value, its index columns and ``kind``'s
        :data:`~diag.store.dataframes.NARROW` ones 32-bit where they fit
        (:func:`dataframes.narrow_ints`); the rest shared (copy-on-write)."""
        gone = [c for c in self._detached.get(kind, ()) if c in df.columns]
        gone += [c for c in OPTIONAL.get(kind, ()) if c in df.columns and not df[c].notna().any()]
        return dataframes.narrow_ints(kind, df.drop(columns=gone) if gone else df)

    def frame(self, kind: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """Every row of ``kind`` (parts and buffer), unique on (source, seq), sorted by
        (ts_ns, source, seq); every column of the kind, or only ``columns`` (in that order).

        A column the cache leaves on disk (:data:`DETACHED`) is read from the parts and the
        buffer when asked for: every column of such a kind costs a read of the parts; the
        analysis reads :meth:`resident_frame`.

        Raises :class:`InputError` naming the file if a part cannot be read.
        """
        if kind not in schema.EVENT_TYPES:
            raise InputError(f"unknown event kind {kind!r}")
        want = list(dataframes.dtypes(kind)) if columns is None else list(columns)
        unknown = [c for c in want if c not in dataframes.dtypes(kind)]
        if unknown:
            raise InputError(f"{kind} has no column {unknown[0]!r}")
        held = self.resident_frame(kind)
        missing = [c for c in want if c not in held.columns]
        gone = self._detached.get(kind, frozenset())
        on_disk = [c for c in missing if c in gone]
        if on_disk:
            held = held.assign(**self._read_detached(kind, on_disk, held))
        unset = {  # OPTIONAL columns no row has a value in
            c: dataframes.null_column(dataframes.dtypes(kind)[c], len(held))
            for c in missing
            if c not in gone
        }
        if unset:
            held = held.assign(**unset)
        if list(held.columns) != want:
            held = held[want]
        return dataframes.widen_ints(kind, held)

    def resident_frame(self, kind: str) -> pd.DataFrame:
        """:meth:`frame` of the columns the store keeps in memory (:meth:`resident_columns`):
        what the analysis reads; nothing is read back from disk for it. Its index columns
        (``rank``, ``local_rank``, ``step``, ``seq``) and ``kind``'s
        :data:`~diag.store.dataframes.NARROW` ones (a step's phase times and counts) are int32
        where every value fits (convert before adding them), and an :data:`OPTIONAL` column is
        missing while no row has a value."""
        if kind not in schema.EVENT_TYPES:
            raise InputError(f"unknown event kind {kind!r}")
        stored = self._stored_frame(kind)
        if kind not in self._clean:  # once per new part, not once per read
            del stored  # the cache's frame, handed on: freed column by column as it is sorted
            try:
                stored = self._cached[kind] = _unique_sorted(self._cached.pop(kind))
            except BaseException:
                self._forget(kind)
                raise
            self._clean.add(kind)
            self._max_seq.pop(kind, None)
        if not self._buffer.get(kind):
            return stored.copy(deep=False)  # copy-on-write: the caller may add columns
        done = self._merged.get(kind)
        if done is None or done[0] != self._version:
            buffered = self._buffered_frame(kind)
            assert buffered is not None
            done = (self._version, self._merge(kind, [stored, self._resident(kind, buffered)]))
            self._merged[kind] = done
        return done[1].copy(deep=False)

    def _merge(self, kind: str, parts: list[pd.DataFrame]) -> pd.DataFrame:
        """The stored rows (``parts[0]``, unique and sorted) and the rows of the chunks after it
        as :meth:`frame` returns them; consumes ``parts`` (emptied: a part the caller holds no
        other reference to is freed as it is copied). Live, each chunk's rows are newer than
        the ones before it and new: then each is sorted alone and they are put after one
        another in one concatenation (at 16k ranks a pass re-sorted 800k step rows for 16k new
        ones; at 131k a fold of five flushes copied the run four times); otherwise (a row as
        old as the ones before it, or a seq its source already had: a resent batch) the whole
        is deduplicated and sorted."""
        stored = parts.pop(0)
        segs = []
        while parts:  # each chunk sorted (a copy) and let go of before the next
            seg = _unique_sorted(parts.pop(0))
            if len(seg):
                segs.append(seg)
        had_stored = len(stored) > 0
        whole = [stored, *segs] if had_stored else segs
        del segs
        if len(whole) <= 1:
            return whole[0] if whole else stored
        del stored
        seen = self._max_seq.get(kind) if had_stored else None
        if seen is None:
            seen = whole[0].groupby("source", sort=False)["seq"].max()
            if had_stored:
                self._max_seq[kind] = seen
        for prev, seg in itertools.pairwise(whole):
            last = tuple(prev.iloc[-1][c] for c in _SORT)
            first = tuple(seg.iloc[0][c] for c in _SORT)
            before = seg["source"].map(seen).astype("float64")  # NaN: a source not seen yet
            if first <= last or bool((before.notna() & (seg["seq"] <= before)).any()):
                del prev, seg
                return _unique_sorted(_concat(whole))
            if seg is not whole[-1]:
                newest = seg.groupby("source", sort=False)["seq"].max()
                seen = pd.concat([seen, newest]).groupby(level=0).max()
        del prev, seg
        return _concat(whole)

    def fold(self) -> None:
        """Fold the rows flushed since the last read into the cached frames now. The analyzer
        calls it under its lock before a pass's snapshot: folded in the snapshot instead, the
        old frame (the store's) and the folded one (the snapshot's) would both be held until
        the pass hands its frames back."""
        for kind in list(self._tails):
            self._fold(kind)

    def _fold(self, kind: str) -> None:
        tails = self._tails.pop(kind, None)
        if not tails:
            return
        self._version += 1
        # the cached frame and the tails are handed on: freed column by column as they are copied
        parts = [self._cached.pop(kind), *tails]
        del tails
        try:
            if kind in self._clean or not len(parts[0]):
                self._cached[kind] = self._merge(kind, parts)  # unique and sorted
                self._clean.add(kind)
            else:
                self._cached[kind] = _concat(parts)
        except BaseException:
            self._forget(kind)
            raise
        self._max_seq.pop(kind, None)

    def _forget(self, kind: str) -> None:
        """Drop what is cached of ``kind`` (a fold or sort that handed the cached frame on
        failed, e.g. out of memory): every row of it is in a part on disk, and the next read
        loads them all again."""
        self._cached.pop(kind, None)
        self._tails.pop(kind, None)
        self._loaded.pop(kind, None)
        self._clean.discard(kind)
        self._max_seq.pop(kind, None)
        self._version += 1

    def _stored_frame(self, kind: str) -> pd.DataFrame:
        self._fold(kind)  # the rows flushed since the last read, once
        loaded = self._loaded.setdefault(kind, set())
        new = [p for p in self._part_paths(kind) if p.name not in loaded]
        if kind in self._cached and not new:
            return self._cached[kind]
        self._version += 1
        self._clean.discard(kind)
        # the cached frame is handed on to the concatenation (freed column by column)
        parts = [self._cached.pop(kind, None)]
        if parts[0] is None:
            parts[0] = self._resident(kind, dataframes.empty_frame(kind))
        columns = self.resident_columns(kind) if kind in self._detached else None
        try:
            for path in new:
                parts.append(self._resident(kind, read_part(kind, path, columns)))
                loaded.add(path.name)
        finally:  # keep the parts read before a bad one: they are not read twice
            self._cached[kind] = _concat(parts)
            # the parts' Arrow tables and pieces, freed: back to the system before the rows
            # are sorted (opening a 131,072-rank run held ~0.7 GB of them through it)
            release_free_memory()
        return self._cached[kind]

    def _read_detached(
        self, kind: str, names: list[str], held: pd.DataFrame
    ) -> dict[str, pd.Series]:
        """The columns ``names`` of ``kind``, which the cache leaves on disk, for the rows of
        ``held`` (:meth:`resident_frame`), in its order: read from the parts it was built from and
        from the buffer, then deduplicated and sorted as it was. Those are the same rows in the
        same order (the order is the key's); rows that differ (a part read since, a replayed
        seq with another time) are matched on (source, seq) instead."""
        keys = [*_SORT, *names]
        loaded = self._loaded.get(kind, set())
        parts = [dataframes.empty_frame(kind)[keys]]
        parts += [read_part(kind, p, keys) for p in self._part_paths(kind) if p.name in loaded]
        buffered = self._buffered_frame(kind)
        if buffered is not None:
            parts.append(buffered[keys])
        del buffered
        got = _unique_sorted(_concat(parts))
        if not _same_keys(got, held):
            got = (
                held[_KEY]
                .astype({"source": str})
                .merge(got.astype({"source": str}).drop(columns="ts_ns"), on=_KEY, how="left")
            )
        return {c: pd.Series(got[c].array, index=held.index) for c in names}

    def quarantine_corrupt_parts(self) -> list[Path]:
        """Read every part; move unreadable ones aside to ``*.corrupt`` and return their new paths.

        For the analyzer at start-up: a part torn by a crash or a bad disk must not stop ingest.
        Everything readable is kept (and loaded, so later :meth:`frame` calls are cheap).
        """
        moved = []
        for kind in schema.EVENT_TYPES:
            kind_dir = self.store_dir / kind
            if kind_dir.is_dir():
                for tmp in kind_dir.glob(".part-*.tmp"):
                    tmp.unlink(missing_ok=True)  # a flush interrupted before its rename
            while True:
                try:
                    self._stored_frame(kind)
                    break
                except _PartError as exc:
                    target = exc.path.with_name(exc.path.name + ".corrupt")
                    os.replace(exc.path, target)
                    log.warning("moved corrupt part %s aside to %s: %s", exc.path, target.name, exc)
                    moved.append(target)
        return moved


class _PartError(InputError):
    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


def read_part(kind: str, path: Path, columns: Collection[str] | None = None) -> pd.DataFrame:
    """One part file as a frame of ``kind`` (only ``columns``, in the kind's order, when
    given: the others are not read); :class:`InputError` (one line, naming it) if bad."""
    try:
        if columns is None:
            table = pq.read_table(path)
        else:
            with pq.ParquetFile(path) as part:
                present = set(part.schema_arrow.names)
                table = part.read(columns=[c for c in columns if c in present])
        return dataframes.table_to_frame(kind, table, columns)
    except (OSError, pa.ArrowException, ValueError, KeyError, TypeError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise _PartError(path, f"cannot read store part {path}: {reason}") from None


Chunk = list[schema.Event] | Mapping[str, Sequence[object]]


def _chunk_len(chunk: Chunk) -> int:
    if isinstance(chunk, list):
        return len(chunk)
    return len(next(iter(chunk.values()), ()))


def _join_columns(
    chunks: list[Mapping[str, Sequence[object]]],
) -> Mapping[str, Sequence[object]]:
    """Column chunks (field -> values) as one: arrays concatenated, other sequences chained."""
    if len(chunks) == 1:
        return chunks[0]
    out: dict[str, Sequence[object]] = {}
    for name in chunks[0]:
        parts = [c[name] for c in chunks]
        arrays = [p for p in parts if isinstance(p, np.ndarray)]
        if len(arrays) == len(parts):
            out[name] = cast(Sequence[object], np.concatenate(cast(list[np.ndarray], arrays)))
        else:
            out[name] = [v for p in parts for v in p]
    return out


def _unique_sorted(df: pd.DataFrame) -> pd.DataFrame:
    """``df``'s rows unique on (source, seq) (the first kept), sorted by (ts_ns, source, seq),
    with a fresh index. The caller hands ``df`` on: when rows must move, each column is freed
    as it is taken (no second copy of the whole frame); when none must, no copy is made."""
    df = df.reset_index(drop=True)
    unique = _unique_keys(df)
    if unique and _in_order(df):
        return df  # the common case (parts of one analyzer, newer after older): no copy
    keys = df[_SORT]
    if not unique:
        keep = ~df.duplicated(subset=_KEY, keep="first").to_numpy(dtype=bool)
        if not keep.all():
            keys = df.loc[keep, _SORT]
    order = keys.sort_values(_SORT, kind="stable").index.to_numpy(dtype=np.int64)
    del keys
    if np.array_equal(order, np.arange(len(df))):
        return df
    # the columns handed on, not the frame: this function's own reference to it would keep
    # every old column alive until the new ones were all taken (two copies of the cache)
    held = dataframes.column_arrays(df)
    del df
    return dataframes.take_columns(held, order)


def _unique_keys(df: pd.DataFrame) -> bool:
    """Whether no two rows of ``df`` share (source, seq), told cheaply where it can be: one
    int64 key per row (the source's category code and the seq, 32 bits each), sorted in place
    (``DataFrame.duplicated`` on the two columns held hash tables and codes of ~0.5 GB at
    131,072 ranks x 50 steps). False where it cannot tell (no category, a seq beyond 32 bits):
    the caller then looks for the duplicates themselves."""
    source = df["source"]
    if not len(df):
        return True
    if not isinstance(source.dtype, pd.CategoricalDtype):
        return False
    seq = df["seq"].to_numpy()
    if seq.min() < 0 or seq.max() >= 1 << 32:
        return False
    key = source.cat.codes.to_numpy().astype(np.int64)
    key <<= 32
    key |= seq
    key.sort()
    return not bool((key[1:] == key[:-1]).any())


def _in_order(df: pd.DataFrame) -> bool:
    """Whether ``df``'s rows are already sorted by (ts_ns, source, seq) with no two keys equal,
    as ``sort_values`` orders them (a category by its code): bool arrays, no copy of the keys."""
    if len(df) < 2:
        return True
    if not isinstance(df["source"].dtype, pd.CategoricalDtype):
        return False
    ts = df["ts_ns"].to_numpy()
    code = df["source"].cat.codes.to_numpy()
    seq = df["seq"].to_numpy()
    if code.min() < 0:  # a missing source sorts last, its code (-1) first
        return False
    later = code[1:] > code[:-1]
    later |= (code[1:] == code[:-1]) & (seq[1:] > seq[:-1])  # same time: then source, seq
    later &= ts[1:] == ts[:-1]
    later |= ts[1:] > ts[:-1]
    return bool(later.all())


def _same_keys(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether ``a`` and ``b`` hold the same (ts_ns, source, seq) keys row by row."""
    if len(a) != len(b):
        return False
    if not all(np.array_equal(a[c].to_numpy(), b[c].to_numpy()) for c in ("seq", "ts_ns")):
        return False
    sa, sb = a["source"], b["source"]
    if isinstance(sa.dtype, pd.CategoricalDtype) and isinstance(sb.dtype, pd.CategoricalDtype):
        # on one set of categories (a source b lacks: code -1), compared as codes
        recoded = sa.cat.set_categories(sb.cat.categories)
        return bool(np.array_equal(recoded.cat.codes.to_numpy(), sb.cat.codes.to_numpy()))
    return bool((sa.astype(str).to_numpy() == sb.astype(str).to_numpy()).all())


def _concat(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts' rows as one frame; consumes ``parts`` (:func:`dataframes.concat_frames`)."""
    nonempty = [p for p in parts if len(p)]
    first = parts[0] if parts and not nonempty else None
    parts.clear()
    if first is not None:
        return first
    if not nonempty:
        return pd.DataFrame()
    return dataframes.concat_frames(nonempty)
