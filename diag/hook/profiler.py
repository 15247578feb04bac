"""Profiler windows: the torch profiler (Kineto) on for a few steps, at the same step on every rank.

A window covers ``num_steps`` steps from step index ``S`` (the hook's step counter, equal on every
rank of a synchronous job). Periodic windows start at ``profile_first_step`` and then every
``profile_every_steps`` steps (0 = no periodic windows); their ``window_id`` is ``f"p{S}"``.
On-demand windows come from a :class:`~diag.proto.diag_pb2.ProfileRequest` that the hook thread
pulled from the daemon (:func:`plan_request`); their id is ``f"d-{request_id}"`` and they start at
the request's ``at_step``; a rank that gets it after that step began takes it at ``at_step`` plus
a whole number of the request's ``realign_steps`` (the analyzer's lead), so the ranks that got it
late by less than that still share one step, or at its next step boundary when the request gives
none (``late`` either way). A window due while another is open is deferred to the first boundary
after it (an on-demand one, marked ``late``) or skipped (a periodic one), so windows never
overlap.

The training thread (:class:`ProfilerWindows`) only switches the profiler: ``_prepare_profiler`` +
``_enable_profiler`` where step ``S`` begins, ``_disable_profiler`` at the end of step
``S + num_steps - 1`` (the closing optimizer's post-hook). ``_disable_profiler`` returns the Kineto
result unprocessed; it is handed to the hook thread (:attr:`ProfilerWindows.done`), which builds the
summaries and writes the raw trace (:mod:`diag.hook.kernels`). Activities: CUDA when CUDA is
available and already initialized in this process (the window then ends with one
``torch.cuda.synchronize()`` so kernels launched in the window are complete in the trace, as
``torch.profiler.profile`` does); CPU operators on a rank that does not compute on CUDA (no
backward from a CUDA tensor yet: :attr:`ProfilerWindows.device_work`) and in on-demand windows,
and in periodic windows on a CUDA rank only with ``profile_cpu_ops_on_cuda``
(:func:`records_cpu_ops`: there a periodic window is the device's activity alone,
``ProfileWindow.device_only``). If a profiler is already running (the job profiles itself) the
window is skipped and reported with ``ok=False, error="profiler busy"``.

A periodic window that records CPU operators on a rank without CUDA work, without shapes
(:func:`records_aggregated`), counts them with diag's own operator observer instead, once the hook
thread has loaded it (:attr:`ProfilerWindows.opstats`, :mod:`diag.hook.opstats`): per-operator
totals, ~0.3 us per operator and a 0.1 ms stop against Kineto's ~2-3 us, no raw trace
(``ProfileWindow.aggregated``); it runs beside a profiler of the job's own. Its stop waits for
gloo's workers as Kineto's does (below), not for safety (a record ended after the stop is dropped
by the observer, never written into freed memory) but so that the step's last collectives,
whose records their worker ends just after the training thread saw them complete, are counted
(without the wait, one rank's one-step window lost its only `gloo:all_reduce` on a busy host).

Before ``_disable_profiler`` the stop waits (bounded, ``cfg.profile_settle_s``) until gloo's
worker threads are back where they wait for work (:mod:`diag.hook.c10d_workers`): a collective
the window recorded ends its record on its worker after the training thread has seen it complete,
and a record ended after the stop writes into freed memory (torch's race; it corrupted the heap
of this project's test jobs). The window reports the wait (``settle_ns``) and how many workers
were still away (``unsettled``).

Costs on the training thread (measured on this 2-core VM, torch 2.13 CPU, record_shapes on):
prepare + enable ~0.2-0.6 ms, about 1-2 us per recorded operator while the window is open, and a
disable that materializes the trace, ~3-6 us per recorded operator (~2.5 us without shapes).
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diag.config import HookConfig
from diag.hook.c10d_workers import NO_WAIT, CollectiveWorkers, Settle

log = logging.getLogger(__name__)

PERIODIC, ON_DEMAND = "periodic", "on_demand"
MAX_SEEN_REQUESTS = 4096  # request ids remembered for duplicate detection


@dataclass(slots=True)
class WindowPlan:
    """A window to take: ``start_step`` is where it is planned (once started: where it began)."""

    window_id: str
    trigger: str
    start_step: int
    num_steps: int
    request_id: str = ""
    late: bool = False
    #: an on-demand plan reached after its step began moves on by whole strides of this
    #: (the request's ``realign_steps``; 0: to the next boundary)
    realign: int = 0

    def realign_after(self, step: int) -> None:
        """This rank has reached ``step`` (about to begin) with the plan not started: move the
        start to the first ``start_step + k * realign`` at or after ``step`` (``late``). Every rank
        of a synchronous job that got the request late by less than ``realign`` steps lands on
        the same step (the analyzer's lead: the request's delivery took up to a lead longer)."""
        if self.realign <= 0 or self.start_step >= step:
            return
        behind = step - self.start_step
        self.start_step += -(-behind // self.realign) * self.realign
        self.late = True


@dataclass(slots=True)
class WindowResult:
    """A finished (or refused) window, from the training thread to the hook thread.

    ``start_ns``/``end_ns`` are wall-clock ns (the hook's perf clock + wall offset, the same base as
    :class:`~diag.schema.StepEvent` times): just after enable and just before disable.
    ``train_ns`` is what switching the profiler cost the training thread (prepare + enable +
    the settle wait + disable, perf ns); ``settle`` what the stop waited for gloo's workers.
    ``result`` is the Kineto ``_ProfilerResult`` (None when refused/failed).
    """

    plan: WindowPlan
    result: Any
    start_ns: int
    end_ns: int
    device: str
    error: str = ""
    train_ns: int = 0
    settle: Settle = NO_WAIT
    #: no CPU operators recorded: the device's activity only (:func:`records_cpu_ops`)
    device_only: bool = False
    #: counted by diag's operator observer (:mod:`diag.hook.opstats`): ``result`` is its
    #: :class:`~diag.hook.opstats.OpTotals`, there is no raw trace
    aggregated: bool = False


def records_shapes(plan: WindowPlan, cfg: HookConfig) -> bool:
    """Whether the window records input shapes: an on-demand window always (someone asked for
    evidence: ``diag replay`` reruns its heaviest GEMM shapes), a periodic one when
    ``cfg.profile_record_shapes`` (a window step costs the training thread ~2.5 instead of
    3-6 us per recorded operator without them)."""
    return plan.trigger == ON_DEMAND or cfg.profile_record_shapes


def records_cpu_ops(plan: WindowPlan, cfg: HookConfig, cuda: bool) -> bool:
    """Whether the window records CPU operators: always on a rank that does not compute on CUDA
    (``cuda`` False: no backward from a CUDA tensor seen yet; a CPU job whose DataLoader pins
    memory has CUDA initialized and nothing on it; the operators are all there is to see), in an
    on-demand window (someone asked for evidence: shapes for ``diag replay``, the host side of a
    launch-bound step), and in a periodic one on a CUDA rank only when
    ``cfg.profile_cpu_ops_on_cuda``: there the kernel detector compares the device's kernels,
    and each recorded operator costs the training thread ~0.5 us while the window is open and
    ~1.3-2 us more when the profiler stops (it builds the trace then)."""
    return not cuda or plan.trigger == ON_DEMAND or cfg.profile_cpu_ops_on_cuda


def records_aggregated(plan: WindowPlan, cfg: HookConfig, cpu_ops: bool, cuda_work: bool) -> bool:
    """Whether a window that records CPU operators counts them with diag's observer
    (:mod:`diag.hook.opstats`, when loaded) instead of Kineto: a periodic window
    (``cfg.profile_aggregate``) of a rank that does not compute on CUDA, without shapes. An
    on-demand window (someone asked for evidence: shapes, the raw trace) and a window that
    records the device's kernels stay with Kineto."""
    return (
        cfg.profile_aggregate
        and cpu_ops
        and not cuda_work
        and plan.trigger == PERIODIC
        and not records_shapes(plan, cfg)
    )


def periodic_id(step: int) -> str:
    return f"p{step}"


#: What a request or window id may be: it becomes part of a file name.
PLAIN_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def on_demand_id(request_id: str) -> str:
    return f"d-{request_id}"


class ProfilerWindows:
    """The training thread's half: start/stop the profiler at step boundaries; never raises.

    :meth:`step_begins` is called where a step begins (:class:`~diag.hook.phases.StepTracker`'s
    ``on_begin``), :meth:`step_ends` before the closing optimizer's step is closed. The hook thread
    adds on-demand plans to :attr:`inbox` and takes results from :attr:`done` (deques: appends and
    pops are atomic, so no lock is needed).

    No window starts while the hook thread still holds the previous result (:attr:`busy`, cleared
    by the hook thread once the result is freed): destroying a Kineto result on the hook thread
    while the training thread profiles again crashes the process (seen with torch 2.13). A window
    due meanwhile is handled like one due while another is open (periodic: skipped; on-demand:
    deferred, ``late``).

    The profiler is switched on and off only on the training thread: Kineto's state belongs to
    the thread that enabled it, and a disable from another thread finds none, leaves the training
    thread profiling with nobody to stop it, and crashed workers (SIGSEGV, heap corruption) under
    repeated attach/detach. A detach from another thread sets :attr:`closing` instead: the next
    step boundary stops the open window (:meth:`close_at_boundary`).
    """

    def __init__(
        self,
        cfg: HookConfig,
        torch: Any,
        *,
        clock: Callable[[], int],
        wall_offset_ns: int,
        on_error: Callable[[BaseException], None],
        workers: CollectiveWorkers | None = None,
    ) -> None:
        self.cfg = cfg
        #: gloo's worker threads: sampled by the hook thread and at each start, waited for at
        #: each stop
        self.workers = workers if workers is not None else CollectiveWorkers()
        self.torch = torch
        self.clock = clock
        self.wall_offset_ns = wall_offset_ns
        self.on_error = on_error
        self.inbox: deque[WindowPlan] = deque()
        self.done: deque[WindowResult] = deque()
        self.pending: list[WindowPlan] = []  # on-demand plans not started yet (training thread)
        self.active: WindowPlan | None = None
        self.busy = False  # a result is on its way to / held by the hook thread
        self.stop_after = -1  # the active window stops at the end of this step
        self.closing = False  # set by a detach on another thread: no window starts, the open stops
        self._every = max(0, cfg.profile_every_steps)
        first = cfg.profile_first_step
        self.next_periodic = first if self._every > 0 and first >= 0 else -1
        self._start_ns = 0
        self._train_ns = 0
        self._device = "cpu"
        self._cuda = False
        self._cpu_ops = True  # the open window records CPU operators
        self._aggregated = False  # the open window counts them with :attr:`opstats`
        #: diag's operator observer (:mod:`diag.hook.opstats`), set by the hook thread once
        #: loaded; None: windows use Kineto alone
        self.opstats: Any = None
        #: set on the training thread at the first backward from a CUDA tensor: the job computes
        #: on the device (CUDA initialized alone, e.g. by a DataLoader's pin_memory, says not)
        self.device_work = False

    # ------------------------------------------------------------ boundaries
    def step_begins(self, step: int) -> bool:
        """Step ``step`` begins now: start a window if one is due. True when this call did work
        of diag's own (a window started or stopped): the step tracker then reads its run-queue
        clock again, so the delay that work met is not counted as the step's."""
        try:
            if (  # the common step: nothing open, asked for or due (no call made)
                not self.closing
                and not self.inbox
                and not self.pending
                and self.active is None
                and not (0 <= self.next_periodic <= step)
            ):
                return False
            if self.closing:
                stopped = self.active is not None
                self.close()
                return stopped
            if self.inbox:
                while self.inbox:
                    taken = self.inbox.popleft()
                    taken.realign_after(step)
                    self.pending.append(taken)
            if self.active is not None or self.busy:
                return False
            plan = self._due(step)
            if plan is not None:
                self._start(plan, step)
                return True
        except Exception as exc:
            self.on_error(exc)
        return False

    def step_ends(self, step: int) -> None:
        """Step ``step`` is about to end: stop the open window if this is its last step."""
        if self.active is None:
            return
        if self.closing:
            self.close()
        elif step >= self.stop_after:
            try:
                self._stop("")
            except Exception as exc:
                self.on_error(exc)

    def close_at_boundary(
        self,
        wait_s: float,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """From a thread other than the training thread: no new window, the open one stops at the
        training thread's next step boundary (waits up to ``wait_s`` for it)."""
        self.closing = True
        deadline = clock() + wait_s
        while self.active is not None and clock() < deadline:
            sleep(0.01)

    def close(self) -> None:
        """On the training thread, at uninstall: stop an open window (reported ``ok=False``: cut
        short)."""
        if self.active is not None:
            try:
                self._stop("window cut short: the hook was uninstalled")
            except Exception as exc:
                self.on_error(exc)

    def _due(self, step: int) -> WindowPlan | None:
        plan: WindowPlan | None = None
        if self.pending:
            ready = [p for p in self.pending if p.start_step <= step]
            if ready:
                plan = min(ready, key=lambda p: p.start_step)
                self.pending.remove(plan)
        if 0 <= self.next_periodic <= step:
            if plan is None and self.next_periodic == step:
                plan = WindowPlan(periodic_id(step), PERIODIC, step, self.cfg.profile_num_steps)
            # skipped if overdue (a window was open) or an on-demand window takes this step
            behind = step - self.next_periodic
            self.next_periodic += (behind // self._every + 1) * self._every
        return plan

    # ---------------------------------------------------------- the profiler
    def _start(self, plan: WindowPlan, step: int) -> None:
        if plan.start_step != step:
            plan.late = True
            plan.start_step = step
        torch = self.torch
        autograd_profiler = torch.autograd.profiler
        t0 = self.clock()
        self._cuda = bool(torch.cuda.is_available() and torch.cuda.is_initialized())
        self._device = f"cuda:{torch.cuda.current_device()}" if self._cuda else "cpu"
        cuda_work = self._cuda and self.device_work
        self._cpu_ops = records_cpu_ops(plan, self.cfg, cuda_work)
        opstats = self.opstats
        if opstats is not None and records_aggregated(plan, self.cfg, self._cpu_ops, cuda_work):
            self._start_aggregated(plan, step, opstats, t0)
            return
        if torch._C._autograd._profiler_enabled():
            now = t0 + self.wall_offset_ns
            self.done.append(WindowResult(plan, None, now, now, self._device, "profiler busy"))
            return
        self._aggregated = False
        self.workers.observe()  # between steps the workers wait at home: a sample of where
        activities = set()
        if self._cpu_ops:
            activities.add(autograd_profiler.ProfilerActivity.CPU)
        if self._cuda:
            activities.add(autograd_profiler.ProfilerActivity.CUDA)
        config = autograd_profiler.ProfilerConfig(
            autograd_profiler.ProfilerState.KINETO,
            self._cpu_ops and records_shapes(plan, self.cfg),
            False,  # profile_memory
            False,  # with_stack
            False,  # with_flops
            False,  # with_modules
            autograd_profiler._ExperimentalConfig(),
            "",  # trace_id
        )
        try:
            autograd_profiler._prepare_profiler(config, activities)
            autograd_profiler._run_on_profiler_start()
            autograd_profiler._enable_profiler(config, activities)
        except Exception as exc:
            autograd_profiler._run_on_profiler_stop()
            now = self.clock() + self.wall_offset_ns
            error = f"profiler failed to start: {type(exc).__name__}: {exc}".splitlines()[0]
            self.done.append(WindowResult(plan, None, now, now, self._device, error[:300]))
            return
        t1 = self.clock()
        self.active = plan
        self.stop_after = step + max(1, plan.num_steps) - 1
        self._start_ns = t1 + self.wall_offset_ns
        self._train_ns = t1 - t0

    def _start_aggregated(self, plan: WindowPlan, step: int, opstats: Any, t0: int) -> None:
        self.workers.observe()  # between steps the workers wait at home: a sample of where
        try:
            started = opstats.start()
        except Exception as exc:
            started, error = (
                False,
                f"operator observer failed to start: {type(exc).__name__}: {exc}",
            )
        else:
            error = "operator observer already running"
        if not started:
            now = self.clock() + self.wall_offset_ns
            self.done.append(WindowResult(plan, None, now, now, self._device, error[:300]))
            return
        t1 = self.clock()
        self._aggregated = True
        self.active = plan
        self.stop_after = step + max(1, plan.num_steps) - 1
        self._start_ns = t1 + self.wall_offset_ns
        self._train_ns = t1 - t0

    def _stop(self, error: str) -> None:
        # ``active`` is cleared only once the result is in ``done``: a detach waiting on another
        # thread for the window to stop (:meth:`close_at_boundary`) then runs the hook thread's
        # final cycle, which must find the result (cleared first, the final cycle could run
        # while the profiler was still stopping here, and the window's event was lost)
        plan = self.active
        assert plan is not None
        if self._aggregated:
            self._stop_aggregated(plan, error)
            return
        try:
            autograd_profiler = self.torch.autograd.profiler
            t_enter = t0 = self.clock()
            result = None
            settle = NO_WAIT
            try:
                if self._cuda:
                    self.torch.cuda.synchronize()
                    t0 = self.clock()
                if self.cfg.profile_settle_s > 0:
                    settle = self.workers.settle(self.cfg.profile_settle_s)
                result = autograd_profiler._disable_profiler()
            except Exception as exc:
                error = f"profiler failed to stop: {type(exc).__name__}: {exc}"
                error = error.splitlines()[0][:300]
            finally:
                autograd_profiler._run_on_profiler_stop()
            t1 = self.clock()
            self._hand_over(
                plan, result, t0, error, t1 - t_enter, settle=settle, device_only=not self._cpu_ops
            )
        finally:
            self.active = None

    def _hand_over(
        self, plan: WindowPlan, result: Any, stopped: int, error: str, stop_ns: int, **kind: Any
    ) -> None:
        """The stopped window (the profiler stopped at perf ns ``stopped``, its stop cost the
        training thread ``stop_ns``) to the hook thread: :attr:`busy` until it frees it."""
        self.busy = result is not None
        self.done.append(
            WindowResult(
                plan,
                result,
                self._start_ns,
                stopped + self.wall_offset_ns,
                self._device,
                error,
                self._train_ns + stop_ns,
                **kind,
            )
        )

    def _stop_aggregated(self, plan: WindowPlan, error: str) -> None:
        """Stop diag's observer, once gloo's workers have ended the records of the collectives
        it saw (bounded, as Kineto's stop: a record ended after the stop is not counted)."""
        try:
            t0 = self.clock()
            result = None
            settle = NO_WAIT
            try:
                if self.cfg.profile_settle_s > 0:
                    settle = self.workers.settle(self.cfg.profile_settle_s)
                result = self.opstats.stop()
            except Exception as exc:
                error = f"operator observer failed to stop: {type(exc).__name__}: {exc}"
                error = error.splitlines()[0][:300]
            self._hand_over(
                plan, result, t0, error, self.clock() - t0, settle=settle, aggregated=True
            )
        finally:
            self._aggregated = False
            self.active = None


class RequestFilter:
    """The hook thread's check of incoming on-demand requests: duplicates, expiry, rank filter."""

    def __init__(self, default_num_steps: int) -> None:
        self.default_num_steps = default_num_steps
        self._seen: deque[str] = deque()
        self._seen_set: set[str] = set()

    def plan(self, request: Any, rank: int, now_ns: int | None = None) -> WindowPlan | None:
        """A plan for a ``ProfileRequest``; None when it is a duplicate, expired or not for us."""
        request_id = str(request.request_id)
        if not request_id:
            raise ValueError("profile request without a request_id")
        if not PLAIN_ID.fullmatch(request_id):
            # the id names the trace file: '../' in it once wrote, and pruned, outside the folder
            raise ValueError(f"profile request id {request_id[:40]!r} is not a plain token")
        if request_id in self._seen_set:
            log.debug("diag hook: duplicate profile request %s ignored", request_id)
            return None
        self._seen.append(request_id)
        self._seen_set.add(request_id)
        if len(self._seen) > MAX_SEEN_REQUESTS:
            self._seen_set.discard(self._seen.popleft())
        now_ns = time.time_ns() if now_ns is None else now_ns
        if request.expires_ns and request.expires_ns < now_ns:
            log.debug("diag hook: expired profile request %s ignored", request_id)
            return None
        if request.ranks and rank not in request.ranks:
            return None
        num_steps = request.num_steps if request.num_steps > 0 else self.default_num_steps
        at_step = max(0, int(request.at_step))
        realign = max(0, int(request.realign_steps))
        return WindowPlan(
            on_demand_id(request_id), ON_DEMAND, at_step, num_steps, request_id, realign=realign
        )
