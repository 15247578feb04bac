"""Validation of a probe request that arrives as data (``diag replay --via-analyzer``, the node
daemon): a registry name and a JSON object of parameters, nothing else.

:func:`validate` accepts a request only when the name is in :data:`probes.PROBES` and the JSON is
an object whose keys are fields of that probe's ``Params`` dataclass and whose values have exactly
the field's annotated type (``int``, ``float``, ``str``, ``bool``, tuples as JSON lists, nested);
the dataclass's own ``__post_init__`` then checks ranges and names (dtypes, ops). Nothing in the
payload is ever evaluated, imported or passed to a shell: a string can only land in a ``str``
field, where each probe accepts only its fixed names. ``timeout_s`` is capped at
:data:`MAX_TIMEOUT_S` and the text at :data:`MAX_PARAMS_CHARS`.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from probes import PROBES

MAX_PARAMS_CHARS = 4096
MAX_TIMEOUT_S = 300.0


class RequestRejected(ValueError):
    """A probe request that is not run; the message is one line that says why."""


def _conforms(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_conforms(v, args[0]) for v in value)
        return len(value) == len(args) and all(
            _conforms(v, a) for v, a in zip(value, args, strict=True)
        )
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return False


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def validate(name: str, params_json: str) -> Any:
    """The probe's typed ``Params`` for a request; :class:`RequestRejected` (one line) if the name
    is not registered or the parameters are not exactly the probe's typed fields."""
    if name not in PROBES:
        raise RequestRejected(f"unknown probe {name[:40]!r} (known: {', '.join(sorted(PROBES))})")
    if len(params_json) > MAX_PARAMS_CHARS:
        raise RequestRejected(f"params longer than {MAX_PARAMS_CHARS} characters")
    try:
        raw = json.loads(params_json) if params_json.strip() else {}
    except ValueError:
        raise RequestRejected("params are not JSON") from None
    if not isinstance(raw, dict):
        raise RequestRejected("params must be a JSON object")
    cls = PROBES[name].Params
    hints = typing.get_type_hints(cls)
    for key, value in raw.items():
        if key not in hints:
            raise RequestRejected(f"{name} has no parameter {str(key)[:40]!r}")
        if not _conforms(value, hints[key]):
            want = getattr(hints[key], "__name__", str(hints[key]))
            raise RequestRejected(f"{name} parameter {key!r} is not {want}")
    if float(raw.get("timeout_s", 0.0)) > MAX_TIMEOUT_S:
        raise RequestRejected(f"timeout_s above {MAX_TIMEOUT_S:g} s")
    try:
        return cls(**{k: _tuples(v) for k, v in raw.items()})
    except (TypeError, ValueError) as exc:
        raise RequestRejected(f"{name} params: {' '.join(str(exc).split())}") from None
