"""Ingest by columns (no Python object per event) reads exactly what the event path reads."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd
import pytest

from diag import schema
from diag.errors import SchemaError
from diag.proto import diag_pb2 as pb
from diag.store.run_store import RunStore
from diag.transport import codec
from tests.fakes.events import T0, Source, batch


def _events() -> list[schema.Event]:
    r0, r1, d = Source("n0", 0), Source("n1", 1), Source("n0")
    out: list[schema.Event] = []
    for s in range(4):
        loss = None if s == 1 else float("nan") if s == 2 else 0.5
        out += [r0.step(s, loss=loss), r1.step(s), r0.collective(s),
                d.gpu(T0 + s, 0, util=None if s else 50.0)]  # fmt: skip
    out.append(schema.HookHealth(**r1.env(T0), pid=7, num_dropped=3, last_error="é\x00x"))
    return out


def test_columns_hold_the_events_values() -> None:
    events = _events()
    cols = codec.columns_from_batch(batch(events))
    assert cols.kinds == [type(e).kind for e in events]
    assert cols.sources == [e.source for e in events] and cols.seqs == [e.seq for e in events]
    assert cols.steps == [e.step for e in events]
    for kind, columns in cols.columns.items():
        rows = [events[i] for i in cols.positions[kind]]
        for name, values in columns.items():
            want = [getattr(e, name) for e in rows]
            same = [a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
                    for a, b in zip(values, want, strict=True)]  # fmt: skip
            assert all(same), (kind, name, values, want)
    assert cols.columns["step"]["loss"][2] is None  # rank 0, step 1: no loss is None, not 0.0
    assert cols.columns["gpu"]["util_pct"][1] is None


def test_the_store_frames_are_the_same_either_way(tmp_path: Path) -> None:
    events = _events()
    a, b = RunStore.create(tmp_path / "a"), RunStore.create(tmp_path / "b")
    a.append(events)
    cols = codec.columns_from_batch(batch(events))
    for kind, columns in cols.columns.items():
        b.append_columns(kind, columns)
    assert a.kinds() == b.kinds() and a.num_buffered == b.num_buffered == len(events)
    for kind in a.kinds():
        pd.testing.assert_frame_equal(a.frame(kind), b.frame(kind))
    b.flush()
    for kind in a.kinds():
        pd.testing.assert_frame_equal(a.frame(kind), b.frame(kind))


@pytest.mark.parametrize("break_it", ["no payload", "no env", "no source"])
def test_an_invalid_event_rejects_the_batch(break_it: str) -> None:
    good = batch(_events()[:3])
    msg = good.events[1]
    if break_it == "no payload":
        msg.ClearField("step")
    elif break_it == "no env":
        msg.ClearField("env")
    else:
        msg.env.source = ""
    with pytest.raises(SchemaError) as cols_err:
        codec.columns_from_batch(good)
    with pytest.raises(SchemaError) as events_err:
        codec.events_from_batch(good)
    assert str(cols_err.value) == str(events_err.value)
    assert isinstance(pb.EventBatch, type) and dataclasses.is_dataclass(codec.BatchColumns)
