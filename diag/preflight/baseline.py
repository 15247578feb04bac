"""Baselines: what each device measured when it was known good, kept across runs in one JSON file.

Layout: ``{"version": 1, "hosts": {HOST: {DEVICE: {"PROBE/METRIC": ENTRY}}}}``, ENTRY
``{"value", "unit", "detail"}``, where DEVICE is the GPU UUID, ``cpu <model name>`` for the
CPU, or a rank pair for ``p2p``. Saving merges into the file: other hosts' and devices' entries,
and metrics not measured this time, stay. Only ``ok`` results are saved.
"""

from __future__ import annotations

import json
import math
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
        if not isinstance(data, dict) or not isinstance(data.get("hosts"), dict):
            raise ValueError("no hosts table")
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r}")
        hosts = data["hosts"]
        _check(hosts)
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not a diag baseline file ({exc})") from None
    return hosts


def _check(hosts: dict[Any, Any]) -> None:
    """Every entry as :func:`save` writes it, or ``ValueError`` naming the first that is not:
    a judge reading a list where a device's table was, or a string where a value was, would
    otherwise stop ``diag preflight`` with a traceback."""
    for host, devices in hosts.items():
        if not isinstance(devices, dict):
            raise ValueError(f"host {host!r} is not a table of devices")
        for device, entries in devices.items():
            if not isinstance(entries, dict):
                raise ValueError(f"{host!r} device {device!r} is not a table of metrics")
            for name, entry in entries.items():
                value = entry.get("value") if isinstance(entry, dict) else None
                if (
                    not isinstance(value, (int, float))
                    or isinstance(value, bool)
                    or not math.isfinite(value)
                ):
                    raise ValueError(f"{host!r} {device!r} {name!r} has no numeric value")


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
