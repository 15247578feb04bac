"""Events <-> proto messages. The one place that knows how a dataclass maps onto the wire.

The mapping is by field name (the proto is generated from the schema, see
``scripts/gen_proto.py``), so it needs no per-kind code. Decoding validates: a message of an
unknown kind, a missing envelope or a different schema major version raise :class:`SchemaError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from google.protobuf.message import DecodeError

from diag import schema
from diag.errors import SchemaError
from diag.proto import diag_pb2 as pb

_PB_CLASSES = {kind: getattr(pb, cls.__name__) for kind, cls in schema.EVENT_TYPES.items()}
_PAYLOAD = {kind: schema.payload_fields(cls) for kind, cls in schema.EVENT_TYPES.items()}
_OPTIONAL = {
    kind: frozenset(f.name for f in dataclasses.fields(cls) if "None" in str(f.type))
    for kind, cls in schema.EVENT_TYPES.items()
}


def event_to_proto(ev: schema.Event) -> pb.Event:
    """One event as a proto ``Event`` (envelope plus the payload of its kind)."""
    kind = type(ev).kind
    msg = pb.Event()
    env = msg.env
    for name in schema.ENVELOPE_FIELDS:
        setattr(env, name, getattr(ev, name))
    payload = getattr(msg, kind)
    for name in _PAYLOAD[kind]:
        value = getattr(ev, name)
        if value is not None:
            setattr(payload, name, value)
    if not _PAYLOAD[kind]:
        payload.SetInParent()
    return msg


def event_from_proto(msg: pb.Event) -> schema.Event:
    """The dataclass for one proto ``Event``; :class:`SchemaError` if it is not a valid one."""
    kind = msg.WhichOneof("payload")
    if kind is None or kind not in schema.EVENT_TYPES:
        raise SchemaError(f"event has no known payload kind (got {kind!r})")
    if not msg.HasField("env"):
        raise SchemaError(f"{kind} event has no envelope")
    kwargs: dict[str, object] = {name: getattr(msg.env, name) for name in schema.ENVELOPE_FIELDS}
    payload = getattr(msg, kind)
    optional = _OPTIONAL[kind]
    for name in _PAYLOAD[kind]:
        if name in optional and not payload.HasField(name):
            kwargs[name] = None
        else:
            kwargs[name] = getattr(payload, name)
    if not kwargs["source"]:
        raise SchemaError(f"{kind} event has an empty source")
    return schema.EVENT_TYPES[kind](**kwargs)  # type: ignore[arg-type]


def batch_to_proto(events: Iterable[schema.Event], *, sender: str, sent_ns: int) -> pb.EventBatch:
    batch = pb.EventBatch(schema_version=schema.SCHEMA_VERSION, sender=sender, sent_ns=sent_ns)
    batch.events.extend(event_to_proto(ev) for ev in events)
    return batch


def encode_batch(events: Iterable[schema.Event], *, sender: str, sent_ns: int) -> bytes:
    return batch_to_proto(events, sender=sender, sent_ns=sent_ns).SerializeToString()


def check_version(version: str) -> None:
    """Reject a batch written by an incompatible (different major) schema."""
    try:
        major = int(version.split(".", 1)[0])
    except ValueError:
        raise SchemaError(f"batch has an unreadable schema version {version!r}") from None
    if major != schema.SCHEMA_MAJOR:
        raise SchemaError(
            f"batch has schema version {version}, this diag reads {schema.SCHEMA_VERSION}"
        )


def events_from_batch(batch: pb.EventBatch) -> list[schema.Event]:
    """All events of a batch, validated; one bad event rejects the batch (nothing half-stored)."""
    check_version(batch.schema_version)
    return [event_from_proto(m) for m in batch.events]


def decode_batch(data: bytes) -> tuple[pb.EventBatch, list[schema.Event]]:
    """Parse serialized ``EventBatch`` bytes; :class:`SchemaError` with one line if malformed."""
    batch = pb.EventBatch()
    try:
        batch.ParseFromString(data)
    except (DecodeError, RuntimeError) as exc:
        raise SchemaError(f"malformed event batch ({len(data)} bytes): {exc}") from None
    return batch, events_from_batch(batch)


def events_to_protos(events: Sequence[schema.Event]) -> list[pb.Event]:
    return [event_to_proto(ev) for ev in events]
