"""A hook batch with a column block (a harvest's collectives, diag.hook.sender) as the daemon
queues it: one message per event, each source's events in ``seq`` order, so that no cut of the
daemon's queue puts a step event in a batch before its collectives (the analyzer keeps an event
only above its source's highest seq in earlier batches)."""

from __future__ import annotations

from diag import schema
from diag.daemon.daemon import _in_seq_order
from diag.proto import diag_pb2 as pb
from diag.transport import codec
from diag.transport.codec import EventRows

SOURCE = "n0/rank1/7"


def test_a_hook_batch_with_a_block_is_queued_in_seq_order_one_message_per_event() -> None:
    env = {"ts_ns": 1, "host": "n0", "rank": 1, "local_rank": 1, "job_id": "j", "source": SOURCE}
    payloads = [{"op": "all_reduce", "seq_id": i, "enqueue_ns": 10 + i} for i in range(3)]
    colls = EventRows("collective", env, [3, 4, 5], [2, 2, 2], payloads)
    info = schema.RankInfo(**env, seq=2, step=-1, pid=7)
    step = schema.StepEvent(**env, seq=6, step=2, start_ns=0, end_ns=9, duration_ns=9)
    batch = codec.protos_to_batch([codec.event_to_proto(e) for e in (info, step)], sender=SOURCE,
                                  sent_ns=1)  # fmt: skip
    batch.columns.append(codec.rows_to_block(colls))
    received = pb.EventBatch.FromString(batch.SerializeToString())
    events = codec.events_from_batch(received)
    assert [e.seq for e in events] == [2, 6, 3, 4, 5]  # rows first, then the block's
    protos, ordered = _in_seq_order(list(received.events), events)
    assert [e.seq for e in ordered] == [2, 3, 4, 5, 6]
    assert [codec.event_from_proto(p) for p in protos] == ordered
    assert ordered[1:4] == colls.events()
