"""Detector thresholds from a TOML file: one table per detector, named as in the registry.

::

    [node]
    min_ratio = 1.1
    window = 12

    [checkpoint]
    min_excess_frac = 0.3

Each table's keys are the fields of that detector's config dataclass
(:data:`~diag.diagnose.detectors.registry.DEFAULT_CONFIGS`); a key left out keeps its default,
and a detector without a table runs with its defaults. Values are checked against the field's
type: an ``int`` field takes a TOML integer, a ``float`` field an integer or a float, a ``bool``
field ``true``/``false``, a ``str`` field a string. An unknown table or key, a wrong type or an
unreadable file is a :class:`~diag.errors.ConfigError` (:class:`~diag.errors.InputError` for the
file itself) in one line naming the file and the key. Reading TOML needs Python 3.11+ (tomllib).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from types import NoneType, UnionType
from typing import Any

from diag.diagnose.detectors.registry import DEFAULT_CONFIGS
from diag.errors import ConfigError, InputError

#: TOML values a field of each type accepts (bool is an int in Python: kept apart).
_ACCEPTS: dict[type, tuple[type, ...]] = {
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
}


def load_detector_config(path: str | Path) -> dict[str, object]:
    """Detector name -> its config dataclass, for every detector named in the TOML file
    ``path`` (the others are left out: :func:`~diag.diagnose.detectors.registry.run_all` uses
    their defaults)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise ConfigError(f"{path}: reading a TOML file needs Python 3.11 or newer") from None
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read detector config {path}: {_reason(exc)}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML: {exc}") from None
    return parse_detector_config(data, where=str(path))


def parse_detector_config(data: Mapping[str, Any], *, where: str) -> dict[str, object]:
    """:func:`load_detector_config` of already parsed TOML; ``where`` names it in errors."""
    known = ", ".join(sorted(DEFAULT_CONFIGS))
    out: dict[str, object] = {}
    for name, table in data.items():
        if not isinstance(table, Mapping):
            raise ConfigError(
                f"{where}: {name} = {table!r} is outside any table; settings go under a "
                "detector's table, e.g. [node]"
            )
        if name not in DEFAULT_CONFIGS:
            raise ConfigError(f"{where}: unknown detector [{name}] (known: {known})")
        out[name] = _config(name, DEFAULT_CONFIGS[name], table, where)
    return out


def _config(name: str, default: object, table: Mapping[str, Any], where: str) -> object:
    hints = typing.get_type_hints(type(default))
    fields = [f.name for f in dataclasses.fields(default)]  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{where}: unknown key {key!r} in [{name}] (known: {known})")
        types = _types(hints[key])
        allowed = tuple(t for base in types for t in _ACCEPTS.get(base, ()))
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            want = " or ".join(getattr(t, "__name__", str(t)) for t in types)
            got = type(value).__name__
            raise ConfigError(f"{where}: [{name}] {key} = {value!r}: expected {want}, got {got}")
        coerce = float in types and int not in types and not isinstance(value, bool)
        values[key] = float(table[key]) if coerce else value
    return dataclasses.replace(default, **values)  # type: ignore[type-var]


def _types(hint: Any) -> tuple[type, ...]:
    """The types a field annotated ``hint`` holds, ``None`` left out (TOML has no null)."""
    if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(t for a in typing.get_args(hint) if a is not NoneType for t in _types(a))
    return (hint,)


def _reason(exc: Exception) -> str:
    return exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
