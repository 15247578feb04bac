"""A job that runs NCCL without collective timing says so in the report: its Flight Recorder
has arrivals but no durations (the hooks report it, schema 1.10)."""

from __future__ import annotations

from pathlib import Path

from diag import schema
from tests.fakes.events import T0, Source
from tests.fakes.summary import headline


def _info(src: Source, backend: str, timing: bool) -> schema.RankInfo:
    return schema.RankInfo(**src.env(T0), pid=100, backend=backend, device="cuda:0",
                           nccl_timing=timing)  # fmt: skip


def test_nccl_ranks_without_timing_are_named(tmp_path: Path) -> None:
    r0, r1, r2 = (Source(host="n0", rank=r, pid=10 + r) for r in range(3))
    infos = [
        _info(r0, "nccl", False),
        _info(r1, "nccl", True),
        _info(r2, "cpu:gloo,cuda:nccl", False),
    ]
    summary, text = headline(tmp_path, infos)
    assert summary["run"]["nccl_untimed_ranks"] == [0, 2]
    assert "NCCL collective timing is off on 2 rank(s)" in text


def test_gloo_and_timed_jobs_say_nothing(tmp_path: Path) -> None:
    r0, r1, r2 = (Source(host="n0", rank=r, pid=10 + r) for r in range(3))
    infos = [_info(r0, "gloo", False), _info(r1, "nccl", True), _info(r2, "gloo", False)]
    summary, text = headline(tmp_path, infos)
    assert summary["run"]["nccl_untimed_ranks"] == [] and "NCCL" not in text
