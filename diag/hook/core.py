"""The in-job hook: always-on, cheap step/phase/collective/checkpoint capture inside each rank.

``install()`` wraps a few torch entry points (``torch.autograd.backward``, the global optimizer
step hooks, ``DataLoader`` iteration, ``torch.save``/``torch.load``/DCP, the ``torch.distributed``
collectives) and starts the hook thread (:mod:`diag.hook.thread`). The training thread only
appends small tuples to a bounded deque: it never blocks, never raises, and drops (counting) when
the deque is full. The hook thread builds the schema events, harvests the Flight Recorder and writes
framed batches to the node daemon's Unix socket.

Numbers (see :class:`diag.schema.StepEvent`): a step is one training iteration; it ends when the
iteration's last optimizer finishes ``step()``, learned from the order optimizers step in, across
re-created optimizers and with several per iteration (:mod:`diag.hook.optimizers`); the phases
partition the step (:mod:`diag.hook.phases`). The key split is ``collective_wait_ns``
(gradient-sync wait after local gradients were done, blocking Python-level collectives, and
``Work.wait()`` on asynchronous ones: a pipeline stage waiting in an ``irecv`` is waiting, not
computing) against ``compute_ns``. On CUDA the "local gradients done" point is when
the CPU finished issuing backward, so GPU work still running then counts as wait.

Profiler windows (:mod:`diag.hook.profiler`): the training thread switches the torch
profiler on where a window's first step begins and off at the end of its last step; the hook
thread summarizes the result (:mod:`diag.hook.kernels`).

:class:`Hook` is the composition root of the hook: it builds the job side (tracker, profiler
windows, numerics tier, the wrappers' callbacks) and the hook thread, handing each what it uses;
the two sides share only a :class:`~diag.hook.state.HookState`. Lifecycle: :func:`install`,
:func:`uninstall` (or the ``atexit`` close: the last ``HookHealth`` says ``final``),
:meth:`Hook.detach` (``diag attach`` leaving a job that runs on) and :meth:`Hook.arm_watchdog`.

Importing this module is cheap: torch is imported only in :func:`install`, the hook thread's
modules (protobuf, the transport codec) when a hook is built.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from diag.config import HookConfig, default_host, load_config
from diag.hook import patches as hook_patches
from diag.hook.crash import CrashStacks
from diag.hook.device_timer import GRADS as DEVICE_GRADS
from diag.hook.device_timer import OPT as DEVICE_OPT
from diag.hook.device_timer import CudaEvents, DeviceTimer
from diag.hook.events import EventFactory
from diag.hook.groups import ProcessGroups
from diag.hook.numerics import Numerics
from diag.hook.numerics_events import NumericsEvents
from diag.hook.optimizers import StepCycle
from diag.hook.phases import BACKWARD, OPTIMIZER, StepTracker
from diag.hook.profiler import ProfilerWindows
from diag.hook.sched import clock_fd, runqueue_clock
from diag.hook.stacks import ExceptHooks, ExceptionInfo
from diag.hook.state import ErrorLog, HookState, measure_wall_offset_ns

if TYPE_CHECKING:
    from diag.hook.opstats import GradsMark, OpStats
    from diag.hook.thread import HookThread

EXIT_TIMEOUT_S = 2.0  # the most the final flush may add to process exit
#: the most an exit waits for c10d's gloo workers to drop their last collectives (``_shutdown``)
EXIT_SETTLE_S = 1.0
PROFILER_CLOSE_WAIT_S = 2.0  # the most a detach waits for the training thread to end a window
# A CPU job's steps ask torch whether CUDA is initialized (the device timer starts then) at
# these steps only: its first ones, then every 16th.
DEVICE_CHECK_FIRST = 4
DEVICE_CHECK_EVERY = 16
# Flight Recorder entries kept, unless the job set its own size (decided here, at install: torch
# reads it when the first process group is created). A full dump holds the GIL ~7-10 us per entry
# (measured: 512 entries 3.3 ms, 2000 entries 14 ms), so this is the largest ring whose dump
# stays within one interpreter switch interval (5 ms): no harvest stalls the training thread
# longer than any other Python thread may. The hook thread paces harvests to the job's measured
# collectives (diag.hook.fr_pacing: half the ring new, so the cost per collective stays
# ~15-20 us); half a ring of 512 is 8 steps of a 32-microbatch pipeline stage's ~65 entries.
FR_BUFFER_DEFAULT = "512"

_HOOK: Hook | None = None
_LOCK = threading.Lock()


class Hook:
    """One installed hook: the job side (:class:`~diag.hook.patches.HookCallbacks`, which the
    wrappers call) and its lifecycle; it owns the hook thread (:attr:`thread`).

    ``state`` is what the job's threads share with the hook thread. ``num_errors`` and
    ``last_error`` are diag's own failures so far, both sides together.
    """

    def __init__(self, cfg: HookConfig, torch: Any) -> None:
        self.cfg = cfg
        self.torch = torch
        clock = time.perf_counter_ns
        self.state = HookState(
            queue_max_events=cfg.queue_max_events,
            clock=clock,
            wall_offset_ns=measure_wall_offset_ns(clock),
            job_errors=ErrorLog(clock),
            thread_errors=ErrorLog(clock),
        )
        self.clock = clock
        self.active = False
        self.train_tid = threading.main_thread().ident
        self.profiler = ProfilerWindows(
            cfg, torch, clock=clock, wall_offset_ns=self.state.wall_offset_ns, on_error=self.error
        )
        # The run-queue clock is the training (main) thread's; an attach installs the hook from
        # a thread of its own, which names the main thread's task.
        main = threading.main_thread()
        runqueue = (
            runqueue_clock()
            if threading.current_thread() is main
            else runqueue_clock(f"/proc/self/task/{main.native_id}/schedstat")
        )
        self.tracker = StepTracker(
            self.state.emit, clock, on_begin=self.profiler.step_begins, runqueue=runqueue
        )
        self.cycle = StepCycle()
        self._bw_depth = 0
        #: the backward's "local gradients done" mark in C++ (diag.hook.opstats), once the hook
        #: thread loaded diag's native library (:meth:`use_native`); the Python pre-hook till then
        self._grads: GradsMark | None = None
        #: CUDA-event timing of each step (diag.hook.device_timer), once the job uses CUDA
        self.device: DeviceTimer | None = None
        self._device_checked = not cfg.device_timing
        rank = int(os.environ.get("RANK", "0"))
        self.events = EventFactory(
            host=cfg.host or default_host(),
            rank=rank,
            local_rank=int(os.environ.get("LOCAL_RANK", str(rank))),
            job_id=cfg.job_id,
        )
        self._patcher = hook_patches.Patcher()
        groups = ProcessGroups(torch.distributed)
        self.numerics = (
            Numerics(cfg, torch, emit=self.state.emit, error=self.error, pg_info=groups.info)
            if cfg.numerics
            else None
        )
        self.excepthooks = ExceptHooks(self.on_exception)
        self.crash = CrashStacks(cfg.crash_dir, rank)
        self.thread = self._build_thread(groups)

    def _build_thread(self, groups: ProcessGroups) -> HookThread:
        # Imported here: the thread's modules load protobuf and the transport codec, which only an
        # installed hook needs (importing diag.hook stays cheap).
        from diag.hook.thread import HookThread

        return HookThread(
            self.state,
            self.cfg,
            self.torch,
            events=self.events,
            profiler=self.profiler,
            steps=self.tracker,
            numerics=(
                NumericsEvents(self.numerics, self.events, self.torch)
                if self.numerics is not None
                else None
            ),
            groups=groups,
            patch_late=self.patch_dcp,
            use_native=self.use_native,
        )

    @property
    def num_errors(self) -> int:
        return self.state.num_errors

    @property
    def last_error(self) -> str:
        return self.state.last_error

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.active = True
        hook_patches.apply(self, self._patcher)
        self.excepthooks.install()
        try:
            self.crash.enable()
        except Exception as exc:
            self.error(exc)
        self.thread.start()
        atexit.register(self.close)

    def close(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        """Restore every patched function, then final harvest + health + flush (<= timeout_s);
        the last health event says ``final`` (the process is exiting, or done with the hook)."""
        self._shutdown(timeout_s, exiting=True)

    def detach(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        """Uninstall as a detach, not an exit: as :meth:`close`, but the last health event does
        not say ``final`` (:class:`~diag.schema.HookHealth`: "the process exited normally", so the
        analyzer would take a hang this hook reported as resolved), and the daemon connection is
        closed as soon as that last flush is done. The job keeps running; only diag's imported
        modules stay behind. A no-op once the hook is uninstalled."""
        global _HOOK
        with _LOCK:
            if _HOOK is self:
                _HOOK = None
        self._shutdown(timeout_s, exiting=False)

    def _shutdown(self, timeout_s: float, *, exiting: bool) -> None:
        if not self.active:
            return
        # The profiler is switched off on the training thread only (ProfilerWindows): from
        # another thread (a detach), the open window stops at the training thread's next step
        # end, while the hook is still in place; a step that does not end in time leaves one
        # optimizer hook behind that stops it there and removes itself.
        elsewhere = not exiting and not self.on_train_thread()
        if elsewhere:  # from now on no window starts; an open one stops at a step end
            self.profiler.close_at_boundary(min(timeout_s, PROFILER_CLOSE_WAIT_S))
        self.active = False
        if not elsewhere:
            self.profiler.close()
        self.excepthooks.uninstall()
        try:
            self._patcher.restore()
        except Exception as exc:
            self.error(exc)
        if elsewhere and self.profiler.active is not None:
            self._close_window_later()
        self.thread.stop(timeout_s, exiting=exiting)
        if exiting:
            self._settle_workers()
        try:
            self.crash.disable(exiting=exiting)
        except Exception as exc:
            self.error(exc)
        atexit.unregister(self.close)

    def _settle_workers(self) -> None:
        """At exit, before the interpreter finalizes: wait (at most ``EXIT_SETTLE_S``, sleeping)
        until c10d's gloo workers are idle, so that each has dropped the collectives it ran.

        A gloo collective holds the issuing thread's state, and since torch 2.13 a backward
        stashes a Python object there (``torch.autograd.graph``'s ``contextvars`` context), so
        DDP's gradient all-reduce holds one. The job's closing ``dist.barrier()`` chains to it;
        its waiter is released before the worker drops the barrier. A worker preempted in that
        gap on a busy host drops it only while the interpreter is finalizing, where releasing
        the Python object cannot take the GIL: the thread is ended, unwinding through a
        destructor that may not throw, and the process aborts ("terminate called without an
        active exception", SIGABRT) after its last step, its exit status lost. Seen in a busy
        clean-clone CI run and reproduced (core dump: ``~AsyncBarrierWork`` ->
        ``~AsyncAllreduceWork`` -> ``~ThreadLocalState`` -> ``SafePyObject`` decref ->
        ``take_gil`` -> ``pthread_exit``). Nothing to wait for with no gloo worker (NCCL, no
        process group, not Linux); a worker still away when the wait ends is left as it was."""
        try:
            self.profiler.workers.settle(EXIT_SETTLE_S)
        except Exception as exc:
            self.error(exc)

    def _close_window_later(self) -> None:
        """One global optimizer step hook that stops the open window on the training thread (its
        result is dropped there: the hook thread is gone) and then removes itself."""
        profiler, train_tid = self.profiler, self.train_tid
        handle: list[Any] = []

        def post(optimizer: Any, args: Any, kwargs: Any) -> None:
            try:
                if threading.get_ident() != train_tid or not handle:
                    return
                profiler.close()
                profiler.done.clear()
                profiler.busy = False
                handle.pop().remove()
            except Exception:
                pass

        try:
            optim = importlib.import_module("torch.optim.optimizer")
            handle.append(optim.register_optimizer_step_post_hook(post))
        except Exception as exc:
            self.error(exc)

    def arm_watchdog(self) -> None:
        """Arm the hang watchdog now: a stall is measured from this moment even if this rank
        never makes progress again (a hook attached to a job that may already be stuck)."""
        self.thread.arm_watchdog()

    def patch_dcp(self) -> None:
        """Wrap torch.distributed.checkpoint once the job imported it (from the hook thread)."""
        if self.active:
            hook_patches.patch_dcp(self, self._patcher)

    def use_native(self, lib: OpStats) -> None:
        """diag's native library is loaded (the hook thread): the backward's mark moves to C++
        (``grads_done_native``; only on the perf_counter clock the library's callback reads)."""
        if not self.cfg.grads_done_native or self.clock is not time.perf_counter_ns:
            return
        mark = lib.grads_mark()
        if mark is not None:
            mark.runq_fd(clock_fd(self.tracker.runqueue))
            self._grads = mark

    # ------------------------------------------------------ training thread
    def error(self, exc: BaseException) -> None:
        """Count one of diag's own failures on the job side; log the first of each kind."""
        self.state.job_errors.record(exc)

    def add_replica(self, ddp: Any) -> None:
        """A DistributedDataParallel module (seen by its wrapped ``__init__``, or handed over by
        a job that built it before installing the hook): the numerics tier fingerprints it."""
        if self.numerics is not None:
            self._patcher.handles.append(self.numerics.add_replica(ddp))

    def numerics_call(self, fn: Any, *args: Any) -> None:
        """Call a numerics callback; its failure is counted, the caller carries on."""
        try:
            fn(*args)
        except Exception as exc:
            self.error(exc)

    def on_train_thread(self) -> bool:
        return threading.get_ident() == self.train_tid

    def optimizer_pre_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            if not self.active:
                return
            tid = threading.get_ident()
            if tid != self.train_tid:
                if self.tracker.started:
                    return
                self.train_tid = tid  # training runs on another thread: follow it
            if self.cycle.before(optimizer) and self.tracker.started:
                # the iteration that just finished was not closed (a new optimizer): end it here
                if self.numerics is not None:
                    self.numerics_call(self.numerics.post_step, self.tracker.step)
                self._end_step(self.clock())
            self.tracker.enter(OPTIMIZER, self.clock())
            if self.device is not None:
                self._device_mark(DEVICE_OPT)
            if self.numerics is not None and self.cycle.is_closer(optimizer):
                self.numerics_call(self.numerics.pre_step, optimizer, self.tracker.step)
        except Exception as exc:
            self.error(exc)

    def optimizer_post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            if not self.active or threading.get_ident() != self.train_tid:
                return
            closes = self.cycle.after(optimizer)
            if self.numerics is not None and closes:
                # before the step's end: its cost counts in the optimizer phase
                self.numerics_call(self.numerics.post_step, self.tracker.step)
            now = self.clock()
            self.tracker.exit(OPTIMIZER, now)
            if closes:
                self._end_step(now)
        except Exception as exc:
            self.error(exc)

    def _end_step(self, now: int) -> None:
        if self.profiler.active is not None:  # a window's disable counts in its step's time
            runq = self.tracker.runqueue_now()  # but not in its run-queue delay (diag's own)
            self.profiler.step_ends(self.tracker.step)
            if runq is not None:
                self.tracker.discount_runqueue(runq)
            now = self.clock()
        step = self.tracker.step
        if self.device is not None or (
            not self._device_checked
            and (step < DEVICE_CHECK_FIRST or step % DEVICE_CHECK_EVERY == 0)
        ):
            self._device_end(step)
        self.tracker.end_step(now)

    def _device_end(self, step: int) -> None:
        """Close the step on the device timer; start one once the job has initialized CUDA
        (never initializes it: ``torch.cuda.is_initialized()`` is a flag read). :meth:`_end_step`
        asks a job without one at its first steps and then every ``DEVICE_CHECK_EVERY`` steps
        (a Python call a step saved; CUDA is set up before the training loop in practice)."""
        try:
            if self.device is not None:
                self.device.end_step(step)
            elif not self._device_checked and self.torch.cuda.is_initialized():
                self._device_checked = True
                self.device = DeviceTimer(CudaEvents(self.torch))
                self.thread.device = self.device
                self.device.end_step(step)  # opens the next step
        except Exception as exc:
            self._device_checked = True
            self.device = None
            self.error(exc)

    def _device_mark(self, which: int) -> None:
        if self.device is not None:
            try:
                self.device.mark(which)
            except Exception as exc:
                self.error(exc)

    def on_wait(self, t0: int, t1: int) -> None:
        """The training thread waited in ``Work.wait()`` outside any wrapped collective (an
        ``irecv``/``isend`` or ``async_op=True`` collective waited on): collective wait."""
        if self.tracker.started:
            self.tracker.add_wait(t1 - t0, t1)

    def before_backward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Open the backward region, note the loss, arm the "local gradients done" mark: an
        autograd engine final callback queued when the graph's root node runs, so it runs when
        the graph's last node has (the local gradients are computed) and before the callbacks
        the backward queued later (DDP's wait for its gradient sync). In C++ where diag's native
        library is loaded and the step is timed on the host only (:meth:`use_native`), else a
        Python pre-hook and callback (~20 us more a backward; the device timer's mark needs
        Python)."""
        if self._bw_depth:  # reentrant backward (e.g. reentrant activation checkpointing)
            return None
        torch = self.torch
        tracker, clock = self.tracker, self.clock
        now = clock()
        tensors = args[0] if args else kwargs.get("tensors")
        loss = None
        if isinstance(tensors, torch.Tensor):
            roots: tuple[Any, ...] = (tensors,)
            if tensors.numel() == 1:
                # item() on the CPU (~10 us less here than float() of a detached tensor); a
                # device's loss is copied, read by the hook thread (no sync on this thread);
                # a loss that cannot be read (a subclass may refuse) costs the loss, not the mark
                try:
                    loss = tensors.item() if tensors.is_cpu else tensors.detach().clone()
                except Exception as exc:
                    self.error(exc)
        elif isinstance(tensors, (list, tuple)):
            roots = tuple(t for t in tensors if isinstance(t, torch.Tensor))
        else:
            roots = ()
        if self.numerics is not None:
            self.numerics_call(self.numerics.on_loss, loss, tracker.step)
        if not self.profiler.device_work and roots and roots[0].is_cuda:
            self.profiler.device_work = True  # the job computes on its GPU, not only holds one
        token = self._mark_backward(roots, loss)
        # the region opens last: whatever raised above (counted by the wrapper) left none open
        tracker.enter(BACKWARD, now)
        tracker.open_backward_waits()
        self._bw_depth = 1
        return token

    def _mark_backward(self, roots: tuple[Any, ...], loss: Any) -> Any:
        """Arm the "local gradients done" mark on the backward's roots: the token
        :meth:`after_backward` reads it from."""
        if _compiled_autograd():  # no mark: it would fail the job's backward (see there)
            return [0, -1, 0], [], loss
        grads = self._grads
        if grads is not None and self.device is None and len(roots) == 1:
            try:
                if grads.arm(roots[0]):
                    return grads, None, loss
            except Exception as exc:  # never again: the Python mark from now on
                self._grads = None
                self.error(exc)
        # [mark perf ns, run-queue delay then (-1: unknown), queued]
        cell = [0, -1, 0]
        engine = self.torch.autograd.Variable._execution_engine
        clock, read_runq = self.clock, self.tracker.runqueue

        def grads_done() -> None:
            cell[0] = clock()
            if read_runq is not None:
                cell[1] = read_runq()
            if self.device is not None:
                self._device_mark(DEVICE_GRADS)

        def prehook(grad_outputs: Any) -> None:
            try:
                if not cell[2]:
                    cell[2] = 1
                    engine.queue_callback(grads_done)
            except Exception as exc:
                self.error(exc)

        handles = [t.grad_fn.register_prehook(prehook) for t in roots if t.grad_fn is not None]
        return cell, handles, loss

    def after_backward(self, token: Any) -> None:
        marked, handles, loss = token
        now = self.clock()
        self._bw_depth = 0
        if handles is None:  # the native mark: (ns, run-queue ns) or None
            mark = marked.done()
        else:
            for handle in handles:
                handle.remove()
            mark = (marked[0], marked[1]) if marked[0] else None
        tracker = self.tracker
        mark_ns, runq = mark if mark is not None else (now, -1)
        # the wait for the gradient sync: after the mark, less the Python-level waits there
        # (counted as collective wait already); none without a mark
        sync_ns = (now - mark_ns) - tracker.backward_waits_after(mark_ns)
        if tracker.runqueue is not None and runq >= 0:
            tracker.runq_in_wait += max(0, tracker.runqueue() - runq)
        tracker.exit(BACKWARD, now)
        tracker.add_backward(loss, sync_ns)

    def on_collective(
        self, op: str, t0: int, t1: int, nbytes: int, dtype: Any, group: Any, sync: bool, ok: bool
    ) -> None:
        tracker = self.tracker
        step = tracker.step if tracker.started else -1
        tid = threading.get_ident()
        if tracker.started and tid == self.train_tid:
            tracker.add_collective(t1 - t0, sync, t1)
        self.state.emit(("coll", step, op, t0, t1, nbytes, dtype, group, sync, ok, tid))

    def on_exception(self, info: ExceptionInfo) -> None:
        """An uncaught exception (from the chained excepthooks): queued even when the queue is
        full, since it is what explains the end of this process; sent by the exit flush."""
        self.state.queue.append(("exc", info, self.tracker.step if self.tracker.started else -1))

    def on_checkpoint(self, op: str, api: str, path: str, t0: int, t1: int, ok: bool) -> None:
        step = self.tracker.step if self.tracker.started else -1
        # A saved file's size is read now (one stat): the job may delete or move it before the
        # hook thread gets to it. Directories (DCP) are walked later, off the training thread.
        size = -1
        if op == "save" and ok and path:
            with contextlib.suppress(OSError):
                if os.path.isfile(path):
                    size = os.path.getsize(path)
        self.state.emit(("ckpt", step, op, api, path, t0, t1, ok, size))


def _compiled_autograd() -> bool:
    """True while torch's compiled autograd is on (``torch._dynamo.config.compiled_autograd``
    inside a compiled function, or its ``_enable`` context). It raises in the job's backward on a
    C++ hook on a node ("compiled_args nyi") and on ``queue_callback`` from a Python one unless
    compiled with ``fullgraph=True`` (both seen on torch 2.13): a backward there gets no
    "local gradients done" mark (its gradient sync's wait is counted as compute)."""
    ca = sys.modules.get("torch._dynamo.compiled_autograd")
    return ca is not None and bool(getattr(ca, "compiled_autograd_enabled", False))


def install(config: HookConfig | None = None) -> Hook:
    """Install the hook once per process (a second call returns the installed one).

    May raise only here, on a bad configuration; afterwards the hook never raises into training.
    """
    global _HOOK
    with _LOCK:
        if _HOOK is not None and _HOOK.active:
            return _HOOK
        cfg = config if config is not None else load_config("hook")
        if "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ:
            # Must precede the first process group; the job's own setting wins.
            os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FR_BUFFER_DEFAULT)
        import torch
        import torch.distributed
        import torch.optim.optimizer
        import torch.utils.data.dataloader

        hook = Hook(cfg, torch)
        hook.start()
        _HOOK = hook
        return hook


def uninstall(timeout_s: float = EXIT_TIMEOUT_S) -> None:
    """Restore every patched torch function and stop the hook thread after a final flush."""
    global _HOOK
    with _LOCK:
        hook, _HOOK = _HOOK, None
    if hook is not None:
        hook.close(timeout_s)


def installed() -> Hook | None:
    return _HOOK


def install_from_env() -> Hook:
    """:func:`install` with the ``DIAG_HOOK_*`` environment configuration (for sitecustomize)."""
    return install(load_config("hook"))
