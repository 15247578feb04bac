"""The hook's daemon thread: turns the training thread's records into events and sends them.

Every ``flush_interval_s`` it drains the record queue, reports the process groups it has not
reported yet (:class:`~diag.schema.ProcessGroupInfo`: the job's layout, groups created after
install included), in its first cycle and then every ``health_interval_s`` it emits a
:class:`~diag.schema.HookHealth`, and it writes what it built to the daemon socket. It harvests
the Flight Recorder (the generic ring, or NCCL's once a group runs NCCL, dumped without stack
traces and without the GIL once diag's native library is loaded: :mod:`diag.hook.fr_dump`;
parsed by the restricted unpickler; the generic ring read from the first entry a harvest needs
once the library's reader is trusted; with ``fr_dump_server``, as JSON from torch's control-plane
server: :mod:`diag.hook.fr_server`) when about half its ring buffer is new or
``fr_poll_interval_s`` passed (:mod:`diag.hook.fr_pacing`: it looks as often as the job's
measured collectives need, between its cycles too). On stop it does a final drain, harvest and
health event and one last flush, then closes the daemon connection. The last health event says
``final`` (the process is exiting normally) unless the stop is a detach (:meth:`HookThread.stop`
with ``exiting=False``: the hook leaves a job that runs on).

Each cycle it also reads the control frames the daemon wrote back (on-demand profile requests,
scheduled through the :class:`~diag.hook.profiler.ProfilerWindows` inbox; a malformed one is
counted as a hook error) and turns finished profiler windows into events
(:func:`diag.hook.kernels.process`). Until it has it, it looks every ``OPSTATS_LOOK_S`` for diag's
native library built for this torch (:mod:`diag.hook.opstats`) and hands its operator observer to
the windows and its dumps and reader to the harvest.

While the Flight Recorder works, a finished step is held until the first harvest after its end, so
its ``num_collectives`` counts the FR entries created inside it (DDP's C++ all-reduces included);
without the Flight Recorder it counts the Python-level collective calls of the step.

Nothing its work raises leaves the loop: an exception is counted (``num_errors``), and the loop
goes on with the next cycle; an event that cannot be sent is dropped and counted by the sender.
Should the thread end all the same (an exception that is not an ``Exception``), it records why
and sends one last, non-final health saying so; its connection stays open, so the node daemon
reports the silence that follows (:class:`~diag.schema.HookSilent`).

The thread receives everything it uses (:class:`HookThread`'s arguments) and shares with the job's
threads only the :class:`~diag.hook.state.HookState` (its fields' writers are listed there) and the
profiler windows' inbox/done deques; it reads the step tracker's counters (:class:`StepProgress`).
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import shlex
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from diag import schema
from diag.config import HookConfig
from diag.flight_recorder import load_fr_dump, load_fr_json
from diag.hook import kernels as hook_kernels
from diag.hook import opstats as hook_opstats
from diag.hook.device_timer import DeviceStep, DeviceTimer
from diag.hook.events import EventFactory, fr_dtype_name, step_payload
from diag.hook.fr_dump import FrDumper
from diag.hook.fr_pacing import FrPacer, probe_total
from diag.hook.fr_server import FrServer
from diag.hook.fr_state import FrState, PyCall, StepWindows
from diag.hook.gil_share import GilShare
from diag.hook.groups import ProcessGroups
from diag.hook.numerics import TAGS as NUMERICS_TAGS
from diag.hook.numerics_events import NumericsEvents
from diag.hook.profiler import ProfilerWindows, RequestFilter, records_shapes
from diag.hook.sender import FrameSender
from diag.hook.state import HookState
from diag.hook.watchdog import HangWatchdog, StallWatch, completed_total
from diag.proto import diag_pb2 as pb

log = logging.getLogger(__name__)

#: how long a finished step waits for its device times before it is sent without them
DEVICE_WAIT_NS = 2_000_000_000
#: device times kept for steps not emitted yet, at most (a step is held until the Flight Recorder
#: harvest that covers it, up to ``fr_poll_interval_s``: thousands of 1 ms steps); device times
#: of steps already emitted without them are dropped as soon as that is known
DEVICE_KEEP = 8192
#: how long a harvest waits for the control-plane server's dump before it dumps in-process
FR_SERVER_TIMEOUT_S = 5.0
#: profiler-window events summarized between two pacing ticks (~100-150 us of work)
WINDOW_TICK_EVENTS = 32
#: how often the hook looks for diag's operator observer until it is built (diag.hook.opstats)
OPSTATS_LOOK_S = 5.0


def fr_buffer_size() -> int:
    """The Flight Recorder ring buffer's size in this process (as torch reads it)."""
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        value = os.environ.get(name, "")
        if value.strip().isdigit() and int(value) > 0:
            return int(value)
    return 2000


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class StepProgress(Protocol):
    """The step tracker's counters, as the hook thread reads them (the training thread writes
    them): the step in progress, whether the first step began, and the cumulative time spent in
    blocking Python-level collectives (it grows when one returns)."""

    @property
    def step(self) -> int: ...
    @property
    def started(self) -> bool: ...
    @property
    def py_coll_ns(self) -> int: ...


class HookThread(threading.Thread):
    """The background half of an installed hook (one per hook).

    ``state`` is shared with the job's threads; ``events`` stamps every event (its ``rank`` is
    corrected here once the process group exists); ``profiler`` takes on-demand plans and hands
    back finished windows; ``steps`` is the training thread's step tracker; ``numerics`` turns
    the numerics tier's records into events (None when the tier is off); ``groups`` names the
    process groups; ``patch_late`` wraps entry points of modules the job imported since install
    (``torch.distributed.checkpoint``; called each cycle when checkpoints are captured).
    """

    def __init__(
        self,
        state: HookState,
        cfg: HookConfig,
        torch: Any,
        *,
        events: EventFactory,
        profiler: ProfilerWindows,
        steps: StepProgress,
        numerics: NumericsEvents | None,
        groups: ProcessGroups,
        patch_late: Callable[[], None],
        use_native: Callable[[hook_opstats.OpStats], None],
    ) -> None:
        super().__init__(name="diag-hook", daemon=True)
        self.state = state
        self.cfg = cfg
        self.torch = torch
        self.ev = events
        self.profiler = profiler
        self.steps = steps
        self.numerics = numerics
        self.groups = groups
        self._patch_late = patch_late
        self._use_native = use_native  # diag's native library loaded: the job side's share
        self._error = state.thread_errors.record
        self.gil = GilShare(self.cfg.gil_share, self.cfg.gil_slice_s)
        self.sender = FrameSender(
            self.cfg.daemon_sock,
            sender=self.ev.source,
            max_backlog=self.cfg.queue_max_events,
            reconnect_interval_s=self.cfg.reconnect_interval_s,
            tick=self.gil.tick,
        )
        self.windows = StepWindows()
        self.fr = FrState(self.windows)
        #: the Flight Recorder ring harvested, and how it is dumped (diag.hook.fr_dump)
        self.dumper = FrDumper(getattr(torch._C, "_distributed_c10d", None))
        self.fr_ok = bool(self.cfg.capture_collectives and self.dumper.ok)
        #: where harvests come from when it runs (started by the thread: :meth:`_start`)
        self.fr_server: FrServer | None = None
        self.num_server_dumps = 0  # harvests served by it (the rest: the dumper's)
        self._stop_evt = threading.Event()
        self._exiting = True  # the last cycle's health says final (set by stop() before _stop_evt)
        self._pending_steps: deque[tuple[Any, ...]] = deque()
        #: the hook's CUDA-event step timer, once the job uses CUDA (set by the hook), and the
        #: device times read back, by step, until their step is emitted
        self.device: DeviceTimer | None = None
        self._device_steps: dict[int, DeviceStep] = {}
        self._probe: int | None = None  # the latest FR probe total (FrPacer)
        self._next_health = time.monotonic()  # the first cycle reports (and its interval)
        self._full_rank_info = False
        self._announced = False
        self._prev_dump_wall_ns = 0
        self._pg_sizes: dict[str, int] = {}
        self.pacer = self._new_pacer()
        self.requests = RequestFilter(self.cfg.profile_num_steps)
        self._fr_completed = 0  # sum of the groups' last completed collective, latest harvest
        self.watchdog = HangWatchdog(
            StallWatch(min_s=self.cfg.hang_min_s, factor=self.cfg.hang_factor),
            self.ev,
            progress=self._progress,
            fr_dump=self._fresh_dump,
            last_step=lambda: steps.step - 1 if steps.started else -1,
            current_step=lambda: steps.step if steps.started else -1,
            on_error=self._error,
        )
        self.traces = (
            hook_kernels.TraceFiles(
                self.cfg.trace_dir,
                max_files=self.cfg.max_traces_per_rank,
                max_bytes=self.cfg.max_trace_bytes,
            )
            if self.cfg.trace_dir
            else None
        )
        #: (window_id, training-thread ns, hook-thread ns, done at) of the last windows
        #: processed: what switching the profiler cost the training thread, what summarizing and
        #: writing the trace took here (wall time, pauses included), and when that was done
        #: (``time.perf_counter_ns()``: the steps before it may have waited for this thread).
        self.window_costs: deque[tuple[str, int, int, int]] = deque(maxlen=64)
        #: when to look for diag's operator observer again (monotonic s; inf: never again)
        self._next_opstats_look = (
            0.0 if self.cfg.profile_aggregate or self.cfg.fr_dump_native else float("inf")
        )
        self.opstats_note = ""  # why it is not loaded ("" once it is)

    # ----------------------------------------------------------------- loop
    def run(self) -> None:
        try:
            self._lower_priority()
            self._serve()
        except BaseException as exc:  # last resort: the thread ends; say why while it still can
            self._died(exc)
        finally:
            self._server_off(None)

    def _lower_priority(self) -> None:
        """Raise this thread's nice value by ``thread_nice`` (Linux keeps one per thread; an
        unprivileged thread may raise its own); a platform without it leaves it as it is."""
        nice = self.cfg.thread_nice
        if nice <= 0:
            return
        try:
            tid = threading.get_native_id()
            now = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(19, now + nice))
        except (AttributeError, OSError) as exc:
            log.debug("diag hook: thread priority left as it is: %s", exc)

    def _serve(self) -> None:
        self._guarded(self._start)
        flush_s = self.cfg.flush_interval_s
        next_cycle = time.monotonic() + flush_s
        while not self._wait(next_cycle):
            if time.monotonic() >= next_cycle:
                self._cycle(final=False)
                next_cycle = time.monotonic() + flush_s
            elif self.fr_ok:
                self._guarded(self._fr_look)
        self._cycle(final=True)
        self.sender.close()  # the daemon sees the end now, not when the process exits

    def _start(self) -> None:
        self._opstats_look()  # before the first periodic window, in all likelihood
        self._rank_info()
        if self.fr_ok and self.cfg.fr_dump_server:
            self.fr_server = FrServer.start(self.torch)
        if self.fr_ok:  # the first dump can take seconds: pay it here, not mid-run
            self.dumper.dump()
            self._server_dump()

    def _wait(self, next_cycle: float) -> bool:
        """Sleep until the next cycle, or sooner when the Flight Recorder's pace needs a look
        between cycles; True when asked to stop."""
        timeout = next_cycle - time.monotonic()
        if self.fr_ok:
            try:
                timeout = min(timeout, self.pacer.wait_s(time.monotonic(), self._probe))
            except Exception as exc:
                self._error(exc)
        return self._stop_evt.wait(max(0.0, timeout))

    def _fr_look(self) -> None:
        if self._fr_due():
            self.gil.burst(self._slack_s())
            self._harvest(final=False)

    def _slack_s(self) -> float:
        """How long the hook thread may pause within one burst of work (:mod:`diag.hook.
        gil_share`) without costing data: half the time the Flight Recorder ring's slack (half the
        ring) lasts at the job's measured peak rate, and at most half a flush interval."""
        budget = 0.5 * self.cfg.flush_interval_s
        if self.fr_ok:
            rate = self.pacer.rate
            budget = min(budget, 0.5 * self.pacer.half / rate if rate > 0 else 0.05)
        return budget

    def _guarded(self, work: Callable[[], None]) -> None:
        """Run ``work``; an exception it raises is counted (``num_errors``), never raised."""
        try:
            work()
        except Exception as exc:
            self._error(exc)

    def _died(self, exc: BaseException) -> None:
        """The thread is ending on ``exc``: record it and try to send one last (non-final)
        health carrying it. The connection is left open: the daemon reports the silence."""
        try:
            self._error(RuntimeError(f"hook thread ended: {type(exc).__name__}: {exc}"))
            self._emit(self._health(final=False))
            self.sender.flush()
        except BaseException:  # nothing is left to report it to
            pass

    def stop(self, timeout_s: float, *, exiting: bool = True) -> None:
        """Ask for the final cycle and wait for it at most ``timeout_s``. ``exiting=False`` is a
        detach: the last health event does not say ``final`` (the process runs on, so a hang
        this hook reported must not look resolved by a clean exit)."""
        self._exiting = exiting
        self._stop_evt.set()
        if self.is_alive():
            self.join(timeout_s)

    def arm_watchdog(self) -> None:
        """Arm the hang watchdog now (any thread): see :meth:`HangWatchdog.arm`."""
        self.watchdog.arm()

    def _cycle(self, *, final: bool) -> None:
        """One cycle: its work, then the health report when due, then the flush. Each part is
        guarded on its own: a failing part costs neither the heartbeat nor the sending."""
        now = time.monotonic()
        self.gil.burst(0.0 if final else self._slack_s())
        self._guarded(functools.partial(self._work, final=final))
        if final:
            self.sender.retry_now()  # one more connection attempt for the last events
            self._guarded(self.sender.flush)  # so the final health counts what was sent
            self.sender.drop_backlog()  # what the daemon did not take now is lost
        if final or now >= self._next_health:
            self._next_health = now + self.cfg.health_interval_s
            health = functools.partial(self._health, final=final and self._exiting)
            self._guarded(lambda: self._emit(health()))
        self._guarded(self.sender.flush)

    def _work(self, *, final: bool) -> None:
        # every cycle, not only when steps are released (a harvest, up to fr_poll_interval_s
        # apart): the device timer holds a bounded number of steps in flight
        self._poll_device()
        if self.fr_ok and (final or self._fr_due()):
            self._harvest(final=final)
        else:
            self._drain()
            if not self.fr_ok:
                self._release_steps(None, final=final)
        if not final:
            self.sender.add(self.watchdog.check())  # sent by this cycle's flush
            # where gloo's workers wait when idle: learnt here, off the training thread, so a
            # window's stop knows when they are done (diag.hook.c10d_workers)
            self.profiler.workers.idle_sample()
        if not self._full_rank_info:
            self._rank_info()
        if self._full_rank_info:
            self._layout()
        self._control()
        self._opstats_look()
        self._profile_windows()
        if self.cfg.capture_checkpoints:
            self._patch_late()

    def _emit(self, event: schema.Event) -> None:
        self.sender.add((event,))

    # ------------------------------------------------------- profile windows
    def _control(self) -> None:
        """Schedule the on-demand profile requests the daemon wrote back since the last cycle."""
        try:
            payloads = self.sender.poll_control()
        except Exception as exc:
            self._error(exc)
            return
        for payload in payloads:
            try:
                msg = pb.ControlMessage.FromString(payload)
                if msg.WhichOneof("body") != "profile":
                    raise ValueError("control message without a known body")
                plan = self.requests.plan(msg.profile, self.ev.rank)
            except Exception as exc:
                self._error(exc)
                continue
            if plan is not None:
                log.debug("diag hook: profile window %s requested at step %d",
                          plan.window_id, plan.start_step)  # fmt: skip
                self.profiler.inbox.append(plan)

    def _opstats_look(self) -> None:
        """Load diag's operator observer once it is built (``diag run`` builds it beside the
        job's start: it may land after the hook starts); looked for every
        :data:`OPSTATS_LOOK_S` until then. Loaded here, never on the training thread."""
        now = time.monotonic()
        if now < self._next_opstats_look:
            return
        found, why = hook_opstats.load(self.cfg.opstats_lib)
        if found is None:
            self._next_opstats_look = now + OPSTATS_LOOK_S
            if why != self.opstats_note:
                log.debug("diag hook: operator observer: %s", why)
            self.opstats_note = why
            return
        self._next_opstats_look = float("inf")
        self.opstats_note = ""
        if self.cfg.profile_aggregate:
            self.profiler.opstats = found
        if self.cfg.fr_dump_native:
            self.dumper.use_native(found, read=self.cfg.fr_read_native)
        self._guarded(lambda: self._use_native(found))

    def _profile_windows(self) -> None:
        profiler = self.profiler
        done = profiler.done
        while done:
            window = done.popleft()
            t0 = time.perf_counter_ns()
            # paced as a harvest is: ~3-5 us of Kineto getters per event, ~10k events for a
            # 50 ms CPU step, had run in 2,000-event pieces (~6-10 ms each holding the GIL) that
            # made the steps after a window the steady state's p99 (+30-70 ms at ~50 ms)
            self.gil.burst(self._slack_s())
            try:
                events = hook_kernels.process(
                    window,
                    self.ev,
                    self.traces,
                    record_shapes=records_shapes(window.plan, self.cfg),
                    pause=self.gil.tick,
                    chunk=WINDOW_TICK_EVENTS,
                )
            except Exception as exc:
                self._error(exc)
                continue
            finally:
                window.result = None  # free the trace now, then allow the next window
                if not done:
                    profiler.busy = False
            self.sender.add(events)
            t1 = time.perf_counter_ns()
            self.window_costs.append((window.plan.window_id, window.train_ns, t1 - t0, t1))

    # ------------------------------------------------------------- records
    def _drain(self) -> None:
        queue = self.state.queue
        while True:
            try:
                rec = queue.popleft()
            except IndexError:
                return
            self.gil.tick()
            try:
                self._record(rec)
            except Exception as exc:
                self._error(exc)

    def _record(self, rec: tuple[Any, ...]) -> None:
        off = self.state.wall_offset_ns
        tag = rec[0]
        if tag == "step":
            if self.numerics is not None:
                built: list[schema.Event] = []
                try:  # a failure here must not lose the step itself
                    rec = self.numerics.step_record(rec, built)
                except Exception as exc:
                    self._error(exc)
                self.sender.add(built)
            self.windows.end(rec[1], rec[3] + off)
            self._pending_steps.append(rec)
            self.watchdog.watch.step_time(rec[3] - rec[2])
        elif tag == "start":
            self.windows.start(rec[1] + off)
        elif tag == "coll":
            _, step, op, t0, t1, nbytes, dtype, group, sync, _ok, tid = rec
            pg_name, pg_size = self.groups.info(group)
            call = PyCall(step, op, t0 + off, t1 + off, nbytes, fr_dtype_name(dtype), pg_name,
                          pg_size, sync, tid)  # fmt: skip
            if self.fr_ok:
                self.fr.add_call(call)
            else:
                self._emit(self.ev.make(schema.CollectiveEvent, step=step, **call.payload()))
        elif tag == "ckpt":
            self._emit(self.ev.checkpoint_event(rec, off))
        elif tag in NUMERICS_TAGS and self.numerics is not None:
            self.sender.add(self.numerics.record(rec))
        elif tag == "exc":
            info, step = rec[1], rec[2]
            self._emit(
                self.ev.make(
                    schema.ExceptionEvent,
                    step=step,
                    pid=self.ev.pid,
                    thread_name=info.thread_name,
                    is_main=info.is_main,
                    exc_type=info.exc_type,
                    message=info.message,
                    frames=info.frames,
                    num_frames=info.num_frames,
                )
            )

    # ------------------------------------------------------------- watchdog
    def _progress(self) -> tuple[tuple[int, int, int], bool]:
        """A token that changes whenever a step ends or a collective completes, and whether
        either ever happened (see :mod:`diag.hook.watchdog`)."""
        steps = self.steps
        token = (steps.step, steps.py_coll_ns, self._fr_completed)
        return token, token != (0, 0, 0)

    def _fresh_dump(self) -> dict[str, Any] | None:
        if not self.fr_ok:
            return None
        return load_fr_dump(self.dumper.dump(), validate=False)

    def _release_steps(self, before_wall_ns: int | None, *, final: bool = True) -> None:
        """Emit the held steps that ended before ``before_wall_ns`` (all when None); on a CUDA
        job a step also waits for its device times, up to :data:`DEVICE_WAIT_NS` after its end
        (then it goes without them: a device far behind is not a reason to hold events); ``final``:
        nothing waits for the device."""
        off = self.state.wall_offset_ns
        device = self._poll_device()
        now = time.perf_counter_ns()
        rows: list[tuple[int, dict[str, Any]]] = []
        while self._pending_steps:
            rec = self._pending_steps[0]
            if before_wall_ns is not None and rec[3] + off >= before_wall_ns:
                break
            self.gil.tick()
            timed = self._device_steps.pop(rec[1], None)
            if (
                timed is None
                and device is not None
                and not final
                and device.num_pending
                and now - rec[3] < DEVICE_WAIT_NS
            ):
                break  # its device times are on their way
            self._pending_steps.popleft()
            num_coll = self.fr.counts.pop(rec[1], 0) if self.fr_ok else rec[13]
            rows.append((rec[1], step_payload(rec, off, num_coll, timed)))
        self.sender.add_rows(self.ev.rows(schema.StepEvent, rows))  # one column block

    def _poll_device(self) -> DeviceTimer | None:
        """Read back the device times that are complete (never waits for the device)."""
        device = self.device
        if device is None:
            return None
        try:
            for timed in device.poll():
                self._device_steps[timed.step] = timed
            held = self._pending_steps[0][1] if self._pending_steps else None
            while self._device_steps and (
                len(self._device_steps) > DEVICE_KEEP
                or (held is not None and next(iter(self._device_steps)) < held)
            ):  # the oldest, whose steps went without them
                self._device_steps.pop(next(iter(self._device_steps)))
        except Exception as exc:
            self._error(exc)
            self.device = None
        return self.device

    # --------------------------------------------------------- flight recorder
    def _fr_due(self) -> bool:
        """Probe the Flight Recorder's counters (a dump without entries, ~3 us) and ask the
        pacer whether a harvest is due; a failed probe leaves the decision to the clock."""
        if self.dumper.may_follow and self.groups.uses_nccl():
            self._follow_nccl()
        try:
            if self._reading():
                self._probe = self.dumper.next_id()
            else:
                raw = self.dumper.dump(collectives=False)
                self._probe = probe_total(load_fr_dump(raw, validate=False).get("pg_status"))
        except Exception:
            self._probe = None
        return self.pacer.due(time.monotonic(), self._probe)

    def _reading(self) -> bool:
        """Whether harvests read the ring from a record id on (:meth:`FrDumper.since`) instead
        of dumping it whole; the pacer's probe then counts the ring's entries, not the groups'
        collectives."""
        return self.fr_server is None and self.dumper.reads and self.dumper.verified

    def _follow_nccl(self) -> None:
        """A group runs NCCL: harvest NCCL's ring from now on (:mod:`diag.hook.fr_dump`), after a
        last harvest of the generic one; the pacing starts again with the new ring's ids."""
        self._harvest(final=False)
        if not self.fr_ok:
            return
        self.dumper.follow(True)
        self._server_off(None)  # torch's server dumps the generic ring
        self.sender.add_rows(self.ev.rows(schema.CollectiveEvent, self.fr.new_ring(self._pg_sizes)))
        self.pacer = self._new_pacer()
        self._probe = None
        log.info("diag hook: a process group runs NCCL: harvesting its Flight Recorder ring")

    def _new_pacer(self) -> FrPacer:
        """The pacing of a ring harvested from its start (:mod:`diag.hook.fr_pacing`)."""
        return FrPacer(
            fr_buffer_size(),
            longest_s=self.cfg.fr_poll_interval_s,
            flush_s=self.cfg.flush_interval_s,
        )

    def _harvest(self, *, final: bool) -> None:
        # A dump unpickles ~40 objects per entry (80k for a full 2000-entry buffer); they die by
        # refcount once processed, but would first trigger cyclic-GC passes over the whole heap,
        # possibly on the training thread. Keep the collector off for the harvest only.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._harvest_once(final=final)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _server_dump(self) -> dict[str, Any] | None:
        """A dump from the control-plane server (built by its threads without the GIL, decoded
        here in paced pieces); ``None`` without a server, or when it failed (it is stopped
        then, once, with the reason logged: later harvests use ``_dump_fr_trace``)."""
        if self.fr_server is None:
            return None
        try:
            body = self.fr_server.fetch(FR_SERVER_TIMEOUT_S)
            self.gil.tick()
            dump = load_fr_json(body, tick=self.gil.tick)
        except Exception as exc:
            self._server_off(exc)
            return None
        self.num_server_dumps += 1
        return dump

    def _server_off(self, exc: Exception | None) -> None:
        """Stop the control-plane server (``exc``: why, logged once; None: the thread ends)."""
        server, self.fr_server = self.fr_server, None
        if server is None:
            return
        if exc is not None:
            log.info(
                "diag hook: Flight Recorder server failed (%s: %s); dumping in-process",
                type(exc).__name__,
                exc,
            )
        server.close()

    def _harvest_once(self, *, final: bool) -> None:
        dump_wall_ns = time.time_ns()
        try:
            dump = self._server_dump()
            if dump is None:
                dump = self._ring_dump()
            self.gil.tick()
        except Exception as exc:
            self._fr_off(f"Flight Recorder dump failed: {type(exc).__name__}: {exc}")
            return
        self._drain()  # records of everything that finished before the dump started
        self._fr_completed = completed_total(dump)
        self._paced(dump)
        status = dump.get("pg_status") or {}
        recorded = dump.get("next_record_id", len(dump.get("entries") or ()))
        if not recorded and any(
            int(s.get("last_enqueued_collective", -1)) > 0 for s in status.values()
        ):
            self._fr_off("Flight Recorder is off (TORCH_FR_BUFFER_SIZE=0?)")
            return
        self._pg_sizes.update(self.groups.sizes())  # kept: the job may destroy its groups first
        if self._full_rank_info:
            self._layout()  # before a group the job may destroy soon is gone
        sizes = self._pg_sizes
        rows = self.fr.process(
            dump, time.monotonic(), final=final, extra_sizes=sizes, tick=self.gil.tick
        )
        rows += [(c.step, c.payload()) for c in self.fr.unmatched_calls(dump_wall_ns, final=final)]
        self.sender.add_rows(self.ev.rows(schema.CollectiveEvent, rows))  # one column block
        # Entries are emitted one harvest late (FrState), so a step is complete in the counts once
        # it ended before the previous dump.
        self._release_steps(None if final else self._prev_dump_wall_ns, final=final)
        self._prev_dump_wall_ns = dump_wall_ns

    def _ring_dump(self) -> dict[str, Any]:
        """This harvest's view of the ring: read from the first entry it still needs where the
        reader is trusted, else torch's dump (checking the reader against it until it is
        trusted: :meth:`FrDumper.verify`)."""
        dumper = self.dumper
        if self._reading():
            read = dumper.since(self.fr.first_needed(self.pacer.top))
            if read is not None:
                return read
        raw = dumper.dump()
        self.gil.tick()  # torch's own dump held the GIL throughout: let the job run
        dump = load_fr_dump(raw, validate=False, tick=self.gil.tick)  # in slices
        del raw
        if self.fr_server is None and dumper.reads and not dumper.verified and dumper.verify(dump):
            self.pacer.rebase(dumper.next_id())  # the probe counts the ring's entries now
        return dump

    def _paced(self, dump: dict[str, Any]) -> None:
        """Tell the pacer what this harvest saw; count (and explain once) lost entries."""
        ids = [
            int(e.get("record_id", -1)) for e in dump.get("entries") or () if isinstance(e, dict)
        ]
        if self._reading():
            read_id = dump.get("next_record_id")
            self._probe = int(read_id) if read_id is not None else self.dumper.next_id()
        else:
            self._probe = probe_total(dump.get("pg_status"))
        steps = self.steps.step if self.steps.started else 0
        lost = self.pacer.harvested(time.monotonic(), ids, self._probe, steps)
        if lost:
            if self.state.num_fr_dropped == 0:
                log.info("diag hook: %s", self.pacer.advice)
            self.state.num_fr_dropped += lost

    def _fr_off(self, reason: str) -> None:
        """Fall back to Python-level collectives only: emit what was held for matching."""
        log.info("diag hook: %s; recording Python-level collectives only", reason)
        self.fr_ok = False
        self._drain()
        for call in self.fr.unmatched_calls(0, final=True):
            self._emit(self.ev.make(schema.CollectiveEvent, step=call.step, **call.payload()))
        self._release_steps(None)

    # ------------------------------------------------------------ rank, layout, health
    def _layout(self) -> None:
        """One :class:`~diag.schema.ProcessGroupInfo` per group this rank has not reported."""
        for g in self.groups.unseen():
            self._emit(
                self.ev.make(
                    schema.ProcessGroupInfo,
                    pg_name=g.pg_name,
                    pg_desc=g.pg_desc,
                    ranks_json=json.dumps(list(g.ranks), separators=(",", ":")),
                    size=len(g.ranks),
                    backend=g.backend,
                )
            )

    def _rank_info(self) -> None:
        torch = self.torch
        dist = torch.distributed
        backend = device = uuid = ""
        world_size = _env_int("WORLD_SIZE", 1)
        if dist.is_available() and dist.is_initialized():
            backend = str(dist.get_backend())
            world_size = dist.get_world_size()
            self.ev.rank = dist.get_rank()
            cuda = torch.cuda.is_initialized()
            device = f"cuda:{torch.cuda.current_device()}" if cuda else "cpu"
            uuid = _device_uuid(torch) if cuda else ""
            self._full_rank_info = True
        elif self._announced:
            return  # announced once already; announce again when the process group exists
        self._announced = True
        self._emit(
            self.ev.make(
                schema.RankInfo,
                pid=self.ev.pid,
                world_size=world_size,
                local_world_size=_env_int("LOCAL_WORLD_SIZE", 1),
                node_rank=_env_int("GROUP_RANK", -1),
                run_id=os.environ.get("TORCHELASTIC_RUN_ID", ""),
                argv=shlex.join(sys.argv),
                torch_version=str(torch.__version__),
                backend=backend,
                device=device,
                cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                device_uuid=uuid,
                nccl_timing=nccl_timing_on(os.environ),
            )
        )

    def _health(self, *, final: bool) -> schema.Event:
        state, sender = self.state, self.sender
        dropped = sender.dropped
        return self.ev.make(
            schema.HookHealth,
            pid=self.ev.pid,
            num_emitted=self.ev.num_emitted + 1,
            num_sent=sender.num_sent,
            num_dropped=state.num_dropped + dropped.total,
            num_errors=state.num_errors,
            last_error=state.last_error or sender.last_error,
            queue_depth=len(state.queue) + sender.backlog,
            final=final,
            num_queue_dropped=state.num_queue_dropped,
            num_fr_dropped=state.num_fr_dropped,
            num_undelivered=dropped.undelivered,
            num_unencodable=dropped.unencodable,
            num_oversize=dropped.oversize,
            health_interval_ns=round(self.cfg.health_interval_s * 1e9),
            num_gil_pauses=self.gil.num_pauses,
            gil_paused_ns=round(self.gil.paused_s * 1e9),
        )


def nccl_timing_on(environ: Mapping[str, str]) -> bool:
    """Whether ``TORCH_NCCL_ENABLE_TIMING`` is on in ``environ`` (torch reads it as a boolean:
    1/true/yes/on, any case)."""
    return environ.get("TORCH_NCCL_ENABLE_TIMING", "").strip().lower() in ("1", "true", "yes", "on")


def _device_uuid(torch: Any) -> str:
    """The current CUDA device's UUID as NVML writes it (``GPU-<uuid>``; "" if torch cannot say).
    Device properties are cached by torch: no device call, no synchronization."""
    try:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        text = str(getattr(props, "uuid", "") or "")
    except Exception:
        return ""
    if not text:
        return ""
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
