"""Flight Recorder dumps through torch's control-plane server: the JSON reader and the client."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.errors import InputError
from diag.flight_recorder import load_fr_dump, load_fr_json
from diag.hook import fr_server
from diag.hook.fr_server import FrServer, FrServerError
from tests.fakes.fr_dumps import REAL_NCCL_DUMPS, write_json


def _entry(i: int, *, started: int | None = None, done: int | None = None) -> dict[str, Any]:
    """One entry as ``_dump_fr_trace`` pickles it (gloo, no stack traces)."""
    return {
        "record_id": i,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "thread_name": "python",
        "thread_id": "140404118956928",
        "collective_seq_id": i + 1,
        "p2p_seq_id": 0,
        "op_id": i + 1,
        "profiling_name": "gloo:all_reduce",
        "time_created_ns": 1_796_534_239_121_597_234 + i,
        "input_sizes": [[1]],
        "input_dtypes": ["Float"],
        "output_sizes": [[1]],
        "output_dtypes": ["Float"],
        "state": "completed" if done else "scheduled",
        "time_discovered_started_ns": started,
        "time_discovered_completed_ns": done,
        "retired": True,
        "timeout_ms": 1_800_000,
        "is_p2p": False,
    }


def _pickled(n: int) -> dict[str, Any]:
    entries = [_entry(i, started=(i + 5 if i % 3 else None), done=(i + 9 if i % 3 else None))
               for i in range(n)]  # fmt: skip
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "comm_lib_version": "",
        "pg_status": {
            "0": {
                "last_enqueued_collective": n,
                "last_started_collective": -1,
                "last_completed_collective": n,
            }
        },
        "entries": entries,
    }


def _as_json(obj: dict[str, Any], tmp_path: Path, **dumps: Any) -> bytes:
    """``obj`` in torch's JSON layout (lists, 0 for unseen times, status as strings)."""
    path = write_json(tmp_path / "d.json", obj)
    text = json.loads(path.read_text())
    if not obj["entries"]:
        text.pop("entries")  # dump_json leaves an empty ring's key out
    return json.dumps(text, sort_keys=True, **dumps).encode()


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 600])
@pytest.mark.parametrize("indent", [None, 2])
def test_json_dump_reads_as_the_pickle_of_the_same_ring(
    n: int, indent: int | None, tmp_path: Path
) -> None:
    obj = _pickled(n)
    data = _as_json(obj, tmp_path, indent=indent)
    ticks: list[int] = []
    assert load_fr_json(data, tick=lambda: ticks.append(1)) == obj
    assert load_fr_json(data) == obj
    assert len(ticks) >= n // 16  # decoded in pieces, a tick between them


@pytest.mark.skipif(not REAL_NCCL_DUMPS.is_dir(), reason="shared FR dumps not present")
def test_real_nccl_dumps_in_json_read_as_their_pickles(tmp_path: Path) -> None:
    for r in range(16):
        pickled = load_fr_dump((REAL_NCCL_DUMPS / f"_dump_{r}").read_bytes())
        for e in pickled["entries"]:
            e.pop("frames", None)  # JSON dumps carry no stack frames
        data = write_json(tmp_path / f"{r}.json", pickled).read_bytes()
        assert load_fr_json(data, tick=lambda: None) == pickled


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_anything_but_a_json_dump_is_one_input_error(data: bytes) -> None:
    try:
        out = load_fr_json(data, tick=lambda: None)
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(out, dict) and isinstance(out["entries"], list)


@pytest.mark.parametrize(
    "data",
    [b"", b"[1, 2]", b'{"entries": 3}', b'{"entries":[{"a": 1} {"b": 2}]}', b'{"entries":[1,'],
)
def test_malformed_json_dumps(data: bytes) -> None:
    with pytest.raises(InputError):
        load_fr_json(data, tick=lambda: None)


def _serve_once(reply: bytes) -> tuple[str, threading.Thread]:
    """A Unix socket that answers one connection with ``reply`` and closes."""
    import tempfile

    path = tempfile.mktemp(prefix="diag-frs-", dir="/tmp")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)

    def run() -> None:
        try:
            conn, _ = srv.accept()
            with conn:
                got = b""
                while b"\r\n\r\n" not in got:
                    got += conn.recv(4096)
                assert got.startswith(b"POST /handler/fr_trace_json ")
                conn.sendall(reply)
        finally:
            srv.close()
            Path(path).unlink(missing_ok=True)  # a socket file outlives its socket

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return path, thread


def _client(path: str) -> FrServer:
    return FrServer(path, str(Path(path).parent / "none"), server=None)


def test_fetch_returns_the_body_of_a_200_reply() -> None:
    body = b'{"version":"2.10","entries":[]}' * 5000  # several reads
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    path, thread = _serve_once(head + body)
    assert _client(path).fetch(5.0) == body
    thread.join(5)


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found", "404"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}", "cut short"),
        (b"garbage", "no HTTP reply"),
    ],
)
def test_fetch_refuses_what_is_not_a_whole_dump(reply: bytes, says: str) -> None:
    path, thread = _serve_once(reply)
    with pytest.raises(FrServerError, match=says) as err:
        _client(path).fetch(5.0)
    assert "\n" not in str(err.value)
    thread.join(5)


def test_fetch_of_a_silent_server_times_out() -> None:
    import tempfile

    path = tempfile.mktemp(prefix="diag-frs-", dir="/tmp")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)  # never accepts, never answers
    try:
        with pytest.raises(OSError):
            _client(path).fetch(0.2)
    finally:
        srv.close()
        Path(path).unlink()


def test_reply_size_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fr_server, "MAX_REPLY_BYTES", 1000)
    path, thread = _serve_once(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 5000)
    with pytest.raises(FrServerError, match="over"):
        _client(path).fetch(5.0)
    thread.join(5)


class _NoServerTorch:
    class _C:
        class _distributed_c10d:
            @staticmethod
            def _get_handler_names() -> list[str]:
                return ["ping", "dump_traceback"]

            @staticmethod
            def _WorkerServer(path: str) -> None:
                raise AssertionError("not started without the handler")


def test_no_server_without_the_json_handler() -> None:
    assert FrServer.start(_NoServerTorch) is None
    assert FrServer.start(object()) is None


def test_the_real_server_serves_this_process_dump() -> None:
    torch = pytest.importorskip("torch")
    server = FrServer.start(torch)
    if server is None:
        pytest.skip("this torch has no control-plane fr_trace_json handler")
    try:
        assert oct(Path(server.path).parent.stat().st_mode & 0o777) == "0o700"
        dump = load_fr_json(server.fetch(10.0), tick=lambda: None)
        assert isinstance(dump["entries"], list) and "version" in dump
    finally:
        server.close()
    assert not Path(server.path).parent.exists()
    server.close()  # idempotent


def test_a_nested_entries_key_before_the_dumps_own_is_not_taken_for_it() -> None:
    data = b'{"a": {"entries": [1, 2]}, "entries": [{"record_id": 7}], "version": "2"}'
    got = load_fr_json(data, tick=lambda: None)
    assert got["a"] == {"entries": [1, 2]}
    assert got["entries"] == [{"record_id": 7}]


def test_the_hook_harvests_through_the_server_and_falls_back_when_it_fails(
    world: None, tmp_path: Path
) -> None:
    import dataclasses
    import shutil
    import tempfile

    from diag import schema
    from diag.hook import core as hook
    from tests.fakes.hook_sink import FrameSink, of_kind
    from tests.unit.hook.test_thread_survives import STEPS, fast, healths, train, wait_for

    short = tempfile.mkdtemp(prefix="dh")  # AF_UNIX paths must stay short
    sink = FrameSink(Path(short) / "d.sock")
    sink.start()
    h = hook.install(dataclasses.replace(fast(sink), fr_dump_server=True))
    try:
        wait_for(lambda: bool(healths(sink)), "the first cycle (the server started before it)")
        if h.thread.num_server_dumps == 0:
            pytest.skip("this torch has no control-plane fr_trace_json handler")
        train(STEPS)
        served = h.thread.num_server_dumps
        wait_for(lambda: h.thread.num_server_dumps > served, "a harvest through the server")
        server = h.thread.fr_server
        assert server is not None
        server.close()  # the server goes away mid-run: the next harvest dumps in-process
        train(STEPS)
    finally:
        hook.uninstall()
        events = sink.close()
        shutil.rmtree(short, ignore_errors=True)
    assert h.thread.fr_server is None
    steps = of_kind(events, schema.StepEvent)
    assert [s.step for s in steps] == list(range(2 * STEPS))
    # every step's DDP all-reduce (C++, seen only by the Flight Recorder) and its Python one at
    # least (DDP rebuilds its buckets in step 1), each counted once and shipped once
    per_step: dict[int, int] = {}
    for c in of_kind(events, schema.CollectiveEvent):
        if c.step >= 0:  # not DDP's construction, before the first step
            per_step[c.step] = per_step.get(c.step, 0) + 1
    assert per_step == {s.step: s.num_collectives for s in steps}
    assert min(per_step.values()) >= 2
    final = of_kind(events, schema.HookHealth)[-1]
    assert final.final and final.num_errors == 0 and final.num_fr_dropped == 0, final.last_error
