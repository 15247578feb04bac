"""The rank processes of this node: which are gone, and their native stacks on a hang.

:class:`RankWatch` is a daemon collector told about each rank process by its ``RankInfo``
(:meth:`RankWatch.track`). Every ``interval_s`` it checks that each still exists (``/proc/<pid>``
with the start time it had: a reused pid is another process; a zombie is gone) and emits one
:class:`~diag.schema.RankExit` (``observer="daemon"``, no exit status: the ranks are torchrun's
children, not the daemon's) for each that vanished.

When any local rank reports a hang (:meth:`RankWatch.on_hang`, called by the daemon for each
:class:`~diag.schema.HangReport` it forwards), it runs ``py-spy dump --native --json`` on every
tracked rank, in a background thread, each bounded by ``timeout_s``, and emits one
:class:`~diag.schema.StackDump` (``origin="py-spy"``) per thread: native frames too, and the
stack of a rank whose hook cannot report (its training thread holds the GIL). A process is dumped
at most once per ``cooldown_s``. Without py-spy (not installed, or it fails) the collector emits
one :class:`~diag.schema.CollectorError` note and goes on without native stacks
(``DaemonConfig.stack_tool = ""`` turns the dumps off without a note).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.collectors.base import UNSTAMPED

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str], float], tuple[int, str, str]]


def run_command(cmd: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``cmd``; status -1 when it timed out or cannot start."""
    try:
        res = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {timeout_s:.0f} s"
    except OSError as exc:
        return -1, "", str(exc)
    return res.returncode, res.stdout, res.stderr


def find_stack_tool(name: str) -> str | None:
    """The py-spy executable: ``name`` on ``PATH``, else beside this Python (a virtualenv)."""
    if not name:
        return None
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def pyspy_threads(text: str, pid: int) -> list[dict[str, Any]]:
    """py-spy's ``dump --json`` output as ``StackDump`` payloads (frames innermost first)."""
    out = []
    for thread in json.loads(text):
        lines = []
        for f in thread.get("frames") or ():
            native = bool(f.get("module")) and not f.get("line")
            where = f.get("short_filename") if native else f.get("filename")
            lines.append(f"{where}:{int(f.get('line') or 0)} {f.get('name', '?')}")
        tid = int(thread.get("os_thread_id") or thread.get("thread_id") or 0)
        out.append(
            {
                "pid": pid,
                "thread_id": tid,
                "thread_name": str(thread.get("thread_name") or ""),
                "is_main": tid == pid,
                "frames": "\n".join(lines[: schema.MAX_FRAMES]),
                "num_frames": len(lines),
            }
        )
    return out


@dataclass(frozen=True, slots=True)
class _Proc:
    rank: int
    local_rank: int
    start_ticks: int  # from /proc/<pid>/stat: tells a reused pid from the rank we tracked


class RankWatch:
    """See the module docstring. ``run`` executes a command (injected in tests)."""

    name: ClassVar[str] = "ranks"

    def __init__(
        self,
        *,
        interval_s: float = 0.25,
        proc_root: Path = Path("/proc"),
        stack_tool: str | None = None,
        missing_note: str = "",
        timeout_s: float = 10.0,
        cooldown_s: float = 60.0,
        run: Runner = run_command,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.interval_s = interval_s
        self.proc_root = Path(proc_root)
        self.stack_tool = stack_tool
        self.missing_note = missing_note
        self.timeout_s = timeout_s
        self.cooldown_s = cooldown_s
        self._run = run
        self._clock = clock
        self._wall = wall_clock
        self._procs: dict[int, _Proc] = {}
        self._last_dump: dict[int, float] = {}
        self._lock = threading.Lock()
        self._out: list[schema.Event] = []
        self._noted = False
        self._worker: threading.Thread | None = None

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> RankWatch:
        tool = find_stack_tool(cfg.stack_tool)
        missing = (
            f"{cfg.stack_tool} not found: no native stacks of hung ranks" if cfg.stack_tool else ""
        )
        return cls(
            interval_s=cfg.rank_watch_interval_s,
            stack_tool=tool,
            missing_note=missing,
            timeout_s=cfg.stack_timeout_s,
        )

    def _start_ticks(self, pid: int) -> int | None:
        """The start time of live process ``pid``; None if it is gone or a zombie (dead, not
        yet reaped by its parent)."""
        try:
            stat = (self.proc_root / str(pid) / "stat").read_text()
        except OSError:
            return None
        fields = stat[stat.rfind(")") + 2 :].split()  # comm may hold spaces and parentheses
        return None if fields[0] in ("Z", "X", "x") else int(fields[19])

    def track(self, pid: int, rank: int, local_rank: int) -> None:
        """Watch ``pid`` as rank ``rank`` (from its ``RankInfo``)."""
        ticks = self._start_ticks(pid)
        if ticks is not None:
            with self._lock:
                self._procs[pid] = _Proc(rank, local_rank, ticks)

    @property
    def tracked_pids(self) -> list[int]:
        with self._lock:
            return sorted(self._procs)

    def collect(self, now_ns: int) -> Iterable[schema.Event]:
        with self._lock:
            procs = list(self._procs.items())
        gone = [(pid, p) for pid, p in procs if self._start_ticks(pid) != p.start_ticks]
        out: list[schema.Event] = []
        with self._lock:
            for pid, _ in gone:
                self._procs.pop(pid, None)
            out, self._out = self._out, []
        for pid, p in gone:
            out.append(
                schema.RankExit(
                    ts_ns=now_ns, rank=p.rank, local_rank=p.local_rank, pid=pid,
                    observer="daemon", **UNSTAMPED,  # type: ignore[arg-type]
                )
            )  # fmt: skip
        return out

    def on_hang(self, rank: int) -> None:
        """A local rank reported a hang: dump every tracked rank (in the background)."""
        if not self.stack_tool:
            if self.missing_note:
                self._note(self.missing_note)
            return
        now = self._clock()
        with self._lock:
            if self._worker is not None and self._worker.is_alive():
                return
            pids = [
                pid
                for pid in self._procs
                if now - self._last_dump.get(pid, -self.cooldown_s) >= self.cooldown_s
            ]
            if not pids:
                return
            for pid in pids:
                self._last_dump[pid] = now
            self._worker = threading.Thread(
                target=self._dump_all, args=(pids,), name="diag-py-spy", daemon=True
            )
            self._worker.start()

    def _note(self, message: str) -> None:
        with self._lock:
            if self._noted:
                return
            self._noted = True
            log.warning("%s", message)
            self._out.append(
                schema.CollectorError(
                    ts_ns=self._wall(), collector=self.name, message=message,
                    **UNSTAMPED,  # type: ignore[arg-type]
                )
            )  # fmt: skip

    def dump_now(self, pids: Iterable[int]) -> None:
        """Dump ``pids`` in this thread (the background worker's body)."""
        self._dump_all(list(pids))

    def _dump_all(self, pids: list[int]) -> None:
        for pid in pids:
            try:
                events = self._dump(pid)
            except Exception as exc:  # a parse failure must not end the daemon
                self._note(f"py-spy output unreadable: {type(exc).__name__}: {exc}")
                continue
            with self._lock:
                self._out.extend(events)

    def _dump(self, pid: int) -> list[schema.Event]:
        assert self.stack_tool
        with self._lock:
            proc = self._procs.get(pid)
        if proc is None:
            return []
        base = [self.stack_tool, "dump", "--pid", str(pid), "--json"]
        rc, out, err = self._run([*base, "--native"], self.timeout_s)
        if rc != 0:  # native unwinding is not available everywhere: Python frames then
            rc, out, err = self._run(base, self.timeout_s)
        if rc != 0:
            first = (err.strip().splitlines() or [f"exit status {rc}"])[0]
            self._note(f"py-spy dump failed for pid {pid}: {first[:200]}")
            return []
        now = self._wall()
        return [
            schema.StackDump(
                ts_ns=now, rank=proc.rank, local_rank=proc.local_rank, reason="hang",
                origin="py-spy", **payload, **UNSTAMPED,  # type: ignore[arg-type]
            )
            for payload in pyspy_threads(out, pid)
        ]  # fmt: skip

    def close(self) -> None:
        worker = self._worker
        if worker is not None:
            worker.join(self.timeout_s)
