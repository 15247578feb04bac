"""The daemon's probe runner: runs the probes the analyzer asks for (``ProbeRequest`` control
messages addressed to this host or ``"*"``), one at a time, never in the daemon's own process.

- Validation first (:func:`probes.validate.validate`): only a name from the fixed registry with
  exactly its typed parameters; anything else is refused with one logged line and a ``rejected``
  :class:`~diag.schema.ProbeResultEvent` (so the requester learns why).
- Accepted requests go into a bounded queue (:data:`MAX_QUEUE`; when full the request gets a
  ``failed`` result at once) read by one worker thread, so the daemon's control and shipping loops
  never wait for a probe.
- Each probe runs as ``python -I -c BOOT NAME --params JSON --nice 19``, BOOT running the very
  ``probes`` package this daemon imported (its folder first on ``sys.path``) in isolated mode
  (no ``PYTHON*`` variables, no user site, not the working directory: a ``probes/`` folder where
  the daemon was started, or on ``PYTHONPATH``, once ran in its place), from ``/`` (the child
  lowers its own priority to 19 first), with ``CUDA_VISIBLE_DEVICES`` set to the requested
  device only (none for a CPU probe), so ranks on the other devices of a live job are not
  touched; its CPU work yields to theirs. The parameters passed are re-serialized from the
  validated dataclass, never the request's text; the argument list goes to ``execve``
  directly, no shell. The child is killed after the probe's ``timeout_s`` plus
  :data:`GRACE_S` (start-up and the torch import) and the request gets a ``timeout`` result.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import probes
from diag import schema
from diag.proto import diag_pb2 as pb
from probes.base import params_dict
from probes.validate import RequestRejected, validate

log = logging.getLogger(__name__)

MAX_QUEUE = 4
GRACE_S = 30.0
#: The child's working directory: fixed, owned by no user.
CHILD_CWD = "/"


def _boot() -> str:
    """The child's ``-c`` program: this daemon's ``probes`` (and ``diag``) first on the path, then
    ``probes``' ``__main__`` with the arguments that follow."""
    import diag

    roots = list(dict.fromkeys(str(Path(m.__file__ or "").resolve().parent.parent)
                               for m in (probes, diag)))  # fmt: skip
    return (
        f"import sys; sys.path[:0] = {roots!r}; import runpy; "
        "runpy.run_module('probes', run_name='__main__', alter_sys=True)"
    )


class ProbeRunner:
    """Validates and runs probe requests for ``host``; each result goes to ``emit`` (the daemon's
    :meth:`~diag.daemon.daemon.Daemon.emit`, which stamps the envelope and ships it)."""

    def __init__(
        self,
        host: str,
        emit: Callable[[schema.Event], None],
        *,
        python: str = sys.executable,
        grace_s: float = GRACE_S,
        max_queue: int = MAX_QUEUE,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.host = host
        self._emit = emit
        self._python = python
        self._grace_s = grace_s
        self._wall = wall_clock
        self._queue: queue.Queue[tuple[pb.ProbeRequest, Any, int] | None] = queue.Queue(max_queue)
        self._thread: threading.Thread | None = None
        self.num_run = 0
        self.num_rejected = 0

    def addressed_here(self, req: pb.ProbeRequest) -> bool:
        return req.host in ("*", self.host)

    def submit(self, req: pb.ProbeRequest) -> bool:
        """Validate ``req`` and queue it; ``False`` (and a result already emitted) if refused."""
        t0 = time.monotonic_ns()
        try:
            params = validate(req.probe, req.params_json)
            if req.device not in ("", "cpu") and not req.device.isdigit():
                raise RequestRejected(
                    f"device must be a CUDA index or cpu, got {req.device[:20]!r}"
                )
        except RequestRejected as exc:
            self.num_rejected += 1
            log.warning("probe request %s rejected: %s", req.request_id, exc)
            self._result(req, t0, status="rejected", detail=str(exc))
            return False
        try:
            self._queue.put_nowait((req, params, t0))
        except queue.Full:
            log.warning(
                "probe request %s dropped: %d probes already queued",
                req.request_id,
                self._queue.maxsize,
            )
            self._result(req, t0, status="failed", detail="the daemon's probe queue is full")
            return False
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="diag-probes", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop after the probe in flight (not waited for beyond ``timeout_s``)."""
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self.run_one(*item)
            except Exception:  # never let a probe take the worker down
                log.exception("running a probe failed")

    def command(self, req: pb.ProbeRequest, params: Any) -> tuple[list[str], dict[str, str]]:
        """The child's argument list and environment (the requested device only)."""
        gpu = req.device.isdigit()
        cmd = [
            self._python,
            "-I",
            "-c",
            _boot(),
            req.probe,
            "--params",
            json.dumps(params_dict(params)),
            "--device",
            "cuda:0" if gpu else "cpu",
            "--device-id",
            f"cuda:{req.device}@{self.host}" if gpu else f"cpu@{self.host}",
            "--nice",
            "19",
        ]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=req.device if gpu else "")
        return cmd, env

    def run_one(self, req: pb.ProbeRequest, params: Any, t0: int) -> None:
        """Run one validated request in a child process and emit its results."""
        cmd, env = self.command(req, params)
        timeout_s = float(params.timeout_s) + self._grace_s
        try:
            out = subprocess.run(
                cmd, env=env, cwd=CHILD_CWD, capture_output=True, text=True, timeout=timeout_s,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            self._result(req, t0, status="timeout", detail=f"no result within {timeout_s:g} s")
            return
        except OSError as exc:
            self._result(req, t0, status="failed", detail=f"cannot start the probe: {exc}")
            return
        self.num_run += 1
        try:
            rows = json.loads(out.stdout)
        except ValueError:
            rows = None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            last = (out.stderr.strip().splitlines() or ["no output"])[-1][:200]
            self._result(req, t0, status="failed", detail=f"exit {out.returncode}: {last}")
            return
        for row in rows:
            self._result(
                req,
                t0,
                status=str(row.get("status", "failed")),
                device=str(row.get("device", "")),
                metric=str(row.get("metric", "")),
                value=None if row.get("value") is None else float(row["value"]),
                unit=str(row.get("unit", "")),
                detail=str(row.get("detail", "")),
                lower_is_better=bool(row.get("lower_is_better", False)),
                params_json=json.dumps(row.get("params", {})),
            )

    def _result(self, req: pb.ProbeRequest, t0: int, **fields: Any) -> None:
        fields.setdefault("params_json", req.params_json[:1000])
        self._emit(
            schema.ProbeResultEvent(
                ts_ns=self._wall(),
                host="",
                source="",
                seq=-1,
                rank=req.rank,
                request_id=req.request_id,
                probe=req.probe[:40],
                duration_ns=time.monotonic_ns() - t0,
                **fields,
            )
        )
