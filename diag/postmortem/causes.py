"""What a clue says about cause: the failure itself or an echo of a peer's, and whose fault.

:func:`classify` applies these rules in order to a clue's exception type, line and message:

1. Waiting (a collective timeout, gloo's "Timed out waiting", the watchdog's PG status, a
   monitoredBarrier report): not a failure of this rank, an echo (``primary=False``).
2. Xid (``NVRM: Xid``): **node** - the GPU driver reported a fault.
3. Out of memory. The host's OOM killer: **node** (host memory). CUDA: torch's message gives the
   GPU's capacity, what is free and what this process holds; if other processes hold at least
   10% of the GPU (capacity - free - this process), **node** (the memory was not the job's to
   use); otherwise **program** (the job's own tensors filled the GPU: batch, model or a leak).
4. CUDA errors of the device (ECC, "fallen off the bus", "unspecified launch failure", "unknown
   error", NCCL's unhandled CUDA error): **node**. CUDA errors of the program's kernels
   ("device-side assert", illegal memory access or address, invalid argument or configuration):
   **program**, unless an Xid was logged on the same host (then the hardware is the likelier
   source: **node**). Any other CUDA error: **node**.
5. Network errors a rank reports about its own transport (NCCL ``NET/IB``/``NET/Socket``
   warnings, completion errors, ``ncclSystemError``: the rank's own sockets, IB or shared
   memory failed, where its peers see ``ncclRemoteError``): **link**.
6. Echoes of a peer's failure (the communicator aborted, connection reset or closed by the peer,
   ``ncclRemoteError``, ``DistBackendError`` without a CUDA cause, torchrun's ``SIGTERM`` to the
   survivors, ``ChildFailedError``): not primary.
7. ``ncclInvalidUsage``: **program**. Any other Python exception: **program** (its type names it).
8. Exit without a message: ``SIGKILL`` - primary, **unknown** (the host's OOM killer or the
   scheduler: only a kernel log tells); ``SIGSEGV`` - **program** (native code crashed);
   ``SIGABRT`` - an echo (c10d's watchdog aborts the process after a collective error);
   ``SIGTERM`` - an echo; a non-zero exit code - primary, **unknown** (no traceback was kept).
9. A native abort's own message (glibc's heap checks, stack smashing, a failed C assertion):
   primary, **program** (native code in the process broke its memory or an invariant: torch,
   an extension, a library). faulthandler's fatal report: ``Segmentation fault``, ``Bus
   error``, ``Illegal instruction``, ``Floating point exception`` - primary, **program**;
   ``Aborted`` - as ``SIGABRT`` (its reason is another line, when one was logged).

A SIGABRT is an echo only where a collective error could have caused it: a rank that logged
nothing but its exit (and faulthandler's report), where nothing in the remains timed out, and
that torchrun names as the first failure (or that left a fatal report), aborted on its own:
:func:`lone_abort` - primary, **unknown** (no message says why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diag.postmortem.records import Clue, fatal_exitcode


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """``cause`` (a :data:`~diag.findings.CAUSES` name), whether the clue is the failure
    itself (``primary``) rather than an echo of a peer's, a short ``label`` and ``why``."""

    cause: str
    primary: bool
    label: str
    why: str


WAITING = ("timeout", "pg_status", "barrier")
_NODE_CUDA = re.compile(
    r"ECC|fallen off the bus|GPU is lost|unspecified launch failure|CUDA error: unknown error|"
    r"ncclUnhandledCudaError|uncorrectable|GPU Fault|NVLink|device not ready|"
    r"busy or unavailable|hardware",
    re.IGNORECASE,
)
_PROGRAM_CUDA = re.compile(
    r"device-side assert|illegal memory access|illegal address|misaligned address|"
    r"invalid argument|invalid configuration|illegal instruction|no kernel image",
    re.IGNORECASE,
)
_CUDA = re.compile(r"CUDA error|Cuda failure|cudaError|CUDA driver", re.IGNORECASE)
_LINK = re.compile(
    r"NET/IB|NET/Socket|transport/net|ibv_|Got completion from peer|NCCL WARN .*(?:IB|socket)|"
    r"ncclSystemError|unhandled system error",
    re.IGNORECASE,
)
_ECHO = re.compile(
    r"communicator was aborted|ncclRemoteError|remote process exited|Connection closed by peer|"
    r"Connection reset by peer|Broken pipe|failed to recv|ChildFailedError|heartbeat|"
    r"Watchdog caught collective operation timeout|Timed out waiting|"
    r"Some NCCL operations have failed or timed out|DistBackendError|DistNetworkError|"
    r"ProcessGroupNCCL is shutting down|KeyboardInterrupt|SignalException|"
    r"NCCL communicator.*abort",
    re.IGNORECASE,
)
_GIB = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2, "bytes": 1 / 1024**3}
_SIZE = r"([\d.]+) (GiB|MiB|KiB|bytes)"


def _gib(pattern: str, text: str) -> float | None:
    m = re.search(pattern.replace("SIZE", _SIZE), text)
    return float(m.group(1)) * _GIB[m.group(2)] if m else None


def oom_verdict(clue: Clue) -> Verdict:
    """Rule 3: whose memory filled the GPU (or the host)."""
    if clue.op == "host":
        return Verdict(
            cause="node",
            primary=True,
            label="host out of memory",
            why="the host's OOM killer killed a process",
        )
    text = f"{clue.text} {clue.detail}"
    cap = _gib(r"total capacity of SIZE", text)
    free = _gib(r"of which SIZE is free", text)
    mine = _gib(r"this process has SIZE memory in use", text)
    if cap and free is not None and mine is not None:
        others = cap - free - mine
        if others >= 0.1 * cap:
            return Verdict(
                cause="node",
                primary=True,
                label="CUDA out of memory",
                why=f"other processes held {others:.1f} GiB of the GPU's {cap:.1f} GiB",
            )
        return Verdict(
            cause="program",
            primary=True,
            label="CUDA out of memory",
            why=f"the job's own process held {mine:.1f} of {cap:.1f} GiB (no other process "
            "held much): batch, model or a leak",
        )
    return Verdict(
        cause="program",
        primary=True,
        label="CUDA out of memory",
        why="no memory breakdown in the message; the job's own allocations are the usual cause",
    )


def classify(clue: Clue, *, xid_hosts: frozenset[str] = frozenset()) -> Verdict | None:
    """The clue's verdict (rules in the module docstring); ``None`` for a clue that says
    nothing about a failure (an NCCL warning of no known kind)."""
    text = " ".join(s for s in (clue.exc_type, clue.text, clue.detail) if s)
    first = f"{clue.exc_type} {clue.text}"
    if clue.kind in WAITING:
        return Verdict(
            cause="unknown",
            primary=False,
            label="timed out waiting",
            why="it was waiting for a peer",
        )
    if clue.kind == "xid":
        return Verdict(
            cause="node",
            primary=True,
            label=f"Xid {clue.op}",
            why="the GPU driver reported an Xid error",
        )
    if clue.kind == "exit":
        return _exit_verdict(clue)
    if clue.kind == "abort":
        return Verdict(
            cause="program",
            primary=True,
            label=_abort_label(clue.text),
            why="native code in the process aborted on broken memory or a failed assertion "
            "(torch, an extension or a library it loaded)",
        )
    if clue.kind == "fatal":
        return _fatal_verdict(clue)
    if clue.kind == "oom" or "out of memory" in first.lower() or "OutOfMemoryError" in first:
        return oom_verdict(clue)
    if _CUDA.search(text) or "ncclUnhandledCudaError" in text:
        label = _cuda_label(text)
        if _NODE_CUDA.search(text):
            return Verdict(
                cause="node",
                primary=True,
                label=label,
                why="a CUDA error of the device, not of the program's kernels",
            )
        if _PROGRAM_CUDA.search(text):
            if clue.host and clue.host in xid_hosts:
                return Verdict(
                    cause="node",
                    primary=True,
                    label=label,
                    why="a kernel fault with an Xid logged on the same host",
                )
            return Verdict(
                cause="program",
                primary=True,
                label=label,
                why="a fault of the program's own kernels",
            )
        return Verdict(
            cause="node",
            primary=True,
            label=label,
            why="a CUDA error not tied to the program's kernels",
        )
    if _LINK.search(text):
        return Verdict(
            cause="link",
            primary=True,
            label="NCCL network error",
            why="NCCL's transport reported an error on this rank's connection",
        )
    if _ECHO.search(text):
        return Verdict(
            cause="unknown",
            primary=False,
            label=clue.exc_type or "peer failure",
            why="an echo of a peer's failure",
        )
    if clue.kind == "exception":
        if "ncclInvalidUsage" in text:
            return Verdict(
                cause="program",
                primary=True,
                label="ncclInvalidUsage",
                why="NCCL was called wrongly (mismatched sizes, ranks or order)",
            )
        label = clue.exc_type or "exception"
        return Verdict(
            cause="program",
            primary=True,
            label=label,
            why=f"an uncaught {label} in the training program",
        )
    return None


def _cuda_label(text: str) -> str:
    m = re.search(r"(CUDA error: [^.\n]+|Cuda failure '[^']+'|ncclUnhandledCudaError)", text)
    return m.group(1)[:80] if m else "CUDA error"


def _abort_label(text: str) -> str:
    if "Assertion" in text:
        return "assertion failed"
    if "stack smashing" in text or "buffer overflow" in text:
        return "stack smashing"
    return "heap corruption"


def _fatal_verdict(clue: Clue) -> Verdict | None:
    code = fatal_exitcode(clue)
    if code is None:
        return None
    name = clue.text.removeprefix("Fatal Python error: ").strip()
    if code == -6:
        return Verdict(
            cause="unknown",
            primary=False,
            label="SIGABRT",
            why="aborted (faulthandler's report); the reason is in the lines before it, if any",
        )
    return Verdict(
        cause="program",
        primary=True,
        label=f"fatal signal: {name}",
        why=f"native code crashed ({name.lower()}), faulthandler reported the Python stacks",
    )


def lone_abort(clue: Clue) -> Verdict:
    """The verdict of a SIGABRT that no collective error explains (see the module docstring)."""
    return Verdict(
        cause="unknown",
        primary=True,
        label="SIGABRT",
        why="aborted with no error of its own logged and no collective timed out: a native "
        "abort (a failed assertion or heap check, std::terminate)",
    )


def _exit_verdict(clue: Clue) -> Verdict | None:
    code = clue.exitcode
    if code is None or code == 0:
        return None
    if code == -9:
        return Verdict(
            cause="unknown",
            primary=True,
            label="SIGKILL",
            why="killed by SIGKILL: the host's OOM killer or the scheduler "
            "(no kernel log here says which)",
        )
    if code == -11:
        return Verdict(
            cause="program",
            primary=True,
            label="SIGSEGV",
            why="native code crashed (segmentation fault)",
        )
    if code in (-6, -15, -2):
        name = {-6: "SIGABRT", -15: "SIGTERM", -2: "SIGINT"}[code]
        return Verdict(
            cause="unknown",
            primary=False,
            label=name,
            why="stopped after a collective error or by torchrun",
        )
    label = f"signal {-code}" if code < 0 else f"exit code {code}"
    return Verdict(
        cause="unknown",
        primary=True,
        label=label,
        why=f"the process ended with {label}; no traceback was kept",
    )
