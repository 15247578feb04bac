"""Synthetic Flight Recorder dumps laid out as torch writes them (``FlightRecorder::dump``):
``version``, ``pg_config`` (``ranks`` a string), ``pg_status`` keyed by FR's group id, entries
with ``process_group`` a ``(name, desc)`` tuple."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from tests.fakes.paths import SHARED

#: Real NCCL Flight Recorder dumps of a job with injected GPU errors, with their ground truth.
REAL_NCCL_DUMPS = SHARED / "data" / "external" / "fr-nccl-gpu-error"


def entry(
    pg: str,
    seq: int,
    op: str = "all_reduce",
    state: str = "completed",
    *,
    pg_id: int = 0,
    desc: str = "",
    record_id: int = 0,
    sizes: list[list[int]] | None = None,
    t_ns: int = 1_700_000_000_000_000_000,
    frames: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "record_id": record_id,
        "pg_id": pg_id,
        "process_group": (pg, desc),
        "thread_name": "pt_main_thread",
        "thread_id": "1",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": f"nccl:{op}",
        "time_created_ns": t_ns + seq * 1000,
        "input_sizes": sizes or [[1024]],
        "input_dtypes": ["Float"],
        "output_sizes": sizes or [[1024]],
        "output_dtypes": ["Float"],
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": t_ns + seq * 1000 + 500 if state == "completed" else None,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": False,
        "frames": frames or [],
    }


def dump(groups: dict[str, list[int]], entries: list[dict[str, Any]], **extra: Any) -> dict:
    cfg = {
        name: {"name": name, "desc": f"group_{name}", "ranks": str(ranks)}
        for name, ranks in groups.items()
    }
    return {
        "version": "2.9",
        "pg_config": cfg,
        "nccl_version": "2.27.3",
        "entries": entries,
        **extra,
    }


def write_pickle(path: Path, obj: dict) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=2))
    return path


def write_json(path: Path, obj: dict) -> Path:
    """The JSON layout (``dump_json``): no frames, ``0`` for missing times, strings in status."""
    out = dict(obj)
    out["entries"] = [
        {
            **{k: v for k, v in e.items() if k != "frames"},
            "process_group": list(e["process_group"]),
            "time_discovered_started_ns": e["time_discovered_started_ns"] or 0,
            "time_discovered_completed_ns": e["time_discovered_completed_ns"] or 0,
        }
        for e in obj.get("entries", [])
    ]
    if "pg_status" in out:
        out["pg_status"] = {
            k: {kk: str(vv) for kk, vv in v.items()} for k, v in out["pg_status"].items()
        }
    path.write_text(json.dumps(out))
    return path
