"""Ingest by columns (no Python object per event) reads exactly what the event path reads, from a
batch of row events and from the same events sent as column blocks (``EventBatch.columns``)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _wire(events: list[schema.Event], wire: str) -> tuple[pb.EventBatch, list[schema.Event]]:
    """The batch on ``wire`` and the events in the order it holds them (column blocks group a
    batch's events by kind, in order of each kind's first event)."""
    rows = batch(events)
    if wire == "rows":
        return rows, events
    first = {k: i for i, k in reversed(list(enumerate(type(e).kind for e in events)))}
    order = sorted(range(len(events)), key=lambda i: first[type(events[i]).kind])
    return codec.with_columns(rows), [events[i] for i in order]


def _same(a: object, b: object) -> bool:
    return a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    )


@pytest.mark.parametrize("wire", ["rows", "columns"])
def test_columns_hold_the_events_values(wire: str) -> None:
    sent, events = _wire(_events(), wire)
    cols = codec.columns_from_batch(sent)
    assert cols.kinds == [type(e).kind for e in events]
    assert cols.sources == [e.source for e in events]
    assert cols.seqs.tolist() == [e.seq for e in events]
    assert cols.steps.tolist() == [e.step for e in events]
    for kind, columns in cols.columns.items():
        rows = [events[i] for i in cols.positions[kind].tolist()]
        for name, values in columns.items():
            got = values.tolist() if isinstance(values, np.ndarray) else values
            want = [getattr(e, name) for e in rows]
            assert all(_same(a, b) for a, b in zip(got, want, strict=True)), (kind, name, got)
            assert [type(v) for v in got] == [type(v) for v in want], (kind, name)
    assert cols.columns["step"]["loss"][2] is None  # rank 0, step 1: no loss is None, not 0.0
    assert cols.columns["gpu"]["util_pct"][1] is None
    assert _same_events(codec.events_from_batch(sent), events)


def _same_events(a: list[schema.Event], b: list[schema.Event]) -> bool:
    return len(a) == len(b) and all(
        type(x) is type(y)
        and all(
            _same(getattr(x, f.name), getattr(y, f.name))
            and type(getattr(x, f.name)) is type(getattr(y, f.name))
            for f in dataclasses.fields(x)
        )
        for x, y in zip(a, b, strict=True)
    )


def test_column_blocks_survive_the_wire() -> None:
    rows, _ = _wire(_events(), "rows")
    blocks = codec.with_columns(rows)
    assert not blocks.events and len(blocks.columns) == len({type(e).kind for e in _events()})
    again = pb.EventBatch.FromString(blocks.SerializeToString())
    _, events = _wire(_events(), "columns")
    assert _same_events(codec.events_from_batch(again), events)


@pytest.mark.parametrize("wire", ["rows", "columns"])
def test_the_store_frames_are_the_same_either_way(tmp_path: Path, wire: str) -> None:
    sent, events = _wire(_events(), wire)
    a, b = RunStore.create(tmp_path / "a"), RunStore.create(tmp_path / "b")
    a.append(events)
    cols = codec.columns_from_batch(sent)
    for kind, columns in cols.columns.items():
        b.append_columns(kind, columns)
    assert a.kinds() == b.kinds() and a.num_buffered == b.num_buffered == len(events)
    for kind in a.kinds():
        pd.testing.assert_frame_equal(a.frame(kind), b.frame(kind))
    b.flush()
    for kind in a.kinds():
        pd.testing.assert_frame_equal(a.frame(kind), b.frame(kind))


def test_a_kind_in_rows_and_in_a_block_is_one_set_of_columns() -> None:
    events = _events()
    mixed = batch(events[:6])
    mixed.columns.extend(codec.protos_to_columns(batch(events[6:]).events))
    cols = codec.columns_from_batch(mixed)
    steps = [e for e in events[:6] if e.kind == "step"] + [
        e for e in events[6:] if e.kind == "step"
    ]
    assert cols.columns["step"]["seq"] == [e.seq for e in steps]
    assert sorted(i for p in cols.positions.values() for i in p.tolist()) == list(
        range(len(events))
    )


@pytest.mark.parametrize(
    "break_it", ["short column", "long absent mask", "empty source", "no kind", "rows too many"]
)
def test_an_invalid_column_block_rejects_the_batch(break_it: str) -> None:
    sent = codec.with_columns(batch(_events()))
    block = sent.columns[0]
    assert block.WhichOneof("payload") == "step"
    if break_it == "short column":
        del block.step.duration_ns[-1]
    elif break_it == "long absent mask":
        block.step.loss_absent.extend([False] * (block.num_rows + 1))
    elif break_it == "empty source":
        block.step.source[2] = ""
    elif break_it == "no kind":
        block.ClearField("step")
    else:
        block.num_rows += 1
    with pytest.raises(SchemaError) as cols_err:
        codec.columns_from_batch(sent)
    with pytest.raises(SchemaError) as events_err:
        codec.events_from_batch(sent)
    assert str(cols_err.value) == str(events_err.value)
    assert "\n" not in str(cols_err.value)


def test_a_block_from_an_earlier_minor_version_gets_the_new_fields_defaults() -> None:
    # a 1.17 daemon's step blocks have no cpu_wait_data_ns (schema 1.18) and, had it been older
    # still, no device_wait_ns (1.11, optional): every row gets the default, as a row-wise
    # event missing them would
    events = [
        dataclasses.replace(e, cpu_wait_data_ns=5, device_wait_ns=9) if e.kind == "step" else e
        for e in _events()
    ]
    sent = codec.with_columns(batch(events))
    block = sent.columns[0]
    assert block.WhichOneof("payload") == "step"
    block.step.ClearField("cpu_wait_data_ns")
    block.step.ClearField("device_wait_ns")
    block.step.ClearField("device_wait_ns_absent")
    cols = codec.columns_from_batch(sent).columns["step"]
    n = block.num_rows
    assert cols["cpu_wait_data_ns"].tolist() == [0] * n and cols["device_wait_ns"] == [None] * n
    steps = [e for e in codec.events_from_batch(sent) if e.kind == "step"]
    assert [(e.cpu_wait_data_ns, e.device_wait_ns) for e in steps] == [(0, None)] * n
    # a field every version has is never made up
    block.step.ClearField("start_ns")
    with pytest.raises(SchemaError, match="start_ns has 0 values"):
        codec.columns_from_batch(sent)


@pytest.mark.parametrize(
    ("version", "reads"),
    [("1.13", True), ("1.14", True), ("1.12", False), ("2.13", False), ("", False), ("x", False)],
)
def test_which_analyzers_read_columns(version: str, reads: bool) -> None:
    assert codec.reads_columns(version) is reads


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


def test_a_blocks_labels_share_one_string_per_value_across_batches() -> None:
    """The envelope's labels (source, host, job id) of column blocks are interned as decoded: the
    rows an analyzer buffers hold one string object per distinct value, whichever batch brought
    it (a new object per row was ~180 of the ~470 bytes a buffered step row cost), and the values
    are the events' own."""
    first = codec.columns_from_batch(codec.with_columns(batch(_events())))
    again = codec.columns_from_batch(codec.with_columns(batch(_events())))
    for name in ("source", "host", "job_id"):
        a, b = first.columns["step"][name], again.columns["step"][name]
        assert a == b
        assert all(x is y for x, y in zip(a, b, strict=True)), name
    sources = first.columns["step"]["source"]
    assert len({id(s) for s in sources}) == len(set(sources)) == 2


_INT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_TEXT = st.text(max_size=6)


@st.composite
def _rows(draw: st.DrawFn, kind: str) -> codec.EventRows:
    """Rows of ``kind`` as a hook hands them to its sender: each payload any of the kind's
    fields (one left out takes its default; an optional one may be None), of its type."""
    cls = schema.EVENT_TYPES[kind]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    n = draw(st.integers(min_value=1, max_value=5))
    payloads = []
    for _ in range(n):
        payload = {}
        for name in schema.payload_fields(cls):
            f = fields[name]
            base = str(f.type).split("|")[0].strip()
            value = {"int": _INT, "float": st.floats(allow_nan=False), "bool": st.booleans(),
                     "str": _TEXT}[base]  # fmt: skip
            if "None" in str(f.type):
                value = st.none() | value
            required = f.default is dataclasses.MISSING
            if required or draw(st.booleans()):
                payload[name] = draw(value)
        payloads.append(payload)
    env = {"ts_ns": draw(_INT), "host": draw(_TEXT), "rank": draw(_INT),
           "local_rank": draw(_INT), "job_id": draw(_TEXT),
           "source": "h/rank0/1" + draw(_TEXT)}  # fmt: skip
    seqs = draw(st.lists(_INT, min_size=n, max_size=n))
    steps = draw(st.lists(_INT, min_size=n, max_size=n))
    return codec.EventRows(kind, env, seqs, steps, payloads)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["collective", "step"]).flatmap(_rows))
def test_a_block_of_rows_is_the_block_its_events_make_and_decodes_to_them(
    rows: codec.EventRows,
) -> None:
    """The hook's block (``rows_to_block``: no dataclass or message per event) is byte for byte
    the block ``columns_to_blocks`` makes of the same events as dataclasses, and the analyzer's
    and the daemon's decoders give those events back."""
    try:
        block = codec.rows_to_block(rows)
    except UnicodeEncodeError:  # lone surrogates: the sender goes event by event (escaped)
        return
    events = rows.events()
    protos = [codec.event_to_proto(e) for e in events]
    assert [block] == codec.protos_to_columns(protos)
    sent = pb.EventBatch(schema_version=schema.SCHEMA_VERSION)
    sent.columns.append(block)
    got = codec.events_from_batch(pb.EventBatch.FromString(sent.SerializeToString()))
    assert got == events
