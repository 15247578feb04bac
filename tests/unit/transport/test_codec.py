"""The schema and its proto mirror stay field-for-field equal, and every kind survives the wire."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import typing

import pytest

from diag import schema
from diag.errors import SchemaError
from diag.proto import diag_pb2 as pb
from diag.transport import codec
from tests.fakes.paths import REPO

_SPECIAL_FLOATS = (math.nan, math.inf, -math.inf, -0.0, 1e-300)


def _gen_proto_module():
    spec = importlib.util.spec_from_file_location("gen_proto", REPO / "scripts" / "gen_proto.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _value(tp: object, name: str, variant: int) -> object:
    """A non-default value for a field; variant 0 leaves optionals ``None``."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args:
        if variant == 0:
            return None
        tp = args[0]
    salt = sum(map(ord, name))
    if tp is bool:
        return bool(variant % 2)
    if tp is int:
        return [2**62 + salt, -(salt + 7), salt * 1000 + variant][variant % 3]
    if tp is float:
        if variant >= 2:
            return _SPECIAL_FLOATS[(salt + variant) % len(_SPECIAL_FLOATS)]
        return salt / 7.0 + variant
    if tp is str:
        return f"{name}-é/{variant}"
    raise AssertionError(f"unexpected field type {tp!r}")


def _sample(cls: type[schema.Event], variant: int) -> schema.Event:
    hints = typing.get_type_hints(cls)
    kwargs = {
        f.name: _value(hints[f.name], f.name, variant)
        for f in dataclasses.fields(cls)
        if f.name not in ("source",)
    }
    kwargs["source"] = f"host-{variant}/rank1/{variant}"
    return cls(**kwargs)  # type: ignore[arg-type]


def _assert_same(a: schema.Event, b: schema.Event) -> None:
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, float) and math.isnan(x):
            assert isinstance(y, float) and math.isnan(y), f.name
        else:
            assert x == y and type(x) is type(y), (f.name, x, y)
            if isinstance(x, float) and x == 0.0:
                assert math.copysign(1, x) == math.copysign(1, y), f.name


@pytest.mark.parametrize("kind", list(schema.EVENT_TYPES))
@pytest.mark.parametrize("variant", [0, 1, 2, 3, 4])
def test_every_kind_round_trips_through_the_proto(kind: str, variant: int) -> None:
    ev = _sample(schema.EVENT_TYPES[kind], variant)
    data = codec.encode_batch([ev, ev], sender="test", sent_ns=123)
    batch, decoded = codec.decode_batch(data)
    assert batch.sender == "test" and batch.sent_ns == 123
    assert batch.schema_version == schema.SCHEMA_VERSION
    assert len(decoded) == 2
    for got in decoded:
        _assert_same(ev, got)


def test_samples_exercise_none_nan_and_inf() -> None:
    seen_none = seen_nan = seen_inf = False
    for cls in schema.EVENT_TYPES.values():
        for variant in range(5):
            for f in dataclasses.fields(ev := _sample(cls, variant)):
                v = getattr(ev, f.name)
                seen_none |= v is None
                seen_nan |= isinstance(v, float) and math.isnan(v)
                seen_inf |= isinstance(v, float) and math.isinf(v)
    assert seen_none and seen_nan and seen_inf


@pytest.mark.parametrize("kind", list(schema.EVENT_TYPES))
def test_proto_messages_mirror_the_dataclasses(kind: str) -> None:
    cls = schema.EVENT_TYPES[kind]
    desc = getattr(pb, cls.__name__).DESCRIPTOR
    hints = typing.get_type_hints(cls)
    assert [f.name for f in desc.fields] == list(schema.payload_fields(cls))
    for field in desc.fields:
        optional = type(None) in typing.get_args(hints[field.name])
        assert field.has_presence == optional, field.name
    assert pb.Event.DESCRIPTOR.fields_by_name[kind].message_type is desc
    env = pb.Envelope.DESCRIPTOR
    assert [f.name for f in env.fields] == list(schema.ENVELOPE_FIELDS)


def test_committed_proto_matches_the_generator() -> None:
    rendered = _gen_proto_module().render()
    committed = (REPO / "diag" / "proto" / "diag.proto").read_text()
    assert committed == rendered, "diag.proto is stale: run python scripts/gen_proto.py"


def test_decode_rejects_malformed_input_with_one_line() -> None:
    ev = _sample(schema.StepEvent, 1)
    good = codec.batch_to_proto([ev], sender="s", sent_ns=0)
    cases = [b"\xff\xff\xff\xff garbage"]
    no_payload = pb.EventBatch()
    no_payload.CopyFrom(good)
    no_payload.events[0].ClearField("step")
    cases.append(no_payload.SerializeToString())
    old = pb.EventBatch()
    old.CopyFrom(good)
    old.schema_version = "2.0"
    cases.append(old.SerializeToString())
    for data in cases:
        with pytest.raises(SchemaError) as info:
            codec.decode_batch(data)
        assert "\n" not in str(info.value)
