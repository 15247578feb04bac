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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from diag.config import read_toml, toml_values
from diag.diagnose.detectors.registry import DEFAULT_CONFIGS
from diag.errors import ConfigError


def load_detector_config(path: str | Path) -> dict[str, object]:
    """Detector name -> its config dataclass, for every detector named in the TOML file
    ``path`` (the others are left out: :func:`~diag.diagnose.detectors.registry.run_all` uses
    their defaults)."""
    return parse_detector_config(read_toml(path, what="detector config"), where=str(path))


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
    values = toml_values(type(default), table, where=where, name=name)
    return dataclasses.replace(default, **values)  # type: ignore[type-var]
