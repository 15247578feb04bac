"""Fuzz targets: every reader of input diag does not control, fed arbitrary and mutated bytes.

A target takes the bytes (and a scratch directory for readers of files) and either returns or
raises one of the one-line errors it documents (:class:`~diag.errors.DiagError` and its kin);
anything else (a ``KeyError``, a ``RecursionError``, a ``MemoryError``, a hang) is a crash.
``tests/unit/test_fuzz.py`` runs each target a few hundred times (hypothesis) in ``make test``;
``bench/fuzz.py`` runs them for as long as asked with :func:`mutate` and prints the inputs tried
and the crashes found, each kept under ``--crashes DIR`` to replay.

Seeds are valid inputs of each format (built here, no stored blobs), so that mutations reach
past the first check of each reader.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from diag.errors import DiagError


@dataclass(frozen=True)
class Target:
    """``run(data, scratch)``; ``allowed``: the exceptions that are its documented answer to bad
    input; ``seeds``: valid inputs to mutate."""

    name: str
    run: Callable[[bytes, Path], object]
    allowed: tuple[type[BaseException], ...]
    seeds: tuple[bytes, ...]


def _batch_seed() -> bytes:
    from diag import schema
    from diag.transport import codec

    env = dict(ts_ns=1, host="h", rank=0, local_rank=0, job_id="j", source="h/rank0/1", seq=0)
    events = [
        schema.StepEvent(**env, step=1, start_ns=1, end_ns=2, duration_ns=1),  # type: ignore[arg-type]
        schema.HookHealth(**{**env, "seq": 1}, pid=1),  # type: ignore[arg-type]
    ]
    return codec.encode_batch(events, sender="fuzz", sent_ns=1)


def _decode_batch(data: bytes, scratch: Path) -> object:
    from diag.transport import codec

    return codec.decode_batch(data)


def _batch_columns_seed() -> bytes:
    from diag.proto import diag_pb2 as pb
    from diag.transport import codec

    return codec.with_columns(pb.EventBatch.FromString(_batch_seed())).SerializeToString()


def _decode_columns(data: bytes, scratch: Path) -> object:
    """The analyzer's ingest decode (rows and column blocks), then the WAL replay's."""
    from google.protobuf.message import DecodeError

    from diag.errors import SchemaError
    from diag.proto import diag_pb2 as pb
    from diag.transport import codec

    batch = pb.EventBatch()
    try:
        batch.ParseFromString(data)
    except (DecodeError, RuntimeError) as exc:
        raise SchemaError(f"malformed event batch: {exc}") from None
    return codec.columns_from_batch(batch), codec.events_from_batch(batch)


def _frames(data: bytes, scratch: Path) -> object:
    from diag.transport.framing import FrameDecoder

    d = FrameDecoder()
    half = len(data) // 2
    return d.feed(data[:half]) + d.feed(data[half:])


def _write(scratch: Path, name: str, data: bytes) -> Path:
    path = scratch / name
    path.write_bytes(data)
    return path


def _captures(data: bytes, scratch: Path) -> object:
    from diag.store import captures

    _write(scratch, captures.CAPTURES_FILE, data)
    out, problems = captures.read(scratch)
    return out, problems


def _findings(data: bytes, scratch: Path) -> object:
    from diag.diagnose.triage import FINDINGS_FILE, read_findings

    _write(scratch, FINDINGS_FILE, data)
    return read_findings(scratch)


def _findings_seed() -> bytes:
    from diag.findings import Evidence, Finding

    f = Finding(
        id="node-rank2", symptom="slowdown", cause="node", severity="warning", ranks=(2,),
        onset_step=3, confidence=0.5, summary="rank 2 is slow",
        evidence=(Evidence(metric="compute_ms", subject="rank 2", value=2.0, reference=1.0),),
    )  # fmt: skip
    return (json.dumps(f.to_json()) + "\n").encode()


def _probe_request(data: bytes, scratch: Path) -> object:
    from probes.validate import RequestRejected, validate

    name, _, params = data.decode("utf-8", "replace").partition("\n")
    try:
        return validate(name, params)
    except RequestRejected:
        return None


def _config(data: bytes, scratch: Path) -> object:
    from diag.config import load_config

    path = _write(scratch, "diag.toml", data)
    return load_config("analyzer", file=path, env={})


def _detector_config(data: bytes, scratch: Path) -> object:
    from diag.diagnose.detector_config import load_detector_config

    return load_detector_config(_write(scratch, "detectors.toml", data))


def _preflight_baseline(data: bytes, scratch: Path) -> object:
    """A baseline file (``diag preflight --baseline``), loaded and judged against results of
    the devices and metrics it may hold, as ``diag preflight`` does."""
    from diag.preflight import baseline
    from diag.preflight.rules import judge
    from probes.base import ProbeResult

    base = baseline.load(_write(scratch, "baseline.json", data))
    rows = [
        ("h0", ProbeResult(probe=probe, device="cpu x", status="ok", metric=metric, value=1.0))
        for probe, metric in (("gemm", "float32 8x8x8"), ("numerics", "digest"))
    ]
    return judge(rows, base)


def _preflight_baseline_seed() -> bytes:
    entries = {
        "gemm/float32 8x8x8": {"value": 1.5, "unit": "TFLOP/s", "detail": ""},
        "numerics/digest": {"value": 1.0, "unit": "", "detail": "ab12"},
    }
    return json.dumps({"version": 1, "hosts": {"h0": {"cpu x": entries}}}).encode()


def _wal(data: bytes, scratch: Path) -> object:
    from diag.analyzer.wal import read_wal

    return read_wal(_write(scratch, "00000001.wal", data))


def _wal_seed() -> bytes:
    import tempfile

    from diag.analyzer.wal import WalWriter, wal_paths

    with tempfile.TemporaryDirectory() as d:
        w = WalWriter(Path(d))
        w.append(_batch_seed())
        w.append(b"second record")
        w.close()
        return b"".join(p.read_bytes() for p in wal_paths(Path(d)))


def _spool(data: bytes, scratch: Path) -> object:
    """A segment a previous daemon left (with a cursor at its start), read back to the end."""
    from diag.daemon.spool import Spool

    (scratch / "seg-00000000000000000001.spool").write_bytes(data)
    spool = Spool(scratch, fsync=False)
    try:
        got: list[bytes] = []
        while (rec := spool.peek()) is not None and len(got) < 10_000:
            got.append(rec.payload)
            spool.ack(rec)
        return got
    finally:
        spool.close()


def _spool_seed() -> bytes:
    import tempfile

    from diag.daemon.spool import Spool

    with tempfile.TemporaryDirectory() as d:
        spool = Spool(d, fsync=False)
        spool.append(_batch_seed())
        spool.append(b"second batch")
        spool.close()
        return b"".join(p.read_bytes() for p in sorted(Path(d).glob("seg-*.spool")))


def _fr_dump_obj(rank: int) -> dict[str, object]:
    """A small Flight Recorder dump in torch's format (version 2.9): one group, one entry."""
    entry = {
        "record_id": 7, "pg_id": 0, "process_group": ("0", "default_pg"), "thread_name": "main",
        "thread_id": "1", "collective_seq_id": 26, "p2p_seq_id": 0, "op_id": 26,
        "profiling_name": "nccl:all_reduce", "time_created_ns": 1_758_610_505_592_849_034,
        "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
        "output_dtypes": ["Float"], "state": "scheduled", "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None, "retired": False, "timeout_ms": 180000,
        "is_p2p": False, "frames": [{"name": "train", "filename": "train.py", "line": 42}],
    }  # fmt: skip
    return {
        "version": "2.9",
        "nccl_version": "2.27.3",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": 26, "last_completed_collective": 25}},
        "entries": [entry],
        "rank": rank,
    }


def _remains(name: str) -> Callable[[bytes, Path], object]:
    """A failed run's remains holding one file ``name`` with the bytes, triaged as a whole."""

    def run(data: bytes, scratch: Path) -> object:
        from diag.diagnose.triage import triage_remains

        (scratch / name).write_bytes(data)
        return triage_remains(scratch)[0].to_json()

    return run


def _fr_pickle_seed() -> bytes:
    import pickle

    return pickle.dumps(_fr_dump_obj(0), protocol=2)  # plain data only: our own test input


_ERROR_FILE_SEED = json.dumps(
    {"message": {"message": "RuntimeError: NCCL error: unhandled system error",
                 "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File "
                               '"train.py", line 42, in <module>\nRuntimeError: NCCL error',
                               "timestamp": "1758610505"}}}
).encode()  # fmt: skip
_LOG_SEED = (
    b"[rank1]: Traceback (most recent call last):\n"
    b'[rank1]:   File "train.py", line 42, in <module>\n'
    b"[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    b"torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 1 "
    b"(pid: 4242) of binary: /usr/bin/python\n"
)

#: A native abort as a job's output holds it: glibc's message (no rank prefix), faulthandler's
#: report of every thread, torchrun's root cause.
_CRASH_LOG_SEED = (
    b"malloc(): unsorted double linked list corrupted\n"
    b"Fatal Python error: Aborted\n\n"
    b"Thread 0x00007f25b63296c0 (most recent call first):\n"
    b'  File "/usr/lib/python3.11/threading.py", line 331 in wait\n\n'
    b"Current thread 0x00007f25d5e62b80 (most recent call first):\n"
    b'  File "/job/train.py", line 549 in main\n\n'
    b"Extension modules: torch._C (total: 1)\n"
    b"Root Cause (first observed failure):\n[0]:\n"
    b"  rank      : 1 (local_rank: 1)\n  exitcode  : -6 (pid: 21215)  (SIGABRT)\n"
    b"  traceback : Signal 6 (SIGABRT) received by PID 21215\n" + b"=" * 20 + b"\n"
)


def _kineto(data: bytes, scratch: Path) -> object:
    from diag.traces.kineto import load_trace

    path = scratch / "rank0.pt.trace.json.gz"
    path.write_bytes(data)
    return load_trace(path)


def _kineto_seed() -> bytes:
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"Input Dims": [[8, 8], [8, 8]]}},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 11, "dur": 3},
    ]}  # fmt: skip
    return gzip.compress(json.dumps(trace).encode())


def _timing_table(data: bytes, scratch: Path) -> object:
    """Another tool's op table (CSV), read and triaged as ``diag triage timings.csv`` does."""
    from diag.diagnose.triage import triage_table

    path = scratch / "timings.csv"
    path.write_bytes(data)
    return triage_table(path)


def _timing_table_seed() -> bytes:
    rows = ["rank,step,phase,op,start_ns,duration_ns,host,dp_rank,pp_rank,tp_rank"]
    for step in range(12):
        for rank in range(4):
            t = step * 100_000_000
            slow = 30_000_000 if rank == 2 and step >= 6 else 0
            rows.append(
                f"{rank},{step},forward,fwd,{t},{20_000_000 + slow},h{rank // 2},{rank},0,0"
            )
            rows.append(f"{rank},{step},collective,allreduce,{t + 60_000_000},5000000,h{rank // 2},"
                        f"{rank},0,0")  # fmt: skip
    return ("\n".join(rows) + "\n").encode()


_CAPTURE_SEED = json.dumps(
    {"ts_ns": 1, "status": "requested", "finding_id": "f", "kind": "profile", "ranks": [1]}
).encode()
_CONFIG_SEED = b'[analyzer]\nbind = "127.0.0.1:0"\nflush_interval_s = 1.0\n'
_PROBE_SEED = b'gemm\n{"shapes": [[8, 8, 8]], "threads": 1}'


def _frame_seed() -> bytes:
    batch = _batch_seed()
    return len(batch).to_bytes(4, "big") + batch


#: The targets by name (explicit: nothing registers itself); seeds are built when asked.
TARGETS: dict[str, Callable[[], Target]] = {
    "event_batch": lambda: Target("event_batch", _decode_batch, (DiagError,), (_batch_seed(),)),
    "event_batch_columns": lambda: Target(
        "event_batch_columns",
        _decode_columns,
        (DiagError,),
        (_batch_columns_seed(), _batch_seed()),
    ),
    "frames": lambda: Target("frames", _frames, (DiagError,), (_frame_seed(),)),
    "auto_capture_record": lambda: Target("auto_capture_record", _captures, (), (_CAPTURE_SEED,)),
    "findings_jsonl": lambda: Target(
        "findings_jsonl", _findings, (DiagError,), (_findings_seed(),)
    ),
    "probe_request": lambda: Target("probe_request", _probe_request, (), (_PROBE_SEED,)),
    "analyzer_config": lambda: Target("analyzer_config", _config, (DiagError,), (_CONFIG_SEED,)),
    "detector_config": lambda: Target(
        "detector_config", _detector_config, (DiagError,), (b"[node]\nmin_ratio = 1.1\n",)
    ),
    "preflight_baseline": lambda: Target(
        "preflight_baseline", _preflight_baseline, (DiagError,), (_preflight_baseline_seed(),)
    ),
    "wal": lambda: Target("wal", _wal, (DiagError,), (_wal_seed(),)),
    "spool_segment": lambda: Target("spool_segment", _spool, (DiagError,), (_spool_seed(),)),
    "fr_dump_pickle": lambda: Target(
        "fr_dump_pickle", _remains("_dump_0"), (DiagError,), (_fr_pickle_seed(),)
    ),
    "fr_dump_json": lambda: Target(
        "fr_dump_json",
        _remains("nccl_trace_rank_0.json"),
        (DiagError,),
        (json.dumps(_fr_dump_obj(0)).encode(),),
    ),
    "error_file": lambda: Target(
        "error_file", _remains("error.json"), (DiagError,), (_ERROR_FILE_SEED,)
    ),
    "worker_log": lambda: Target(
        "worker_log", _remains("worker.log"), (DiagError,), (_LOG_SEED, _CRASH_LOG_SEED)
    ),
    "kineto_trace": lambda: Target("kineto_trace", _kineto, (DiagError,), (_kineto_seed(),)),
    "timing_table_csv": lambda: Target(
        "timing_table_csv", _timing_table, (DiagError,), (_timing_table_seed(),)
    ),
}


def mutate(seed: bytes, rng: random.Random, max_len: int = 1 << 16) -> bytes:
    """``seed`` changed a few times: bytes flipped, set to edge values, inserted, deleted,
    duplicated, truncated; sometimes gzip-wrapped or nested."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, 8)):
        op = rng.randrange(8)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and data:
            data[min(pos, len(data) - 1)] = rng.choice((0, 0x7F, 0x80, 0xFF, 0x30, 0x5B, 0x7B))
        elif op == 2:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 3 and data:
            del data[pos : pos + rng.randint(1, 16)]
        elif op == 4 and data:
            a = rng.randrange(len(data))
            chunk = data[a : a + rng.randint(1, 64)]
            data[pos:pos] = chunk * rng.randint(1, 32)
        elif op == 5:
            del data[pos:]
        elif op == 6:
            token = rng.choice(
                (b"[" * 2000, b'{"a":' * 500, b"1e400", b"9" * 5000, b"NaN", b"\xff\xfe",
                 b"\x00", b"-1", b"18446744073709551616", b"\\ud800")
            )  # fmt: skip
            at = 0 if rng.random() < 0.5 else pos  # at the start, where a reader looks first
            data[at:at] = token
        elif op == 7 and len(data) < 4096:
            data = bytearray(gzip.compress(bytes(data)))
    return bytes(data[:max_len])


#: Inputs every target gets besides the random ones: what crashed readers before.
EDGE_INPUTS: tuple[bytes, ...] = (
    b"",
    b"[" * 100_000,
    b'{"a":' * 100_000,
    b"9" * 5000,
    b"1e400",
    b"NaN",
    b"\xff\xfe\x00\x80" * 64,
    b"\n" * 10_000,
    gzip.compress(b"[" * 1_000_000),
)


__all__ = ["EDGE_INPUTS", "TARGETS", "Target", "mutate"]
