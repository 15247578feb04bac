"""Probe results read back from the run store: a timed-out probe has no value (stored as a
missing value, pandas' NA), and reading it back gives ``None``, not a crash."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from diag.replay.remote import results_for
from diag.store.run_store import RunStore


def result(seq: int, request_id: str, status: str, value: float | None) -> schema.Event:
    return schema.ProbeResultEvent(
        ts_ns=1_700_000_000_000_000_000 + seq,
        host="node1",
        rank=0,
        source="node1/daemon/7",
        seq=seq,
        request_id=request_id,
        probe="numerics",
        device="cpu@node1",
        status=status,
        metric="digest",
        value=value,
        detail="no result within 20 s" if value is None else "ok",
        params_json='{"size": 8}',
    )


def test_a_timed_out_result_reads_back_without_a_value(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path)
    store.append([result(0, "r1", "timeout", None), result(1, "r2", "ok", 1.5)])
    store.flush()
    (late,) = results_for(tmp_path, "r1")
    (fine,) = results_for(tmp_path, "r2")
    assert (late.status, late.value, late.params) == ("timeout", None, {"size": 8})
    assert (fine.status, fine.value) == ("ok", 1.5)
