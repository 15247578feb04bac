"""Validation of a probe request that arrives as data (``diag replay --via-analyzer``, the node
daemon): a registry name and a JSON object of parameters, nothing else.

:func:`validate` accepts a request only when the name is in :data:`probes.PROBES` and the JSON is
an object whose keys are fields of that probe's ``Params`` dataclass and whose values have exactly
the field's annotated type (``int``, ``float``, ``str``, ``bool``, tuples as JSON lists, nested);
the dataclass's own ``__post_init__`` then checks ranges and names (dtypes, ops). Nothing in the
payload is ever evaluated, imported or passed to a shell: a string can only land in a ``str``
field, where each probe accepts only its fixed names. ``timeout_s`` must be in
``(0, MAX_TIMEOUT_S]``, every number finite (no ``NaN``/``Infinity``) and an integer within
:data:`MAX_INT`, a list at most :data:`MAX_ITEMS` long, the text at most :data:`MAX_PARAMS_CHARS`;
each probe's ``Params`` caps what it may cost (memory, shapes, threads).
"""

from __future__ import annotations

import json
import math
import types
import typing
from typing import Any

from probes import PROBES

MAX_PARAMS_CHARS = 4096
MAX_TIMEOUT_S = 300.0
MAX_ITEMS = 64
MAX_INT = 1 << 53


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


def _bounded(value: Any) -> str | None:
    """Why ``value`` (parsed JSON) is out of bounds, ``None`` when it is not."""
    if isinstance(value, float) and not math.isfinite(value):
        return "a number that is not finite"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return f"an integer beyond {MAX_INT}"
    if isinstance(value, list):
        if len(value) > MAX_ITEMS:
            return f"a list longer than {MAX_ITEMS}"
        for v in value:
            why = _bounded(v)
            if why:
                return why
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(name)


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
        raw = json.loads(params_json, parse_constant=_no_constant) if params_json.strip() else {}
    except (ValueError, RecursionError):
        why = "params are not JSON (NaN and Infinity are not numbers here)"
        raise RequestRejected(why) from None
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
        bound = _bounded(value)
        if bound:
            raise RequestRejected(f"{name} parameter {key!r} is {bound}")
    try:
        params = cls(**{k: _tuples(v) for k, v in raw.items()})
    except (TypeError, ValueError) as exc:
        raise RequestRejected(f"{name} params: {' '.join(str(exc).split())}") from None
    timeout = float(getattr(params, "timeout_s", 1.0))
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise RequestRejected(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}] s, got {timeout:g}")
    return params
