"""Text that is not valid Unicode (a lone surrogate: a non-UTF-8 byte as ``os.fsdecode`` keeps it)
in any text field of any event kind is sent escaped, never refused; valid text is untouched."""

from __future__ import annotations

import dataclasses
import os
import typing

import pytest

from diag import schema
from diag.transport import codec

BAD = "ck" + os.fsdecode(b"\xff") + ".pt \ud800"  # a byte kept as a surrogate, and a lone one


def _sample(cls: type[schema.Event]) -> schema.Event:
    """An event of ``cls`` with ``BAD`` in every text field (envelope included)."""
    hints = typing.get_type_hints(cls)
    values = {str: BAD, int: 7, float: 0.5, bool: True}
    kwargs = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        kwargs[f.name] = values[args[0] if args else tp]
    return cls(**kwargs)  # type: ignore[arg-type]


def test_escape_text() -> None:
    assert codec.escape_text(os.fsdecode(b"/data/ck\xff.pt")) == "/data/ck\\xff.pt"
    assert codec.escape_text("a\ud800b") == "a\\ud800b"
    assert codec.escape_text("élan /ok.pt") == "élan /ok.pt"


@pytest.mark.parametrize("kind", list(schema.EVENT_TYPES))
def test_every_text_field_of_every_kind_is_sent_escaped(kind: str) -> None:
    ev = _sample(schema.EVENT_TYPES[kind])
    sender = "host" + os.fsdecode(b"\xfe") + "/rank0/1"
    batch, (back,) = codec.decode_batch(codec.encode_batch([ev], sender=sender, sent_ns=1))
    assert batch.sender == "host\\xfe/rank0/1"
    for f in dataclasses.fields(ev):
        sent = getattr(ev, f.name)
        want = "ck\\xff.pt \\ud800" if isinstance(sent, str) else sent
        assert getattr(back, f.name) == want, f.name
