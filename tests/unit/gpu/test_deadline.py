"""A wedged GPU driver (calls that never return) must not wedge the daemon: every backend call
runs under a deadline, later calls fail at once while one is stuck, and the backend is used again
once the stuck call returns."""

from __future__ import annotations

import threading
import time

import pytest

from diag.errors import CollectorUnavailable
from diag.gpu.backend import GpuReading, XidReading
from diag.gpu.deadline import WEDGED, DeadlineBackend, GpuWedged, open_with_deadline
from diag.gpu.fake import FakeGpuBackend


class Stuck:
    """A backend whose ``read`` blocks until ``release`` is set (a wedged driver)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.healthy = FakeGpuBackend.healthy(2)
        self.num_reads = 0

    def read(self) -> list[GpuReading]:
        self.num_reads += 1
        self.release.wait()
        return self.healthy.read()

    def poll_xids(self) -> list[XidReading]:
        return []

    def close(self) -> None:
        pass


def test_a_call_past_its_deadline_raises_and_later_calls_fail_without_calling_it() -> None:
    inner = Stuck()
    backend = DeadlineBackend(inner, timeout_s=0.2)
    with pytest.raises(GpuWedged, match=f"{WEDGED}: read .* did not return within 0.2 s"):
        backend.read()
    with pytest.raises(GpuWedged, match="has not returned for"):
        backend.read()
    with pytest.raises(GpuWedged):
        backend.poll_xids()  # the driver is the same: nothing more is queued behind the stuck call
    assert inner.num_reads == 1
    backend.close()  # does not block on the stuck driver
    inner.release.set()  # the driver comes back: once the stuck call returns, reads work again
    backend.timeout_s = 30.0
    give_up = time.monotonic() + 30
    while True:
        try:
            readings = backend.read()
            break
        except GpuWedged:
            assert time.monotonic() < give_up, "the backend never came back"
            time.sleep(0.01)
    assert len(readings) == 2 and backend.poll_xids() == []


def test_errors_of_the_backend_itself_pass_through() -> None:
    class Broken(Stuck):
        def read(self) -> list[GpuReading]:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    with pytest.raises(RuntimeError, match="GPU_IS_LOST"):
        DeadlineBackend(Broken(), timeout_s=30.0).read()


def test_opening_a_wedged_driver_is_unavailable_not_a_hang() -> None:
    release = threading.Event()

    def opener() -> FakeGpuBackend:
        release.wait()
        return FakeGpuBackend.healthy(1)

    try:
        with pytest.raises(CollectorUnavailable, match=f"did not return within 0.2 s .*{WEDGED}"):
            open_with_deadline(opener, timeout_s=0.2)
    finally:
        release.set()
    assert len(open_with_deadline(lambda: FakeGpuBackend.healthy(1), 30.0).read()) == 1
