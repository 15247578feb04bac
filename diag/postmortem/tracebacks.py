"""Python tracebacks as text -> frames and the exception that ended them.

A traceback is ``Traceback (most recent call last):``, then ``  File "f.py", line N, in fn``
frames (each usually followed by its indented source line), then the exception line
``module.Type: message`` at column 0. Chained exceptions ("During handling of the above
exception...", "The above exception was the direct cause...") repeat the pattern; the last one
is the exception that ended the process, so its frames and line are the ones kept.
"""

from __future__ import annotations

import re

from diag.postmortem.records import StackFrame

HEADER = "Traceback (most recent call last):"
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d{1,9}), in (?P<func>.+?)\s*$')
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
#: ``torch.OutOfMemoryError: CUDA out of memory...``, ``KeyboardInterrupt``, ``c10::Error``.
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:::[\w:]+)?)(?::\s?(?P<msg>.*))?$")


def exception_type(line: str) -> str:
    """The exception type a traceback's last line names (``""`` if it does not look like one)."""
    m = _EXC.match(line.strip())
    if not m:
        return ""
    name = m.group("type")
    last = name.rsplit(".", 1)[-1]
    # a bare word is an exception type only if it reads like one (``Error``, ``Exception``, ...)
    if m.group("msg") is None and not re.search(r"(Error|Exception|Interrupt|Exit)$", last):
        return ""
    return name


def parse_traceback(text: str) -> tuple[tuple[StackFrame, ...], str, str]:
    """``(frames, exception type, exception line)`` of the last traceback in ``text``; frames
    are empty and type ``""`` when there is none."""
    frames: list[StackFrame] = []
    exc_type = exc_line = ""
    inside = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith(HEADER):
            frames, inside = [], True
            continue
        if not inside:
            continue
        m = FRAME.match(line)
        if m:
            frames.append(
                StackFrame(file=m.group("file"), line=int(m.group("line")), func=m.group("func"))
            )
        elif line[:1].isspace() or not line:
            if frames and not frames[-1].code and line.strip():
                f = frames[-1]
                frames[-1] = StackFrame(file=f.file, line=f.line, func=f.func, code=line.strip())
        elif line.startswith(CHAINED):
            inside = False
        elif exception_type(line):
            exc_type, exc_line = exception_type(line), line.strip()
            inside = False
    return tuple(frames), exc_type, exc_line
