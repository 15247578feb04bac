"""The Flight Recorder loader (restricted unpickler) and harvesting, on real NCCL dumps."""

from __future__ import annotations

import dataclasses
import os
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.errors import InputError
from diag.flight_recorder import entry_to_collective, load_fr_dump, normalize_op, pg_sizes
from diag.hook.fr_state import MATCH_SLACK_NS, OP_ALIASES, FrState, PyCall, StepWindows
from tests.fakes.paths import SHARED

# shared/ lies beside the checkout (as in CI); DIAG_SHARED_DIR points elsewhere.
DUMPS = SHARED / "data" / "external" / "fr-nccl-gpu-error"
REAL = sorted(DUMPS.glob("_dump_*")) if DUMPS.is_dir() else []


@pytest.mark.skipif(not REAL, reason="real FR dumps not present")
def test_real_nccl_dumps_load_and_map() -> None:
    for path in REAL:
        dump = load_fr_dump(path.read_bytes())
        assert dump["version"] == "2.9" and dump["entries"]
        sizes = pg_sizes(dump["pg_config"])
        for entry in dump["entries"]:
            kw = entry_to_collective(entry, sizes)
            assert kw["op"] in {"send", "recv", "broadcast", "all_reduce", "all_to_all",
                                "_reduce_scatter_base", "_all_gather_base"}  # fmt: skip
            assert kw["enqueue_ns"] == entry["time_created_ns"] and kw["origin"] == "fr"
            assert kw["pg_size"] > 0 and kw["num_bytes"] > 0
    first = load_fr_dump(REAL[0].read_bytes())["entries"][0]  # _dump_0: a PP send, 4096x1x5120 bf16
    kw = entry_to_collective(first, pg_sizes(load_fr_dump(REAL[0].read_bytes())["pg_config"]))
    assert (kw["op"], kw["pg_name"], kw["pg_desc"], kw["pg_size"]) == (
        "send", "43", "PIPELINE_MODEL_PARALLEL_GROUP", 4)  # fmt: skip
    assert (kw["seq_id"], kw["p2p_seq_id"], kw["is_p2p"]) == (26, 11981, True)
    assert kw["num_bytes"] == 4096 * 5120 * 2 and kw["dtype"] == "BFloat16"
    assert kw["start_ns"] is None and kw["duration_ns"] is None and kw["state"] == "scheduled"


class Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize(
    "data",
    [
        pickle.dumps(Boom()),
        pickle.dumps({"entries": [Boom()]}),
        pickle.dumps({"entries": [1]})[:-5],  # truncated
        b"not a pickle at all",
        b"",
        pickle.dumps([1, 2, 3]),  # not a dict
        pickle.dumps({"entries": {1, 2}}),
    ],
)
def test_anything_but_plain_data_is_refused_with_one_line(data: bytes) -> None:
    with pytest.raises(InputError) as info:
        load_fr_dump(data)
    assert "\n" not in str(info.value)


def test_malformed_entry_is_an_input_error() -> None:
    with pytest.raises(InputError):
        entry_to_collective({"state": "completed"}, {})


def test_normalize_op() -> None:
    assert normalize_op("nccl:send 0->3") == "send"
    assert normalize_op("gloo:all_reduce") == "all_reduce"
    assert normalize_op("barrier") == "barrier"


def _entry(rid: int, created: int, *, retired: bool = True, nbytes_elems: int = 4) -> dict:
    return {
        "record_id": rid, "pg_id": 0, "process_group": ("0", "default_pg"),
        "collective_seq_id": rid + 1, "p2p_seq_id": 0, "profiling_name": "gloo:all_reduce",
        "time_created_ns": created, "input_sizes": [[nbytes_elems]], "input_dtypes": ["Float"],
        "state": "scheduled", "retired": retired, "is_p2p": False, "thread_id": "7",
        "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
    }  # fmt: skip


def test_harvest_steps_matching_and_one_harvest_delay() -> None:
    ms = 1_000_000
    windows = StepWindows()
    windows.start(100 * ms)
    windows.end(0, 200 * ms)  # step 0 = [100, 200) ms, step 1 = [200, 300) ms
    windows.end(1, 300 * ms)
    fr = FrState(windows, hold_s=30)
    fr.add_call(PyCall(1, "all_reduce", 240 * ms, 260 * ms, 16, "Float", "0", 1, True, 7))
    created = (50 * ms, 150 * ms, 250 * ms)
    dump = {"pg_config": {}, "entries": [_entry(i, c) for i, c in enumerate(created)]}
    dump["entries"].append(_entry(3, 310 * ms, retired=False))
    assert fr.process(dump, now_s=1.0, extra_sizes={"0": 2}) == []  # first sight: wait
    out = fr.process(dump, now_s=2.0, extra_sizes={"0": 2})
    assert [(step, kw["seq_id"]) for step, kw in out] == [(-1, 1), (0, 2), (1, 3)]
    assert out[2][1]["start_ns"] == 240 * ms and out[2][1]["duration_ns"] == 20 * ms
    assert out[1][1]["start_ns"] is None
    assert all(kw["pg_size"] == 2 for _, kw in out)
    assert fr.process(dump, now_s=3.0) == []  # nothing twice; entry 3 still in flight
    (late,) = fr.process(dump, now_s=40.0)  # stuck past hold_s: reported as it is
    assert late[0] == 2 and late[1]["seq_id"] == 4
    assert fr.counts == {-1: 1, 0: 1, 1: 1, 2: 1}


def test_unmatched_python_calls_are_emitted_after_two_dumps() -> None:
    fr = FrState(StepWindows())
    fr.add_call(PyCall(3, "barrier", 10, 20, 0, "", "0", 2, True, 7))
    assert fr.unmatched_calls(30) == []
    (call,) = fr.unmatched_calls(40)
    assert call.payload()["origin"] == "python" and call.payload()["duration_ns"] == 10


def _scan_match(calls: list[PyCall], op: str, created: int, tid: str, nbytes: int) -> int | None:
    """The matching rule as a plain scan of every pending call in arrival order (the reference
    the indexed lookup must agree with); returns the matched call's ``order``."""
    found: list[int] = []
    for i, call in enumerate(calls):
        if call.op != op and op not in OP_ALIASES.get(call.op, ()):
            continue
        if tid and str(call.tid) != tid:
            continue
        if call.start_ns - MATCH_SLACK_NS <= created <= call.end_ns + MATCH_SLACK_NS:
            if call.num_bytes == nbytes:
                return calls.pop(i).order
            found.append(i)
    return calls.pop(found[0]).order if found else None


_OPS = st.sampled_from(["all_reduce", "isend", "send", "all_gather", "allgather", "barrier"])


@settings(max_examples=200, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            _OPS,
            st.integers(0, 2_000_000),  # start
            st.integers(0, 400_000),  # duration: nested and overlapping calls included
            st.sampled_from([1, 2]),
            st.sampled_from([0, 16]),
        ),
        max_size=25,
    ),
    entries=st.lists(
        st.tuples(
            _OPS,
            st.integers(-100_000, 2_500_000),
            st.sampled_from(["", "1", "2", "9"]),
            st.sampled_from([0, 16]),
        ),
        max_size=25,
    ),
)
def test_indexed_call_lookup_matches_a_scan_of_every_call(
    calls: list[tuple[str, int, int, int, int]], entries: list[tuple[str, int, str, int]]
) -> None:
    fr = FrState(StepWindows())
    for op, start, dur, tid, nbytes in calls:
        fr.add_call(PyCall(0, op, start, start + dur, nbytes, "Float", "0", 2, True, tid))
    reference = sorted((c for cs in fr._calls.values() for c in cs), key=lambda c: c.order)
    for op, created, tid, nbytes in entries:
        got = fr._match(op, created, tid, nbytes)
        assert (got.order if got else None) == _scan_match(reference, op, created, tid, nbytes)
    left = [c.order for c in fr.unmatched_calls(0, final=True)]
    assert left == [c.order for c in reference]


def test_process_offers_a_pause_before_each_entry_it_emits() -> None:
    ms = 1_000_000
    windows = StepWindows()
    windows.start(0)
    fr = FrState(windows)
    dump = {"pg_config": {}, "entries": [_entry(i, (i + 1) * ms) for i in range(5)]}
    ticks: list[int] = []
    assert fr.process(dump, now_s=1.0, tick=lambda: ticks.append(1)) == []  # held: no work
    assert len(fr.process(dump, now_s=2.0, tick=lambda: ticks.append(1))) == 5
    assert len(ticks) == 5


def test_a_harvests_rows_are_the_events_make_gives_one_by_one_and_encode_as_them() -> None:
    from diag import schema
    from diag.hook.events import EventFactory
    from diag.proto import diag_pb2 as pb
    from diag.transport import codec

    ev = EventFactory(host="h", rank=3, local_rank=1, job_id="j")
    rows = [(s, PyCall(s, "all_reduce", 10 * s, 10 * s + 5, 64, "Float", "0", 4, s % 2 == 0,
                       1).payload()) for s in range(5)]  # fmt: skip
    block = ev.rows(schema.CollectiveEvent, rows)
    made = block.events()
    one = [ev.make(schema.CollectiveEvent, step=s, **p) for s, p in rows]
    assert len(block) == 5 and ev.num_emitted == 10
    seqs = [e.seq for e in made + one]
    assert seqs == sorted(seqs) and len(set(seqs)) == 10
    assert len({e.ts_ns for e in made}) == 1
    strip = {"seq": 0, "ts_ns": 0}
    assert [dataclasses.replace(e, **strip) for e in made] == [
        dataclasses.replace(e, **strip) for e in one
    ]
    # on the wire: the block decodes to the same events (the payloads leave out fields that
    # have defaults: pg_desc, seq_id), and is the block their messages would make
    batch = pb.EventBatch(schema_version=schema.SCHEMA_VERSION)
    batch.columns.append(codec.rows_to_block(block))
    assert codec.events_from_batch(batch) == made
    protos = [codec.event_to_proto(e) for e in made]
    assert codec.protos_to_columns(protos) == list(batch.columns)
    assert len(ev.rows(schema.CollectiveEvent, [])) == 0


def test_a_new_ring_emits_what_was_held_and_forgets_the_old_ids() -> None:
    ms = 1_000_000
    fr = FrState(StepWindows(), hold_s=30)
    old = {"pg_config": {}, "entries": [_entry(0, 10 * ms), _entry(1, 20 * ms, retired=False)]}
    assert fr.process(old, now_s=1.0) == []  # both held: first sight, one in flight
    assert [kw["seq_id"] for _, kw in fr.process(old, now_s=2.0)] == [1]
    (held,) = fr.new_ring({"0": 4})  # the one in flight, as last seen
    assert held[1]["seq_id"] == 2 and held[1]["pg_size"] == 4
    assert fr.new_ring() == []
    # the other ring's ids start at 0 again: its entries are new, not repeats
    new = {"pg_config": {}, "entries": [dict(_entry(0, 30 * ms), collective_seq_id=3)]}
    assert fr.process(new, now_s=3.0) == []
    assert [kw["seq_id"] for _, kw in fr.process(new, now_s=4.0)] == [3]


def test_entries_listed_out_of_order_are_emitted_in_record_order() -> None:
    ms = 1_000_000
    fr = FrState(StepWindows(), hold_s=30)
    dump = {"pg_config": {}, "entries": [_entry(i, (10 + i) * ms) for i in (3, 1, 2, 0)]}
    assert fr.process(dump, now_s=1.0) == []
    assert [kw["seq_id"] for _, kw in fr.process(dump, now_s=2.0)] == [1, 2, 3, 4]
    assert fr.process(dump, now_s=3.0) == []


@pytest.mark.parametrize("seed", range(8))
def test_reading_from_the_first_needed_id_emits_what_whole_dumps_do(seed: int) -> None:
    """A ring of 16 entries harvested 60 times, entries arriving in bursts (some more than the
    ring holds), some in flight over several harvests: one FrState sees the whole ring each
    time, the other only the entries from :meth:`FrState.first_needed` on (the native reader's
    view); they emit the same events at the same harvests."""
    import random

    rng = random.Random(seed)
    ms = 1_000_000
    capacity, ring = 16, []
    whole, reads = FrState(StepWindows(), hold_s=5), FrState(StepWindows(), hold_s=5)
    done_at: dict[int, int] = {}
    top = -1
    for harvest in range(60):
        for _ in range(rng.choice((0, 1, 3, 8, 20))):
            rid = len(done_at)
            done_at[rid] = harvest + rng.choice((0, 0, 0, 1, 3, 9))  # 9: past hold_s
            ring.append(rid)
        ring = ring[-capacity:]
        entries = [_entry(r, (r + 1) * ms, retired=done_at[r] <= harvest) for r in ring]
        since = reads.first_needed(top)
        now = float(harvest)
        a = whole.process({"pg_config": {}, "entries": entries}, now)
        b = reads.process(
            {"pg_config": {}, "entries": [e for e in entries if e["record_id"] >= since]}, now
        )
        assert a == b, harvest
        top = max([top, *ring])
    assert whole.counts == reads.counts and sum(whole.counts.values()) > 100
