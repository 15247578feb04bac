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
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from diag import schema
from diag.errors import SchemaError
from diag.proto import diag_pb2 as pb

if TYPE_CHECKING:  # numpy loads with the first column decode: the hook imports this module
    import numpy as np

_PB_CLASSES = {kind: getattr(pb, cls.__name__) for kind, cls in schema.EVENT_TYPES.items()}
_PAYLOAD = {kind: schema.payload_fields(cls) for kind, cls in schema.EVENT_TYPES.items()}
_SURROGATE = re.compile("[\ud800-\udfff]")
#: the first minor version whose analyzer reads column blocks (``EventBatch.columns``)
COLUMNS_SINCE = (1, 13)
#: the first schema whose analyzers read ``CollectiveSummary`` events (a daemon sums for no other)
SUMMARIES_SINCE = (1, 17)
#: suffix of an optional field's absence mask in a column block (scripts/gen_proto.py)
ABSENT_SUFFIX = "_absent"
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
    """All events of a batch, validated, its row events then its column blocks' rows; one bad
    event rejects the batch (nothing half-stored)."""
    check_version(batch.schema_version)
    events = [event_from_proto(m) for m in batch.events]
    for block in batch.columns:
        kind, columns = block_columns(block)
        cls = schema.EVENT_TYPES[kind]
        names = _COLUMNS[kind]
        values = [_as_list(c) for c in columns.values()]
        events += [cls(**dict(zip(names, row, strict=True))) for row in zip(*values, strict=True)]
    return events


@dataclasses.dataclass(slots=True)
class BatchColumns:
    """A batch decoded by columns, with no Python object per event (the analyzer's ingest):
    per event in batch order (row events first, then the column blocks' rows) its kind, source,
    seq and step; per kind its rows as columns (every field of the kind's dataclass, in order: a
    list, or for a number field of a column block without absent values a numpy array) and each
    row's index in the batch."""

    kinds: list[str]
    sources: list[str]
    seqs: np.ndarray  # int64, one per event
    steps: np.ndarray  # int64, one per event
    columns: dict[str, dict[str, Any]]
    positions: dict[str, np.ndarray]


def columns_from_batch(batch: pb.EventBatch) -> BatchColumns:
    """:func:`events_from_batch`'s validation and values, as columns (see :class:`BatchColumns`);
    :class:`SchemaError` (one line) for the first invalid event: nothing of the batch is used.
    Each row event is read with one C-level getter per part (envelope, payload) into a row tuple,
    the rows of a kind transposed into columns once at the end; a column block's number columns
    are copied into numpy arrays in one C call each."""
    import numpy as np

    check_version(batch.schema_version)
    env_get = _ENV_GETTER
    kinds: list[str] = []
    sources: list[str] = []
    seqs: list[Any] = []
    steps: list[Any] = []
    columns: dict[str, dict[str, Any]] = {}
    positions: dict[str, list[Any]] = {}
    rows: dict[str, list[tuple[object, ...]]] = {}
    row_pos: dict[str, list[int]] = {}
    row_seqs: list[int] = []
    row_steps: list[int] = []
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
            row_pos[kind] = []
        kind_rows.append(env + values)
        row_pos[kind].append(i)
        kinds.append(kind)
        sources.append(env[5])
        row_seqs.append(env[6])
        row_steps.append(env[7])
    if rows:
        seqs.append(np.asarray(row_seqs, dtype=np.int64))
        steps.append(np.asarray(row_steps, dtype=np.int64))
    for kind, kind_rows in rows.items():
        columns[kind] = {
            n: list(c) for n, c in zip(_COLUMNS[kind], zip(*kind_rows, strict=True), strict=True)
        }
        positions[kind] = [np.asarray(row_pos[kind], dtype=np.int64)]
    for block in batch.columns:
        kind, block_cols = block_columns(block)
        n = len(block_cols["source"])
        if not n:
            continue
        start = len(kinds)
        kinds.extend([kind] * n)
        sources.extend(block_cols["source"])
        seqs.append(np.asarray(block_cols["seq"], dtype=np.int64))
        steps.append(np.asarray(block_cols["step"], dtype=np.int64))
        have = columns.get(kind)
        if have is None:
            columns[kind] = block_cols
            positions[kind] = []
        else:  # the kind again (rows, another block): one list per column
            for name, values in block_cols.items():
                have[name] = _as_list(have[name]) + _as_list(values)
        positions[kind].append(np.arange(start, start + n, dtype=np.int64))
    empty = np.zeros(0, dtype=np.int64)
    return BatchColumns(
        kinds,
        sources,
        np.concatenate(seqs) if seqs else empty,
        np.concatenate(steps) if steps else empty,
        columns,
        {k: np.concatenate(v) for k, v in positions.items()},
    )


def _as_list(values: Any) -> list[object]:
    """A column as a list of Python values (a numpy array's ``tolist``)."""
    tolist = getattr(values, "tolist", None)
    return tolist() if tolist is not None else list(values)


def block_columns(block: pb.EventColumns) -> tuple[str, dict[str, Any]]:
    """``(kind, columns)`` of one column block, every field of the kind in order: a number
    column as a numpy array (a list with ``None`` where an optional field is absent), a text
    column as a list; :class:`SchemaError` (one line) for a block of no known kind, a column
    whose length is not the block's ``num_rows`` or an empty ``source``. A column with no
    values at all in a block with rows is a field its sender's schema did not have yet (a
    daemon of an earlier minor version): every row gets the field's default, as a row-wise
    event would; a field with no default (one every version has) must be there."""
    import numpy as np

    kind = block.WhichOneof("payload")
    if kind is None or kind not in _COLUMNS:
        raise SchemaError(f"column block has no known payload kind (got {kind!r})")
    n = block.num_rows
    msg = getattr(block, kind)
    columns: dict[str, Any] = {}
    dtypes = _COLUMN_DTYPES[kind]
    newer = _NEWER_FIELDS[kind]
    unknown: set[str] = set()
    for name in _COLUMNS[kind]:
        raw = getattr(msg, name)
        if len(raw) != n:
            if len(raw) == 0 and name in newer:
                default = newer[name]
                if default is None or dtypes[name] is None:
                    columns[name] = [default] * n
                else:
                    columns[name] = np.full(n, default, dtype=dtypes[name])
                unknown.add(name)
                continue
            raise SchemaError(f"{kind} column block: {name} has {len(raw)} values for {n} rows")
        dtype = dtypes[name]
        if dtype is not None:
            columns[name] = np.array(raw, dtype=dtype)
        elif name in schema.LABEL_FIELDS:
            # one string object per distinct value, not one per row: at 16,384 ranks ~180 of
            # the ~470 bytes a buffered step row held were these strings
            columns[name] = list(map(sys.intern, raw))
        else:
            columns[name] = list(raw)
    for name in _OPTIONAL_COLUMNS[kind]:
        absent = getattr(msg, name + ABSENT_SUFFIX)
        if not len(absent) or name in unknown:
            continue
        if len(absent) != n:
            raise SchemaError(
                f"{kind} column block: {name}{ABSENT_SUFFIX} has {len(absent)} values for {n} rows"
            )
        gone = np.array(absent, dtype=bool)
        if gone.all():
            columns[name] = [None] * n
        elif gone.any():
            values = _as_list(columns[name])
            for i in np.flatnonzero(gone).tolist():
                values[i] = None
            columns[name] = values
    if "" in columns["source"]:
        raise SchemaError(f"{kind} event has an empty source")
    return kind, columns


def protos_to_columns(protos: Iterable[pb.Event]) -> list[pb.EventColumns]:
    """Encoded events (:func:`event_to_proto`) as column blocks, one per kind in order of first
    appearance, each kind's rows in their order: the row decode (:func:`columns_from_batch`, its
    validation included) re-encoded by :func:`columns_to_blocks`. What a daemon ships to an
    analyzer that reads columns."""
    batch = pb.EventBatch(schema_version=schema.SCHEMA_VERSION)
    batch.events.extend(protos)
    return columns_to_blocks(columns_from_batch(batch).columns)


def columns_to_blocks(columns: dict[str, dict[str, list[object]]]) -> list[pb.EventColumns]:
    """Column blocks of rows already decoded (kind -> every field's column, ``None`` where an
    optional field is absent), one per kind with rows: the analyzer's WAL record of the part of
    a batch it kept."""
    blocks = []
    for kind, cols in columns.items():
        n = len(cols["source"])
        if not n:
            continue
        block = pb.EventColumns(num_rows=n)
        msg = getattr(block, kind)
        optional = _OPTIONAL_COLUMNS[kind]
        for name in _COLUMNS[kind]:
            values = _as_list(cols[name])
            if name in optional and None in values:
                getattr(msg, name + ABSENT_SUFFIX).extend(v is None for v in values)
                zero = _ZERO[kind][name]
                values = [zero if v is None else v for v in values]
            getattr(msg, name).extend(values)
        blocks.append(block)
    return blocks


def with_columns(batch: pb.EventBatch) -> pb.EventBatch:
    """``batch`` with its row events moved into column blocks (same header, same events)."""
    out = pb.EventBatch(
        schema_version=batch.schema_version, sender=batch.sender, sent_ns=batch.sent_ns
    )
    out.columns.extend(batch.columns)
    out.columns.extend(protos_to_columns(batch.events))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class EventRows:
    """Events of one kind from one emitter, not yet made into objects: the envelope fields they
    share (``env``: every envelope field but ``seq`` and ``step``), and per event its ``seq``,
    ``step`` and payload (the kind's payload fields by name; one left out takes the field's
    default). A hook's harvest of collectives goes to the wire as one column block of them
    (:func:`rows_to_block`) instead of a dataclass and a message per event;
    :meth:`events` makes the dataclasses where they are needed after all."""

    kind: str
    env: dict[str, Any]
    seqs: list[int]
    steps: list[int]
    payloads: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.seqs)

    def events(self) -> list[schema.Event]:
        """The same events as dataclasses, in order."""
        cls = schema.EVENT_TYPES[self.kind]
        env = self.env
        return [
            cls(**env, seq=seq, step=step, **payload)
            for seq, step, payload in zip(self.seqs, self.steps, self.payloads, strict=True)
        ]

    def split(self, k: int) -> tuple[EventRows, EventRows]:
        """The first ``k`` events and the rest."""
        a = EventRows(self.kind, self.env, self.seqs[:k], self.steps[:k], self.payloads[:k])
        b = EventRows(self.kind, self.env, self.seqs[k:], self.steps[k:], self.payloads[k:])
        return a, b


def rows_to_block(rows: EventRows, tick: Callable[[], None] | None = None) -> pb.EventColumns:
    """``rows`` as one column block: their columns, one list per field (``tick``, if given,
    between fields), written by :func:`columns_to_blocks`, so the block its events would make
    (decoded, it gives them back: :func:`events_from_batch`), without a dataclass or a message
    per event. Raises ``KeyError`` for a payload without a field that has no default,
    ``TypeError``/``ValueError`` for a value its field cannot hold and ``UnicodeEncodeError``
    for text that is not valid Unicode: the caller then encodes the events one by one
    (:func:`event_to_proto` escapes such text)."""
    kind, n = rows.kind, len(rows)
    env = rows.env
    columns: dict[str, list[Any]] = {}
    for name in schema.ENVELOPE_FIELDS:
        columns[name] = (
            rows.seqs if name == "seq" else rows.steps if name == "step" else [env[name]] * n
        )
    defaults = _NEWER_FIELDS[kind]
    payloads = rows.payloads
    for name in _PAYLOAD[kind]:
        if tick is not None:
            tick()
        if name in defaults:
            default = defaults[name]
            columns[name] = [p.get(name, default) for p in payloads]
        else:
            columns[name] = [p[name] for p in payloads]
    blocks = columns_to_blocks({kind: columns})
    return blocks[0] if blocks else pb.EventColumns(num_rows=0)


def reads_columns(version: str) -> bool:
    """Whether a peer of schema ``version`` (its ``TimeReply``/``IngestReply``) reads column
    blocks: same major, minor >= :data:`COLUMNS_SINCE`'s; False for "" or an unreadable one."""
    return _at_least(version, COLUMNS_SINCE)


def control_seq(msg: pb.ControlMessage) -> int:
    """The ``seq`` of a control message, whatever its body (the analyzer numbers them all in one
    sequence; a daemon polls after the newest it saw)."""
    body = msg.WhichOneof("body")
    return (
        msg.probe.seq if body == "probe" else msg.fetch.seq if body == "fetch" else msg.profile.seq
    )


def reads_summaries(version: str) -> bool:
    """Whether a peer of schema ``version`` reads ``CollectiveSummary`` events (an older analyzer
    refuses a batch holding one as malformed): same major, minor >= :data:`SUMMARIES_SINCE`'s."""
    return _at_least(version, SUMMARIES_SINCE)


def _at_least(version: str, since: tuple[int, int]) -> bool:
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return major == schema.SCHEMA_MAJOR == since[0] and minor >= since[1]


def _tuple_getter(names: Sequence[str]) -> Callable[[object], tuple[object, ...]]:
    """``obj -> (obj.a, obj.b, ...)`` in one C call, a tuple also for one name or none."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)


assert schema.ENVELOPE_FIELDS[5:8] == ("source", "seq", "step")
#: kind -> every column of the kind in order (the envelope's fields, then the payload's)
_COLUMNS = {kind: (*schema.ENVELOPE_FIELDS, *_PAYLOAD[kind]) for kind in schema.EVENT_TYPES}
#: kind -> its optional fields (each with an ``_absent`` mask in a column block)
_OPTIONAL_COLUMNS = {
    kind: tuple(n for n in _COLUMNS[kind] if n in _OPTIONAL[kind]) for kind in schema.EVENT_TYPES
}
#: kind -> field -> the numpy dtype of its column in a decoded block (None: text, a list)
_COLUMN_DTYPES = {
    kind: {
        f.name: {"int": "int64", "float": "float64", "bool": "bool"}.get(
            str(f.type).split("|")[0].strip()
        )
        for f in dataclasses.fields(cls)
    }
    for kind, cls in schema.EVENT_TYPES.items()
}
#: kind -> field -> its default, for the payload fields that have one: a column block from a
#: sender of an earlier minor version lacks those added since (schema.py's versioning)
_NEWER_FIELDS = {
    kind: {
        f.name: f.default
        for f in dataclasses.fields(cls)
        if f.name in _PAYLOAD[kind] and f.default is not dataclasses.MISSING
    }
    for kind, cls in schema.EVENT_TYPES.items()
}
#: kind -> field -> the proto default written where an optional field is absent
_ZERO = {
    kind: {
        f.name: {"int": 0, "float": 0.0, "str": "", "bool": False}.get(
            str(f.type).split("|")[0].strip(), 0
        )
        for f in dataclasses.fields(cls)
        if f.name in _OPTIONAL[kind]
    }
    for kind, cls in schema.EVENT_TYPES.items()
}
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
