"""Every GPU backend call under a deadline: a wedged driver must not wedge the daemon.

A GPU whose driver is stuck makes NVML calls block forever (DCGM and ``nvidia-smi`` hang with it).
:class:`DeadlineBackend` runs each call of the backend it wraps on one worker thread and waits at
most ``timeout_s``; a call that does not return by then raises :class:`GpuWedged` (a
:class:`~diag.errors.DiagError`: the daemon reports a failed collector cycle, whose message says
"wedged", and the node detector's :mod:`~diag.diagnose.detectors.gpu_wedged` makes it a finding).
While that call is still stuck every later call fails at once with the same error, so the daemon
keeps shipping everything else at its own pace; once the stuck call returns, the backend is used
again. :func:`open_with_deadline` bounds opening (``nvmlInit``) the same way.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from diag.errors import CollectorUnavailable, DiagError
from diag.gpu.backend import GpuBackend, GpuReading, XidReading

T = TypeVar("T")

#: Seconds one NVML call may take (they take milliseconds on a healthy driver).
CALL_TIMEOUT_S = 2.0
#: Seconds opening NVML may take (``nvmlInit`` enumerates every device).
OPEN_TIMEOUT_S = 15.0
#: What the daemon's collector error says, so that diagnosis can find it.
WEDGED = "wedged"


class GpuWedged(DiagError):
    """A GPU backend call did not return within its deadline."""


class _Worker:
    """One daemon thread that runs the calls it is given, in order."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], _Result]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            fn, result = self._calls.get()
            try:
                result.value = fn()
            except BaseException as exc:  # handed to the caller, who re-raises it
                result.error = exc
            result.done.set()

    def submit(self, fn: Callable[[], Any]) -> _Result:
        result = _Result()
        self._calls.put((fn, result))
        return result


class _Result:
    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class DeadlineBackend:
    """``inner`` with every call bounded by ``timeout_s`` (see the module doc). ``clock`` is
    monotonic seconds (how long a stuck call has been stuck, for the message)."""

    def __init__(
        self,
        inner: GpuBackend,
        *,
        timeout_s: float = CALL_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.timeout_s = timeout_s
        self._clock = clock
        self._worker = _Worker("diag-gpu-calls")
        self._stuck: tuple[str, float, _Result] | None = None  # (call, since, its result)

    def _call(self, name: str, fn: Callable[[], T]) -> T:
        if self._stuck is not None:
            call, since, pending = self._stuck
            if not pending.done.is_set():
                raise GpuWedged(
                    f"GPU driver {WEDGED}: {call} has not returned for "
                    f"{self._clock() - since:.0f} s; GPU telemetry paused"
                )
            self._stuck = None  # it came back: use the backend again
        result = self._worker.submit(fn)
        if not result.done.wait(self.timeout_s):
            self._stuck = (name, self._clock() - self.timeout_s, result)
            raise GpuWedged(
                f"GPU driver {WEDGED}: {name} did not return within {self.timeout_s:g} s"
            )
        if result.error is not None:
            raise result.error
        return result.value

    def read(self) -> list[GpuReading]:
        return self._call("read (NVML device queries)", self.inner.read)

    def poll_xids(self) -> list[XidReading]:
        return self._call("poll_xids (NVML event wait)", self.inner.poll_xids)

    def close(self) -> None:
        """Close ``inner`` unless a call is stuck in it (closing would block on the same lock)."""
        if self._stuck is not None and not self._stuck[2].done.is_set():
            return
        result = self._worker.submit(self.inner.close)
        result.done.wait(self.timeout_s)


def open_with_deadline(
    opener: Callable[[], GpuBackend], timeout_s: float = OPEN_TIMEOUT_S
) -> GpuBackend:
    """``opener()`` on a worker thread, waited for at most ``timeout_s``:
    :class:`~diag.errors.CollectorUnavailable` (the daemon carries on without GPU telemetry)
    when it does not return by then."""
    result = _Worker("diag-gpu-open").submit(opener)
    if not result.done.wait(timeout_s):
        raise CollectorUnavailable(
            f"no GPU telemetry: opening the GPU driver did not return within {timeout_s:g} s "
            f"(driver {WEDGED})"
        )
    if result.error is not None:
        raise result.error
    backend: GpuBackend = result.value
    return backend


__all__ = ["CALL_TIMEOUT_S", "WEDGED", "DeadlineBackend", "GpuWedged", "open_with_deadline"]
