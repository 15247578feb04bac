"""Baselines: what each device measured when it was known good, kept across runs in one JSON file.

Layout: ``{"version": 1, "hosts": {HOST: {DEVICE: {"PROBE/METRIC": ENTRY}}}}``, ENTRY
``{"value", "unit", "detail"}``, where DEVICE is the GPU UUID, ``cpu <model name>`` for the
CPU, or a rank pair for ``p2p``. Saving merges into the file: other hosts' and devices' entries,
and metrics not measured this time, stay. Only ``ok`` results are saved.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from diag.errors import InputError
from diag.fsutil import atomic_write
from probes.base import ProbeResult

VERSION = 1
Baseline = dict[str, dict[str, dict[str, dict[str, Any]]]]  # host -> device -> key -> entry


def key(result: ProbeResult) -> str:
    return f"{result.probe}/{result.metric}"


def load(path: Path | None) -> Baseline:
    """The baseline at ``path``; empty when ``path`` is ``None`` or does not exist;
    :class:`InputError` when it is not a baseline file."""
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        hosts = data["hosts"]
        if data.get("version") != VERSION or not isinstance(hosts, dict):
            raise ValueError(f"version {data.get('version')!r}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a diag baseline file ({exc})") from exc
    return hosts


def lookup(base: Baseline, host: str, result: ProbeResult) -> dict[str, Any] | None:
    """The saved entry (``value``, ``unit``, ``detail``) for ``result`` on ``host``, if any."""
    return base.get(host, {}).get(result.device, {}).get(key(result))


def save(path: Path, host_results: Iterable[tuple[str, ProbeResult]]) -> None:
    """Merge the ``ok`` results (``(host, result)`` pairs) into the file at ``path``, atomically."""
    base = load(path)
    for host, r in host_results:
        if r.status != "ok" or r.value is None:
            continue
        entry = {"value": r.value, "unit": r.unit, "detail": r.detail}
        base.setdefault(host, {}).setdefault(r.device, {})[key(r)] = entry
    atomic_write(path, json.dumps({"version": VERSION, "hosts": base}, indent=1, sort_keys=True))
