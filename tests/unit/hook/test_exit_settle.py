"""At exit the hook waits for c10d's gloo workers to drop their last collectives, before the
interpreter finalizes (:meth:`diag.hook.core.Hook._settle_workers`: a worker that drops a work
holding a Python object while the interpreter finalizes aborts the process); a detach, where
the process runs on, does not wait; a failing wait costs the exit nothing."""

from __future__ import annotations

from diag.hook import core as hook
from diag.hook.c10d_workers import Settle
from tests.fakes.hook_sink import FrameSink
from tests.unit.hook.test_thread_survives import fast


class Workers:
    """Stands in for :class:`~diag.hook.c10d_workers.CollectiveWorkers`: records each wait."""

    def __init__(self, fail: bool = False) -> None:
        self.waits: list[float] = []
        self.fail = fail

    def settle(self, timeout_s: float) -> Settle:
        self.waits.append(timeout_s)
        if self.fail:
            raise OSError("no /proc")
        return Settle(1, 2, 0)


def test_an_exit_waits_for_the_gloo_workers_a_detach_does_not(sink: FrameSink) -> None:
    h = hook.install(fast(sink))
    h.profiler.workers = workers = Workers()  # type: ignore[assignment]
    hook.uninstall()  # the exit's close
    assert workers.waits == [hook.EXIT_SETTLE_S]
    h = hook.install(fast(sink))
    h.profiler.workers = workers = Workers()  # type: ignore[assignment]
    h.detach()
    assert workers.waits == []


def test_a_wait_that_fails_costs_the_exit_nothing(sink: FrameSink) -> None:
    h = hook.install(fast(sink))
    h.profiler.workers = workers = Workers(fail=True)  # type: ignore[assignment]
    hook.uninstall()
    assert workers.waits == [hook.EXIT_SETTLE_S] and not h.active
