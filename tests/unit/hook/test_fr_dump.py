"""Which Flight Recorder ring the hook harvests and how it dumps it (:mod:`diag.hook.fr_dump`):
the ring follows the job to NCCL's once a group runs NCCL, the dumps go through diag's native
library where it can make them, and a real hook that moves to another ring mid-run loses and
repeats nothing."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from diag import schema
from diag.config import HookConfig
from diag.flight_recorder import load_fr_dump
from diag.hook import core as hook
from diag.hook.fr_dump import CONFIG_MISSES, FrDumper
from diag.hook.groups import _runs_nccl
from tests.fakes.hook_sink import FrameSink, of_kind
from tests.fakes.hook_trainer import Trainer, wait_for


class Calls:
    """A dump function that records how it was called."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[Any] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(args or kwargs)
        return self.answer


def test_the_ring_follows_the_job_to_nccl_only_where_torch_dumps_it() -> None:
    generic, nccl = Calls(b"g"), Calls(b"n")
    cpu_build = FrDumper(SimpleNamespace(_dump_fr_trace=generic))
    assert cpu_build.ok and not cpu_build.may_follow
    assert not cpu_build.follow(True) and cpu_build.ring == "fr"
    assert cpu_build.dump(collectives=False) == b"g"
    assert generic.calls == [{"includeCollectives": False, "includeStackTraces": False}]

    cuda_build = FrDumper(SimpleNamespace(_dump_fr_trace=generic, _dump_nccl_trace=nccl))
    assert cuda_build.may_follow and not cuda_build.follow(False)
    assert cuda_build.follow(True) and cuda_build.ring == "nccl" and not cuda_build.may_follow
    assert not cuda_build.follow(True)  # once
    assert cuda_build.dump() == b"n"
    assert not FrDumper(None).ok


def test_native_dumps_replace_torchs_for_the_rings_they_can_dump() -> None:
    generic, nccl = Calls(b"torch-g"), Calls(b"torch-n")
    native_fr, native_nccl = Calls(b"native-g"), Calls(None)  # a CPU build: no NCCL dump
    library = SimpleNamespace(
        dump_fn={"fr": native_fr, "nccl": native_nccl}.get,
        since_fn=lambda: None,  # a build that found no reader
        since_why=lambda: "no symbol table",
    )
    dumper = FrDumper(SimpleNamespace(_dump_fr_trace=generic, _dump_nccl_trace=nccl))
    dumper.use_native(library)
    assert dumper.native("fr") and not dumper.native("nccl")
    assert dumper.dump() == b"native-g" and native_fr.calls[-1] == (True,)
    assert generic.calls == [] and dumper.num_native == 1
    dumper.follow(True)
    assert dumper.dump() == b"torch-n" and dumper.num_native == 1
    old = FrDumper(SimpleNamespace(_dump_fr_trace=generic))
    old.use_native(  # a library built before dumps
        SimpleNamespace(dump_fn=lambda ring: None, since_fn=lambda: None, since_why=lambda: "")
    )
    assert not old.native() and old.dump() == b"torch-g"
    assert not dumper.reads and dumper.since_note == "no symbol table"


class Reader:
    """A stand-in for the native reader: ``ring`` (dicts by record id) read from an id on."""

    def __init__(self, entries: list[dict[str, Any]], epoch: int = 0) -> None:
        self.entries, self.epoch = entries, epoch

    def __call__(self, since: int, entries: bool = True) -> dict[str, Any]:
        rows = [e for e in self.entries if e["record_id"] >= since] if entries else []
        return {"pg_config": {"0": {"name": "0"}}, "pg_status": {}, "entries": rows,
                "next_record_id": len(self.entries), "reset_epoch": self.epoch}  # fmt: skip


def _library(reader: Reader | None) -> SimpleNamespace:
    def next_id() -> tuple[int, int] | None:
        return None if reader is None else (len(reader.entries), reader.epoch)

    return SimpleNamespace(
        dump_fn=lambda ring: None,
        since_fn=lambda: reader,
        next_id_fn=lambda: next_id,
        since_why=lambda: "not found",
    )


def _fr_entry(rid: int, name: str = "gloo:all_reduce") -> dict[str, Any]:
    return {"record_id": rid, "profiling_name": name, "collective_seq_id": rid + 1,
            "time_created_ns": 1000 + rid, "retired": rid < 3}  # fmt: skip


def test_the_reader_is_trusted_once_it_agrees_with_torchs_dump() -> None:
    entries = [_fr_entry(i) for i in range(5)]
    reader = Reader(entries)
    dumper = FrDumper(SimpleNamespace(_dump_fr_trace=Calls(b""), _dump_nccl_trace=Calls(b"")))
    dumper.use_native(_library(reader))
    assert dumper.reads and not dumper.verified
    assert not dumper.verify({"entries": [], "pg_config": {}})  # nothing to compare yet
    # the dump saw entry 2 still running: states may differ, the recorded fields may not
    dump = {"entries": [dict(e, retired=False) for e in entries[1:]],
            "pg_config": {"0": {"name": "0"}}}  # fmt: skip
    assert dumper.verify(dump) and dumper.verified
    assert [e["record_id"] for e in dumper.since(3)["entries"]] == [3, 4]
    assert dumper.next_id() == 5 and dumper.num_reads == 3
    assert dumper.follow(True) and not dumper.reads  # NCCL's ring has no reader

    wrong = FrDumper(SimpleNamespace(_dump_fr_trace=Calls(b"")))
    wrong.use_native(_library(Reader([_fr_entry(i, "gloo:broadcast") for i in range(5)])))
    assert not wrong.verify(dump) and not wrong.reads
    assert "profiling_name" in wrong.since_note and wrong.since(0) is None

    # a group made between the dump and the read: asked again, a few times
    moving = FrDumper(SimpleNamespace(_dump_fr_trace=Calls(b"")))
    moving.use_native(_library(reader))
    other_groups = dict(dump, pg_config={"0": {"name": "0"}, "1": {"name": "1"}})
    for _ in range(CONFIG_MISSES - 1):
        assert not moving.verify(other_groups) and moving.reads
    assert moving.verify(dump) and moving.verified
    stuck = FrDumper(SimpleNamespace(_dump_fr_trace=Calls(b"")))
    stuck.use_native(_library(reader))
    for _ in range(CONFIG_MISSES):
        assert not stuck.verify(other_groups)
    assert not stuck.reads and "groups" in stuck.since_note

    missing = FrDumper(SimpleNamespace(_dump_fr_trace=Calls(b"")))
    missing.use_native(_library(None))
    assert not missing.reads and missing.since_note == "not found"


def test_a_reader_that_fails_is_off_and_the_ring_dumped() -> None:
    def broken(since: int, entries: bool = True) -> Any:
        raise RuntimeError("boom")

    library = SimpleNamespace(dump_fn=lambda ring: None, since_fn=lambda: broken,
                              next_id_fn=lambda: lambda: (0, 0), since_why=lambda: "")  # fmt: skip
    dumper = FrDumper(SimpleNamespace(_dump_fr_trace=Calls(b"torch")))
    dumper.use_native(library)
    assert dumper.reads and dumper.next_id() == 0
    assert dumper.since(0) is None and not dumper.reads
    assert dumper.since_note == "the reader failed: RuntimeError: boom"
    assert dumper.dump() == b"torch"


def test_a_reset_ring_turns_the_reader_off() -> None:
    reader = Reader([_fr_entry(i) for i in range(4)])
    dumper = FrDumper(SimpleNamespace(_dump_fr_trace=Calls(b"")))
    dumper.use_native(_library(reader))
    assert dumper.verify({"entries": reader.entries, "pg_config": {"0": {"name": "0"}}})
    assert dumper.next_id() == 4
    reader.epoch = 1  # torch reset the ring: its record ids start again at 0
    assert dumper.next_id() is None and not dumper.reads and dumper.since(2) is None
    assert dumper.since_note == "the Flight Recorder ring was reset"


def test_which_groups_run_nccl() -> None:
    cuda, cpu = torch.device("cuda"), torch.device("cpu")

    class Group:
        def __init__(self, devices: list[torch.device], backend: object) -> None:
            self._device_types = devices
            self.backend = backend

        def _get_backend(self, device: torch.device) -> object:
            return self.backend

    class ProcessGroupNCCL:
        pass

    named = {"a": "nccl", "b": "cuda:nccl,cpu:gloo", "c": "gloo", "d": "undefined"}
    assert _runs_nccl("a", named.get) and _runs_nccl("b", named.get)
    assert not _runs_nccl("c", named.get)
    unnamed = Group([cpu, cuda], ProcessGroupNCCL())  # created without naming its backend
    assert _runs_nccl(unnamed, lambda pg: "undefined")
    assert not _runs_nccl(Group([cpu], object()), lambda pg: "undefined")

    def gone(pg: object) -> str:
        raise ValueError("Invalid process group specified")

    assert not _runs_nccl(Group([cpu], object()), gone)


def test_a_hook_that_moves_to_nccls_ring_mid_run_loses_and_repeats_nothing(world: None) -> None:
    """Without a GPU, "NCCL's ring" is the generic ring seen from the move on, its record ids
    starting again at 0, as a ring of its own would: every DDP all-reduce of every step is
    emitted once, from the ring that held it, and each step counts its own."""
    from torch._C import _distributed_c10d as c10d

    first: list[int] = []
    base: dict[tuple[str, str], int] = {}

    def nccl_ring(includeCollectives: bool = True, includeStackTraces: bool = True) -> bytes:
        dump = load_fr_dump(c10d._dump_fr_trace(includeStackTraces=False), validate=False)
        entries = dump.get("entries") or []
        status = dump.get("pg_status") or {}
        if not first:  # the move: what the generic ring holds from now on is "NCCL's"
            first.append(1 + max((e["record_id"] for e in entries), default=-1))
            base.update({(g, k): v for g, s in status.items() for k, v in s.items()})
        for g, s in status.items():  # its counters start again too
            for k, v in s.items():
                s[k] = max(-1, v - base.get((g, k), 0))
        kept = [dict(e, record_id=e["record_id"] - first[0]) for e in entries
                if e["record_id"] >= first[0]]  # fmt: skip
        if includeCollectives:
            dump["entries"] = kept
        else:
            dump.pop("entries", None)
        return pickle.dumps(dump, protocol=2)

    sink = FrameSink(Path(os.environ["TMPDIR"]) / f"r{os.getpid()}.sock")
    sink.start()
    cfg = HookConfig(daemon_sock=str(sink.path), flush_interval_s=0.02, fr_poll_interval_s=0.1,
                     fr_dump_native=False)  # fmt: skip
    h = hook.install(cfg)
    thread = h.thread
    thread.dumper._torch["nccl"] = nccl_ring
    nccl = [False]
    thread.groups.uses_nccl = lambda: nccl[0]  # type: ignore[method-assign]
    trainer = Trainer()
    trainer.steps(5)
    time.sleep(0.3)
    nccl[0] = True  # a group runs NCCL now
    wait_for(lambda: thread.dumper.ring == "nccl" and bool(first))
    trainer.steps(5)
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error
    assert h.state.num_fr_dropped == 0
    steps = {s.step: s.num_collectives for s in of_kind(events, schema.StepEvent)}
    colls = [c for c in of_kind(events, schema.CollectiveEvent) if c.step >= 0]
    assert all(c.origin == "fr" for c in colls)
    seqs = [c.seq_id for c in colls]
    assert len(seqs) == len(set(seqs))  # none twice
    assert sorted(steps) == list(range(10)) and all(n >= 1 for n in steps.values())
    for step, n in steps.items():
        assert sum(1 for c in colls if c.step == step) == n
