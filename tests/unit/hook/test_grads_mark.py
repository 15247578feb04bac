"""The backward's "local gradients done" mark in diag's native library (``opstats.cpp``,
:class:`diag.hook.opstats.GradsMark`) and the hook's use of it: the mark comes after the graph's
last node and before the callbacks the backward queued later (DDP's wait for its gradient sync),
a graph kept for another backward is re-armed, a backward that fails reaches no mark, and the
hook measures the same gradient-sync wait with it as with its Python mark."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch
from torch import nn

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook.sched import clock_fd, runqueue_clock
from tests.fakes.hook_sink import FrameSink, of_kind

FAST = {"flush_interval_s": 0.05, "fr_poll_interval_s": 0.1, "reconnect_interval_s": 0.05}
SYNC_S = 0.03  # the gradient sync's wait a comm hook makes (a lower bound: a timer's sleep)


class _Slow(torch.autograd.Function):
    """Identity whose backward notes when it ran (and raises when asked)."""

    ran: list[int] = []
    fail = False

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        if _Slow.fail:
            raise RuntimeError("a failing backward")
        _Slow.ran.append(time.perf_counter_ns())
        return grad


@pytest.fixture
def mark(observer: Any) -> Any:
    found = observer.grads_mark()
    if found is None:
        pytest.skip("this build of diag's native library has no gradients-done mark")
    found.runq_fd(-1)
    yield found
    found.runq_fd(-1)


def test_the_mark_comes_after_the_last_node_and_before_later_callbacks(mark: Any) -> None:
    """The order the hook relies on: the mark is queued when the root runs, so a callback
    queued later in the backward (DDP's wait for its gradient sync) runs after it."""
    w = torch.randn(4, requires_grad=True)
    later: list[int] = []
    engine = torch.autograd.Variable._execution_engine
    w.register_hook(lambda g: engine.queue_callback(lambda: later.append(time.perf_counter_ns())))
    _Slow.ran.clear()
    loss = _Slow.apply(w * 2).sum()
    assert mark.arm(loss)
    assert mark.done() is None  # armed, not reached
    loss.backward()
    done = mark.done()
    assert done is not None and done[1] == -1  # no run-queue clock given
    assert _Slow.ran and later
    assert _Slow.ran[-1] <= done[0] <= later[0]


def test_the_run_queue_delay_is_read_at_the_mark(mark: Any) -> None:
    clock = runqueue_clock()
    if clock is None:
        pytest.skip("no /proc/thread-self/schedstat here")
    mark.runq_fd(clock_fd(clock))
    before = clock()
    loss = (torch.randn(3, requires_grad=True) * 3).sum()
    assert mark.arm(loss)
    loss.backward()
    done = mark.done()
    assert done is not None and before <= done[1] <= clock()


def test_a_tensor_without_a_graph_is_not_armed(mark: Any) -> None:
    assert not mark.arm(torch.randn(3, requires_grad=True))  # a leaf: no autograd node
    assert not mark.arm(torch.randn(3))
    assert not mark.arm("not a tensor")


def test_a_kept_graph_is_rearmed_and_a_failed_backward_reaches_no_mark(mark: Any) -> None:
    w = torch.randn(4, requires_grad=True)
    loss = _Slow.apply(w * 2).sum()
    marks = []
    for _ in range(3):
        assert mark.arm(loss)
        loss.backward(retain_graph=True)
        marks.append(mark.done())
    assert all(m is not None for m in marks)
    assert marks[0][0] < marks[1][0] < marks[2][0]

    _Slow.fail = True
    try:
        failing = _Slow.apply(w * 2).sum()
        assert mark.arm(failing)
        with pytest.raises(RuntimeError, match="a failing backward"):
            failing.backward()
        assert mark.done() is None
    finally:
        _Slow.fail = False


def _ddp_steps(steps: int) -> None:
    """A world-size-1 DDP loop whose gradient sync completes SYNC_S after a callback its comm
    hook queues: that callback runs after the mark (queued before it) and before DDP's wait
    for the sync (queued once every bucket was launched), so each backward spends at least
    SYNC_S after the mark, however the host schedules it."""
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    engine = torch.autograd.Variable._execution_engine

    def later(buffer: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        timer = threading.Timer(SYNC_S, fut.set_result, args=(buffer,))
        engine.queue_callback(timer.start)
        return fut

    # a lambda: DDP refuses a comm hook whose annotations are not its own types (strings here)
    model.register_comm_hook(None, lambda state, bucket: later(bucket.buffer()))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 8)
    for _ in range(steps):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()


@pytest.mark.parametrize("native", [True, False], ids=["native-mark", "python-mark"])
def test_the_gradient_sync_wait_is_measured_with_either_mark(
    world: None, sink: FrameSink, observer: Any, native: bool
) -> None:
    h = hook.install(HookConfig(daemon_sock=sink.path, grads_done_native=native, **FAST))
    h.use_native(observer)  # as the hook thread does once it has loaded the library
    assert (h._grads is not None) == (native and observer.grads_mark() is not None)
    _ddp_steps(4)
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error
    steps = of_kind(events, schema.StepEvent)
    assert [s.step for s in steps] == [0, 1, 2, 3]
    for s in steps:
        assert s.collective_wait_ns >= SYNC_S * 1e9, s
        assert s.compute_ns == s.duration_ns - s.collective_wait_ns - s.data_wait_ns, s
        assert s.num_backward == 1


def test_a_backward_under_compiled_autograd_runs_without_a_mark(
    sink: FrameSink, observer: Any
) -> None:
    """torch's compiled autograd raises in the job's backward on a C++ hook on a node and on a
    Python hook's ``queue_callback``: there the hook places no mark, and the job runs on."""
    from torch._dynamo import compiled_autograd

    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST))
    h.use_native(observer)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 4)
    with compiled_autograd._enable(torch.compile(backend="eager")):
        for _ in range(3):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error
    steps = of_kind(events, schema.StepEvent)
    assert [s.step for s in steps] == [0, 1, 2]
    assert all(s.num_backward == 1 for s in steps)


class _NoItem(torch.Tensor):
    """A tensor subclass that refuses ``item()`` (as a sharded loss may)."""

    def item(self) -> Any:
        raise RuntimeError("no item here")


def test_a_loss_that_cannot_be_read_leaves_every_backward_tracked(sink: FrameSink) -> None:
    """The backward region is open when the loss is read: a read that raises is diag's error,
    counted, and the region still closes, so the next steps are tracked as before."""
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST))
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 4)
    for _ in range(3):
        opt.zero_grad()
        model(x).sum().as_subclass(_NoItem).backward()
        opt.step()
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 3 and "no item here" in h.last_error
    steps = of_kind(events, schema.StepEvent)
    assert [s.step for s in steps] == [0, 1, 2]
    assert all(s.num_backward == 1 and s.loss is None for s in steps)
