"""Events <-> proto messages. The one place that knows how a dataclass maps onto the wire.

The mapping is by field name (the proto is generated from the schema, see
``scripts/gen_proto.py``), so it needs no per-kind code. Decoding validates: a message of an
unknown kind, a missing envelope or a different schema major version raise :class:`SchemaError`.

Text that is not valid Unicode, a Python ``str`` holding lone surrogates (a file name or an
argument with a non-UTF-8 byte, as ``os.fsdecode`` gives it), is sent escaped
(:func:`escape_text`: ``ck\\xff.pt``), since a proto string must be UTF-8. The escaping runs
only for an event that holds such text: encoding everything else costs nothing more.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from diag import schema
from diag.errors import SchemaError
from diag.proto import diag_pb2 as pb

_PB_CLASSES = {kind: getattr(pb, cls.__name__) for kind, cls in schema.EVENT_TYPES.items()}
_PAYLOAD = {kind: schema.payload_fields(cls) for kind, cls in schema.EVENT_TYPES.items()}
_SURROGATE = re.compile("[\ud800-\udfff]")
_OPTIONAL = {
    kind: frozenset(f.name for f in dataclasses.fields(cls) if "None" in str(f.type))
    for kind, cls in schema.EVENT_TYPES.items()
}


def escape_text(text: str) -> str:
    """``text`` as valid Unicode: each byte ``os.fsdecode`` kept as a lone surrogate written as
    ``\\xNN`` (``"ck\\udcff.pt"`` -> ``"ck\\\\xff.pt"``), any other lone surrogate as
    ``\\uNNNN``; valid text is returned unchanged."""
    return _SURROGATE.sub(_escape_one, text)


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def _escaped(ev: schema.Event) -> schema.Event:
    """``ev`` with every text field escaped (:func:`escape_text`)."""
    text: dict[str, object] = {
        f.name: escape_text(value)
        for f in dataclasses.fields(ev)
        if isinstance(value := getattr(ev, f.name), str)
    }
    return dataclasses.replace(ev, **text)  # type: ignore[arg-type]


def event_to_proto(ev: schema.Event) -> pb.Event:
    """One event as a proto ``Event`` (envelope plus the payload of its kind); text that is not
    valid Unicode is escaped (:func:`escape_text`). A field whose value does not fit its proto
    type (an ``int`` beyond int64, a ``str`` in a number field) raises ``ValueError`` or
    ``TypeError``."""
    try:
        return _to_proto(ev)
    except UnicodeEncodeError:  # protobuf refuses lone surrogates: the slow path, this event only
        return _to_proto(_escaped(ev))


def _to_proto(ev: schema.Event) -> pb.Event:
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
    return protos_to_batch([event_to_proto(ev) for ev in events], sender=sender, sent_ns=sent_ns)


def protos_to_batch(protos: Iterable[pb.Event], *, sender: str, sent_ns: int) -> pb.EventBatch:
    """An ``EventBatch`` of events already encoded (:func:`event_to_proto`)."""
    batch = pb.EventBatch(
        schema_version=schema.SCHEMA_VERSION, sender=escape_text(sender), sent_ns=sent_ns
    )
    batch.events.extend(protos)
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


@dataclasses.dataclass(slots=True)
class BatchColumns:
    """A batch decoded by columns, with no Python object per event (the analyzer's ingest):
    per event in batch order its kind, source, seq and step; per kind its rows as columns (every
    field of the kind's dataclass, in order) and each row's index in the batch."""

    kinds: list[str]
    sources: list[str]
    seqs: list[int]
    steps: list[int]
    columns: dict[str, dict[str, list[object]]]
    positions: dict[str, list[int]]


def columns_from_batch(batch: pb.EventBatch) -> BatchColumns:
    """:func:`events_from_batch`'s validation and values, as columns (see :class:`BatchColumns`);
    :class:`SchemaError` (one line) for the first invalid event: nothing of the batch is used.
    Each event is read with one C-level getter per part (envelope, payload) into a row tuple;
    the rows of a kind are transposed into columns once at the end."""
    check_version(batch.schema_version)
    env_get = _ENV_GETTER
    out = BatchColumns([], [], [], [], {}, {})
    kinds, sources, seqs, steps = out.kinds, out.sources, out.seqs, out.steps
    rows: dict[str, list[tuple[object, ...]]] = {}
    for i, msg in enumerate(batch.events):
        kind = msg.WhichOneof("payload")
        if kind is None or kind not in _ROW_GETTERS:
            raise SchemaError(f"event has no known payload kind (got {kind!r})")
        if not msg.HasField("env"):
            raise SchemaError(f"{kind} event has no envelope")
        env: tuple[Any, ...] = env_get(msg.env)  # ENVELOPE_FIELDS order: ..., source, seq, step
        if not env[5]:
            raise SchemaError(f"{kind} event has an empty source")
        payload = getattr(msg, kind)
        get, optional = _ROW_GETTERS[kind]
        values = get(payload)
        if optional:  # a field with presence that is not set is None, not its default
            patched = list(values)
            for j, name in optional:
                if not payload.HasField(name):
                    patched[j] = None
            values = tuple(patched)
        kind_rows = rows.get(kind)
        if kind_rows is None:
            kind_rows = rows[kind] = []
            out.positions[kind] = []
        kind_rows.append(env + values)
        out.positions[kind].append(i)
        kinds.append(kind)
        sources.append(env[5])
        seqs.append(env[6])
        steps.append(env[7])
    for kind, kind_rows in rows.items():
        names = (*schema.ENVELOPE_FIELDS, *_PAYLOAD[kind])
        out.columns[kind] = {
            n: list(c) for n, c in zip(names, zip(*kind_rows, strict=True), strict=True)
        }
    return out


def _tuple_getter(names: Sequence[str]) -> Callable[[object], tuple[object, ...]]:
    """``obj -> (obj.a, obj.b, ...)`` in one C call, a tuple also for one name or none."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)


assert schema.ENVELOPE_FIELDS[5:8] == ("source", "seq", "step")
_ENV_GETTER = _tuple_getter(schema.ENVELOPE_FIELDS)
#: kind -> (payload row getter, the (position, name) of its fields with presence)
_ROW_GETTERS = {
    kind: (
        _tuple_getter(_PAYLOAD[kind]),
        tuple((j, n) for j, n in enumerate(_PAYLOAD[kind]) if n in _OPTIONAL[kind]),
    )
    for kind in schema.EVENT_TYPES
}


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
