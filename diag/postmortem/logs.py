"""Worker logs -> :class:`Clue` records: what each rank said before the job died or hung.

Which rank a line belongs to, from its prefixes (stripped in any order):

* ``[rank3]:`` - torch's own (``init_process_group`` prefixes uncaught-exception tracebacks; c10d's
  C++ log lines carry it too), a global rank;
* ``[default3]:`` - torchrun's ``--tee`` prefix (role name + local rank);
* ``[3]:`` - torchrun's ``--log-line-prefix-template "[${rank}]:"``, a global rank;
* ``host:pid:tid [dev] NCCL WARN`` - NCCL's own prefix: the CUDA device, taken as the local rank;
* otherwise the file's own rank (``.../attempt_0/3/stderr.log`` is local rank 3, a name with
  ``rank3`` is rank 3), else none.

What is kept (message formats as torch 2.x and NCCL print them):

* Python tracebacks (per rank, interleaved lines are kept apart): the frames and the last
  exception line, plus up to four continuation lines of its message;
* ``terminate called after throwing an instance of 'T'`` + ``what(): ...`` (C++), and
  ``Process group watchdog thread terminated with exception: ...``;
* ``CUDA error: ...``, ``Cuda failure '...'``, ``CUDA out of memory``, ``NCCL WARN ...``, and
  ``NVRM: Xid (PCI:...): N`` kernel lines;
* waiting: ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=S, OpType=OP ...``,
  ``Timed out waiting Nms for recv operation to complete`` (gloo), the watchdog's ``last enqueued
  work: E, last completed work: C``, ``Ranks 1, 3 failed to pass monitoredBarrier``;
* torchrun: ``failed (exitcode: C) local_rank: L (pid: P)``, its failure summary and its
  rendezvous result (read by :mod:`diag.postmortem.torchrun`);
* the c10d "Stack trace of the failed collective" (``#0 all_reduce from file.py:N``) after a
  timeout, as that timeout's stack;
* native aborts: glibc's heap checks (``malloc(): unsorted double linked list corrupted``,
  ``double free or corruption``, ``free(): invalid pointer``), ``*** stack smashing detected
  ***``, a failed C ``assert`` (``Assertion `x' failed.``): an ``abort`` clue;
* :mod:`faulthandler`'s report of a fatal signal (``Fatal Python error: Segmentation fault``,
  then ``Current thread 0x... (most recent call first):`` and ``Thread 0x...`` blocks of
  ``  File "f.py", line N in fn`` frames): a ``fatal`` clue whose stack is the current thread's
  and whose detail names where each other thread was (the hook writes these reports to a file
  per rank: :mod:`diag.hook.crash`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from diag.postmortem.records import Clue, StackFrame
from diag.postmortem.torchrun import Rendezvous, SummaryReader
from diag.postmortem.tracebacks import CHAINED, FRAME, HEADER, exception_type
from diag.untrusted import printable

_RAY = re.compile(r"^\(\w+ pid=\d+[^)]*\)\s*")
_RANK = re.compile(r"^\[rank(\d{1,7})\]:\s?")
_TEE = re.compile(r"^\[([A-Za-z_]\w*?)(\d{1,7})\]:\s?")
_NUM = re.compile(r"^\[(\d{1,7})\]:\s?")
_GLOG = re.compile(r"^\[?[EWIF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?(?:\s+\d+)?\s+[^\]\s]+\]\s?")
_NCCL_PREFIX = re.compile(r"^(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[(?P<dev>\d{1,7})\] ")

_KEYWORDS = re.compile(
    r"Watchdog|watchdog|Timeout at|Timed out|monitoredBarrier|NCCL WARN|Xid|terminate called|"
    r"what\(\)|CUDA|Cuda|out of memory|OutOfMemory|exitcode|Rendezvous complete|Root Cause|"
    r"Failures:|Stack trace of|Killed process|^#\d+ |\(\): |corrupt|Assertion|detected \*\*\*"
)
_WD_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
)
_PG_TAG = re.compile(r"\[PG ID (\d+) PG GUID ([^\s(\]]+)(?:\(([^)]*)\))? Rank (\d{1,7})\]")
_PG_STATUS = re.compile(
    r"(?:failure detected by watchdog at work sequence id|Timeout at NCCL work):? (\d+),?"
    r".*?last enqueued (?:NCCL )?work: (-?\d+), last completed (?:NCCL )?work: (-?\d+)"
)
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)\s*ms for (\w+) operation to complete")
_BARRIER = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")
_NCCL_WARN = re.compile(r"NCCL WARN (.*)")
_XID = re.compile(r"NVRM: Xid \(PCI:([^)]+)\): (\d+)")
_SYSLOG_HOST = re.compile(r"(\S+) kernel: ")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']+)'")
_WHAT = re.compile(r"^\s*what\(\):\s+(.*)")
_WD_EXC = re.compile(r"watchdog thread terminated with exception: (.*)")
_CUDA = re.compile(r"CUDA error: .*|Cuda failure .*|CUDA out of memory.*")
_HOST_OOM = re.compile(r"Out of memory: Killed process (\d+)")
_ELASTIC = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d{1,7}) \(pid: (\d+)\)")
_NCCL_STACK = re.compile(r"^#\d+ (\S+) from (.+):(\d+)\s*$")
_NATIVE_ABORT = re.compile(
    r"^(?:malloc|free|realloc|calloc|malloc_consolidate|munmap_chunk|_int_free|_int_malloc|"
    r"_int_realloc|tcache_thread_shutdown)\(\): \S.*|^double free or corruption.*|"
    r"^corrupted (?:size vs\. prev_size|double-linked list).*|"
    r"^\*\*\* (?:stack smashing|buffer overflow) detected \*\*\*.*|.*: Assertion `.+' failed\.$"
)
_FATAL = re.compile(r"^Fatal Python error: (.+)$")
_FH_THREAD = re.compile(
    r"^(Current thread|Thread|Stack)(?: (0x[0-9a-fA-F]+))? \(most recent call first\):"
)
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d{1,9}) in (?P<func>.+?)\s*$')
MAX_THREADS_TOLD = 8  # other threads named in a fatal clue's detail


@dataclass(slots=True)
class LogResult:
    """What one log says: clues, the job's size and local -> global ranks where it says so."""

    clues: list[Clue] = field(default_factory=list)
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    ranks_seen: set[int] = field(default_factory=set)  # global ranks any line was prefixed with
    locals_seen: set[int] = field(default_factory=set)  # local ranks (tee prefixes) likewise
    num_bad_lines: int = 0  # lines not read: a number in them too long to be one
    first_bad: str = ""  # the first of them: "line N: why"

    def bad_line(self, no: int, exc: Exception) -> None:
        self.num_bad_lines += 1
        if not self.first_bad:
            self.first_bad = f"line {no}: {printable(str(exc))[:120]}"


@dataclass(slots=True)
class _Stream:
    """Per-rank parsing state: an open traceback, the last exception to continue."""

    frames: list[StackFrame] | None = None
    cont: int = -1  # index in the output of the clue whose message continues
    cont_left: int = 0
    terminate: str = ""
    in_stack: int = -1  # index of the timeout clue an NCCL "Stack trace" belongs to
    fatal: int = -1  # index of the fatal clue whose faulthandler report is being read
    fh_thread: str = ""  # the thread block being read ("current" for the crashing thread)
    fh_current: bool = False  # the report has a block of the crashing thread
    fh_frames: list[StackFrame] = field(default_factory=list)  # its frames, innermost first


def _strip(line: str) -> tuple[str, int | None, int | None]:
    """``(message, global rank, local rank)`` of one line, its prefixes removed."""
    rank = local = None
    while True:
        for rx, kind in ((_RAY, ""), (_RANK, "r"), (_NUM, "r"), (_TEE, "l"), (_GLOG, "")):
            m = rx.match(line)
            if m:
                if kind == "r" and rank is None:
                    rank = int(m.group(1))
                elif kind == "l" and local is None:
                    local = int(m.group(2))
                line = line[m.end() :]
                break
        else:
            return line, rank, local


def parse_log(
    lines: Iterable[str], source: str, *, rank: int | None = None, local_rank: int | None = None
) -> LogResult:
    """Clues in a log's lines; ``rank``/``local_rank``: the file's own, for unprefixed lines."""
    out = LogResult()
    streams: dict[tuple[int | None, int | None], _Stream] = {}
    summary = SummaryReader(source)
    for no, physical in enumerate(lines, 1):
        for raw in physical.rstrip("\n").split("\r"):
            raw = raw[:10_000]
            try:
                if summary.feed(raw, no) or out.rendezvous.feed_field(raw):
                    continue
                msg, r, lr = _strip(raw)
                if r is not None:
                    out.ranks_seen.add(r)
                if lr is not None:
                    out.locals_seen.add(lr)
                if r is None and lr is None:
                    r, lr = rank, local_rank
                st = streams.setdefault((r, lr), _Stream())
                _line(msg, raw, no, source, r, lr, st, out)
            except ValueError as exc:  # int() of a number of thousands of digits
                out.bad_line(no, exc)
    for st in streams.values():  # a faulthandler report that ends the file
        _end_report(st, out)
    try:
        out.clues.extend(summary.close())
    except ValueError as exc:
        out.bad_line(summary.block.line_no if summary.block else 0, exc)
    return out


def _line(
    msg: str,
    raw: str,
    no: int,
    source: str,
    r: int | None,
    lr: int | None,
    st: _Stream,
    out: LogResult,
) -> None:
    def add(**kw: object) -> int:
        kw.setdefault("rank", r)
        kw.setdefault("local_rank", lr)
        out.clues.append(Clue(source=source, line_no=no, **kw))  # type: ignore[arg-type]
        return len(out.clues) - 1

    if st.fatal >= 0 and _faulthandler(msg, st, out):
        return
    if st.frames is not None:  # inside a traceback
        m = FRAME.match(msg)
        if m:
            st.frames.append(
                StackFrame(file=m.group("file"), line=int(m.group("line")), func=m.group("func"))
            )
            return
        if msg[:1].isspace() and st.frames:
            f = st.frames[-1]
            if not f.code:
                st.frames[-1] = dataclasses.replace(f, code=msg.strip())
            return
        if msg.startswith(CHAINED) or not msg.strip():
            return
        if msg.startswith(HEADER):
            st.frames = []
            return
        etype = exception_type(msg)
        frames: list[StackFrame] = st.frames
        st.frames = None
        if etype:
            st.cont = add(
                kind="exception", text=msg.strip()[:500], exc_type=etype, stack=tuple(frames)
            )
            # the line may also say what kind of failure it was (a gloo timeout, a CUDA error)
            _match(msg, raw, add, st, out, r)
            st.cont_left = 4
            return
    if msg.startswith(HEADER):
        st.frames, st.cont_left = [], 0
        return
    if st.cont_left and msg.strip() and not msg.startswith("["):
        # the exception's message goes on (DistBackendError: "... Last error: Cuda failure ...")
        c = out.clues[st.cont]
        out.clues[st.cont] = dataclasses.replace(c, detail=(c.detail + "\n" + msg.strip()).strip())
        st.cont_left -= 1
    else:
        st.cont_left = 0
    if m := _FATAL.match(msg.strip()):
        st.fatal = add(kind="fatal", text=msg.strip()[:500])
        st.fh_thread, st.fh_frames, st.fh_current = "", [], False
        return
    if st.in_stack >= 0:
        m = _NCCL_STACK.match(msg.strip())
        if m:
            c = out.clues[st.in_stack]
            frame = StackFrame(file=m.group(2), line=int(m.group(3)), func=m.group(1))
            out.clues[st.in_stack] = dataclasses.replace(c, stack=(*c.stack, frame))
            return
        st.in_stack = -1
    _match(msg, raw, add, st, out, r)


def _match(
    msg: str, raw: str, add: Callable[..., int], st: _Stream, out: LogResult, r: int | None
) -> None:
    """The one-line patterns of the module docstring (outside traceback frames)."""
    if not _KEYWORDS.search(msg):
        return
    text = msg.strip()[:500]
    pg_m = _PG_TAG.search(msg)
    pg = f"{pg_m.group(2)}({pg_m.group(3) or ''})" if pg_m else ""
    extra: dict[str, int] = {}
    if r is None and pg_m and pg_m.group(2) == "0":
        extra["rank"] = int(pg_m.group(4))  # the default group's rank is the global rank
    nccl = _NCCL_PREFIX.match(msg)
    if nccl and r is None:
        extra["local_rank"] = int(nccl.group("dev"))

    def put(**kw: object) -> int:
        return add(**{**extra, **kw})

    if m := _WD_TIMEOUT.search(msg):
        put(kind="timeout", text=text, seq=int(m.group(1)), op=m.group(2).lower(), pg=pg)
    elif m := _PG_STATUS.search(msg):
        put(
            kind="pg_status",
            text=text,
            seq=int(m.group(1)),
            pg=pg,
            last_enqueued=int(m.group(2)),
            last_completed=int(m.group(3)),
        )
    elif m := _GLOO_TIMEOUT.search(msg):
        put(kind="timeout", text=text, op=m.group(2))
    elif "Stack trace of the failed collective" in msg and out.clues:
        st.in_stack = next(
            (i for i in range(len(out.clues) - 1, -1, -1) if out.clues[i].kind == "timeout"), -1
        )
    elif m := _BARRIER.search(msg):
        peers = tuple(int(x) for x in re.findall(r"\d+", m.group(1)))
        put(kind="barrier", text=text, peers=peers)
    elif m := _XID.search(msg):
        host = _SYSLOG_HOST.search(raw)
        put(kind="xid", text=text, op=m.group(2), host=host.group(1) if host else "")
    elif m := _TERMINATE.search(msg):
        st.terminate = m.group(1)
    elif (m := _WHAT.match(msg)) and st.terminate:
        st.cont = put(kind="exception", text=m.group(1).strip()[:500], exc_type=st.terminate)
        st.cont_left, st.terminate = 4, ""
    elif m := _WD_EXC.search(msg):
        put(kind="error", text=m.group(1).strip()[:500], pg=pg)
    elif m := _NCCL_WARN.search(msg):
        put(
            kind="error",
            text="NCCL WARN " + m.group(1).strip()[:480],
            host=nccl.group("host") if nccl else "",
        )
    elif m := _CUDA.search(msg):
        put(kind="oom" if "out of memory" in m.group(0) else "error", text=m.group(0)[:500])
    elif m := _NATIVE_ABORT.match(text):
        put(kind="abort", text=text)
    elif m := _HOST_OOM.search(msg):
        put(kind="oom", text=text, pid=int(m.group(1)), op="host")
    elif m := _ELASTIC.search(msg):
        put(
            kind="exit",
            text=text,
            exitcode=int(m.group(1)),
            pid=int(m.group(3)),
            local_rank=int(m.group(2)),
        )
    elif "Rendezvous complete" in msg:
        out.rendezvous.feed(msg)


def _faulthandler(msg: str, st: _Stream, out: LogResult) -> bool:
    """One line of a faulthandler report (True: taken); the report ends at a line that is none
    of its parts (the frames of each thread go to the fatal clue as they end)."""
    text = msg.strip()
    if m := _FH_THREAD.match(text):
        _end_thread(st, out)
        st.fh_thread = "current" if m.group(1) != "Thread" else (m.group(2) or "?")
        return True
    if st.fh_thread and (m := _FH_FRAME.match(msg)):
        frame = StackFrame(file=m.group("file"), line=int(m.group("line")), func=m.group("func"))
        st.fh_frames.append(frame)
        return True
    if not text or text == "<no Python frame>" or text.startswith("File "):
        _end_thread(st, out)  # a blank line between blocks (or a frame cut short)
        return True
    _end_report(st, out)
    return text.startswith("Extension modules:")


#: The detail line of a report with no block for the crashing thread.
NATIVE_THREAD = "the signal came on a thread with no Python frames (native code)"


def _end_report(st: _Stream, out: LogResult) -> None:
    """The report is over: its last thread block in, and, when none was the crashing thread's
    (faulthandler names it ``Current thread`` only if it runs Python), a line saying so."""
    _end_thread(st, out)
    if st.fatal >= 0 and not st.fh_current:
        c = out.clues[st.fatal]
        out.clues[st.fatal] = dataclasses.replace(
            c, detail=(NATIVE_THREAD + "\n" + c.detail).strip()
        )
    st.fatal, st.fh_current = -1, False


def _stdlib(path: str) -> bool:
    """A frame of Python's own library (``.../lib/python3.11/threading.py``)."""
    return bool(re.search(r"/lib/python3[.\d]*/", path)) and "-packages/" not in path


def _end_thread(st: _Stream, out: LogResult) -> None:
    """The thread block read so far into the fatal clue: its stack (the current thread, in
    traceback order: innermost last) or a line of its detail (another thread, where it was)."""
    thread, frames = st.fh_thread, st.fh_frames
    st.fh_thread, st.fh_frames = "", []
    if not thread or st.fatal < 0:
        return
    c = out.clues[st.fatal]
    if thread == "current":
        st.fh_current = True
        out.clues[st.fatal] = dataclasses.replace(c, stack=tuple(reversed(frames)))
        return
    if c.detail.count("\n") + 1 >= MAX_THREADS_TOLD:
        return
    where = frames[0].text() if frames else "no Python frame"
    own = [f for f in frames if not _stdlib(f.file)]
    if own and own[0] is not frames[0]:
        where += f", from {own[0].text()}"  # the code that thread runs: a waiting lock says little
    if len(own) > 1:
        # and whose thread it is (diag's hook, a data loader's): its outermost frame of its own,
        # where the innermost is a helper (a pause, a lock) that many threads call
        where += f", running {own[-1].text()}"
    line = f"thread {thread}: {where}"
    out.clues[st.fatal] = dataclasses.replace(c, detail=(c.detail + "\n" + line).strip())
