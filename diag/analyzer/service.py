"""The analyzer's gRPC service: a thin adapter over :class:`~diag.analyzer.core.AnalyzerCore`.

``Ingest`` takes the raw request bytes (no deserializer in front of it) so that garbage is answered
like any other malformed batch: ``INVALID_ARGUMENT`` with one line, nothing stored. ``Time`` answers
the analyzer's wall clock for the daemons' NTP-style offset; ``Summary`` the ``diag report --json``
object of the run so far. ``RequestProfile`` issues an on-demand profile request (the analyzer
fills ``request_id``, ``seq``, the times and, when 0, ``at_step``; bad arguments are
``INVALID_ARGUMENT``); ``PollControl`` answers a daemon the requests newer than its ``after_seq``.
:func:`serve` is the composition: store, core, server, flush thread.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from diag import schema
from diag.analyzer.autocapture import AutoCaptureConfig
from diag.analyzer.core import AnalyzerCore
from diag.config import AnalyzerConfig
from diag.diagnose.triage import TriageResult
from diag.errors import Cancelled, ConfigError, NotReady, SchemaError, TransportError
from diag.proto import diag_pb2 as pb
from diag.store.run_store import RunStore
from diag.transport.security import ServerSecurity, check_exposure

log = logging.getLogger(__name__)

SERVICE_NAME = "diag.v1.Analyzer"


def parse_batch(data: bytes | pb.EventBatch) -> pb.EventBatch:
    """An ``EventBatch`` from request bytes; :class:`SchemaError` (one line) if they are not one."""
    if isinstance(data, pb.EventBatch):
        return data
    batch = pb.EventBatch()
    try:
        batch.ParseFromString(data)
    except (DecodeError, RuntimeError) as exc:
        raise SchemaError(f"malformed event batch ({len(data)} bytes): {exc}") from None
    return batch


class AnalyzerServicer:
    """The ``diag.v1.Analyzer`` methods; ``Ingest`` takes a proto message or raw bytes."""

    def __init__(self, core: AnalyzerCore) -> None:
        self.core = core

    def Ingest(
        self, request: bytes | pb.EventBatch, context: grpc.ServicerContext
    ) -> pb.IngestReply:
        try:
            batch = parse_batch(request)
            result = self.core.ingest(batch, request if isinstance(request, bytes) else None)
        except SchemaError as exc:
            message = " ".join(str(exc).split())
            self.core.note_rejected()
            log.warning("rejected a batch from %s: %s", context.peer(), message)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        except (OSError, TransportError) as exc:
            message = " ".join(str(exc).split())
            log.error("cannot store a batch (not acknowledged): %s", message)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"analyzer cannot store events: {message}")
        return pb.IngestReply(
            num_accepted=result.num_accepted,
            num_duplicates=result.num_duplicates,
            analyzer_time_ns=self.core.clock(),
            schema_version=schema.SCHEMA_VERSION,
        )

    def Time(self, request: pb.TimeRequest, context: grpc.ServicerContext) -> pb.TimeReply:
        return pb.TimeReply(analyzer_time_ns=time.time_ns(), schema_version=schema.SCHEMA_VERSION)

    def Summary(self, request: pb.SummaryRequest, context: grpc.ServicerContext) -> pb.SummaryReply:
        return pb.SummaryReply(json=json.dumps(self.core.summary_json()))

    def RequestProfile(
        self, request: pb.ProfileRequest, context: grpc.ServicerContext
    ) -> pb.ProfileRequest:
        """Only ``num_steps``, ``ranks`` and ``at_step`` of the request are read."""
        try:
            issued = self.core.request_profile(
                num_steps=request.num_steps, ranks=list(request.ranks), at_step=request.at_step
            )
        except ConfigError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, " ".join(str(exc).split()))
        except NotReady as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, " ".join(str(exc).split()))
        except (OSError, TransportError) as exc:
            message = " ".join(str(exc).split())
            log.error("cannot issue a profile request: %s", message)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"analyzer cannot issue requests: {message}")
        return issued

    def RequestProbe(
        self, request: pb.ProbeRequest, context: grpc.ServicerContext
    ) -> pb.ProbeRequest:
        """Only ``probe``, ``params_json``, ``host``, ``device`` and ``rank`` are read."""
        try:
            issued = self.core.request_probe(request)
        except ConfigError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, " ".join(str(exc).split()))
        except (OSError, TransportError) as exc:
            message = " ".join(str(exc).split())
            context.abort(grpc.StatusCode.UNAVAILABLE, f"analyzer cannot issue requests: {message}")
        return issued

    def RequestFetch(
        self, request: pb.CollectiveFetch, context: grpc.ServicerContext
    ) -> pb.CollectiveFetch:
        """Only ``host``, ``ranks``, ``first_step`` and ``last_step`` are read (``host`` "":
        every node)."""
        try:
            issued = self.core.control.request_fetch(
                request.first_step,
                request.last_step,
                ranks=list(request.ranks),
                host=request.host or "*",
            )
        except ConfigError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, " ".join(str(exc).split()))
        except OSError as exc:
            message = " ".join(str(exc).split())
            context.abort(grpc.StatusCode.UNAVAILABLE, f"analyzer cannot issue requests: {message}")
        return issued

    def PollControl(
        self, request: pb.ControlPoll, context: grpc.ServicerContext
    ) -> pb.ControlReply:
        return pb.ControlReply(messages=self.core.poll_control(request.after_seq))


def add_to_server(servicer: AnalyzerServicer, server: grpc.Server) -> None:
    """Register the servicer; ``Ingest`` gets raw bytes (see the module docstring)."""
    handlers: dict[str, grpc.RpcMethodHandler] = {
        "Ingest": grpc.unary_unary_rpc_method_handler(
            servicer.Ingest,
            request_deserializer=None,
            response_serializer=pb.IngestReply.SerializeToString,
        ),
        "Time": grpc.unary_unary_rpc_method_handler(
            servicer.Time,
            request_deserializer=pb.TimeRequest.FromString,
            response_serializer=pb.TimeReply.SerializeToString,
        ),
        "Summary": grpc.unary_unary_rpc_method_handler(
            servicer.Summary,
            request_deserializer=pb.SummaryRequest.FromString,
            response_serializer=pb.SummaryReply.SerializeToString,
        ),
        "RequestProfile": grpc.unary_unary_rpc_method_handler(
            servicer.RequestProfile,
            request_deserializer=pb.ProfileRequest.FromString,
            response_serializer=pb.ProfileRequest.SerializeToString,
        ),
        "PollControl": grpc.unary_unary_rpc_method_handler(
            servicer.PollControl,
            request_deserializer=pb.ControlPoll.FromString,
            response_serializer=pb.ControlReply.SerializeToString,
        ),
        "RequestProbe": grpc.unary_unary_rpc_method_handler(
            servicer.RequestProbe,
            request_deserializer=pb.ProbeRequest.FromString,
            response_serializer=pb.ProbeRequest.SerializeToString,
        ),
        "RequestFetch": grpc.unary_unary_rpc_method_handler(
            servicer.RequestFetch,
            request_deserializer=pb.CollectiveFetch.FromString,
            response_serializer=pb.CollectiveFetch.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))


def _flush_loop(core: AnalyzerCore, interval_s: float, stop: threading.Event) -> None:
    while not stop.wait(interval_s) and not core.closed:
        try:
            core.flush()
        except Exception:  # keep ingesting: the WAL still holds everything not yet in parts
            log.exception("periodic flush failed; will retry")


#: seconds the live triage waits after an urgent event for the rest of the same moment's reports.
URGENT_SETTLE_S = 0.5
#: the live triage's nice value (Linux: per thread; elsewhere left as it is), and the levels it
#: moves to while starved (:class:`PassPriority`).
TRIAGE_NICE = 19
TRIAGE_NICE_LEVELS = (TRIAGE_NICE, 10, 5)
TRIAGE_THREAD = "diag-triage"
#: the thread each live pass runs in (a new one per pass, niced at its start: an unprivileged
#: thread can lower its own priority but never raise it again)
TRIAGE_PASS_THREAD = "diag-triage-pass"


@dataclass(slots=True)
class PassPriority:
    """The live triage's CPU priority, pass by pass: nice 19 while that lets a pass finish, a
    level up (10, then 5: never the job's own) after a *starved* pass (one that took over
    ``starved_wall_s`` of wall time while getting under ``starved_share`` of a core: on a host
    the job saturates, nice 19 gets ~1% of a core and a pass of a second of CPU took minutes, so
    the closed loop asked for its window after the job had ended), a level back down after a
    pass that got its CPU. While raised, the passes keep to ``budget_share`` of one core on
    average: the pause before the next pass is at least the last pass's CPU time x (1 / share -
    1), so a starved host lends diag at most that much."""

    level: int = 0
    starved_wall_s: float = 2.0
    starved_share: float = 0.25
    budget_share: float = 0.2

    @property
    def nice(self) -> int:
        return TRIAGE_NICE_LEVELS[self.level]

    def after(self, cpu_s: float, wall_s: float, interval_s: float) -> float:
        """Note a pass's CPU and wall time; the seconds to wait before the next pass."""
        share = cpu_s / wall_s if wall_s > 0 else 1.0
        before = self.level
        if wall_s > self.starved_wall_s and share < self.starved_share:
            self.level = min(self.level + 1, len(TRIAGE_NICE_LEVELS) - 1)
        elif share >= 2 * self.starved_share or wall_s <= self.starved_wall_s:
            self.level = max(self.level - 1, 0)
        if self.level != before:
            log.info(
                "live triage pass: %.1f s for %.2f s of CPU (%.0f%% of a core); the next at "
                "nice %d",
                wall_s,
                cpu_s,
                100 * share,
                self.nice,
            )
        if self.level == 0:
            return interval_s
        return max(interval_s, cpu_s * (1 / self.budget_share - 1))


def _lower_priority(nice: int) -> None:
    """Lower this thread's CPU priority to ``nice`` (Linux threads have their own); where the
    platform cannot, it runs as it is."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), nice))
    except (AttributeError, OSError) as exc:
        log.debug("live triage keeps its priority: %s", exc)


def _restore_priority(thread: threading.Thread) -> None:
    """Give the niced live triage ``thread`` the caller's priority back, so that a pass in flight
    at the close ends soon. At nice 19 on a saturated host it gets ~1.5% of a core, and whenever
    it is preempted holding the GIL every other thread of the process (the final triage, the
    ingest handlers) waits for it: a ``diag attach`` beside a CPU hog took over two minutes to
    detach. Raising a priority needs CAP_SYS_NICE (or RLIMIT_NICE) on Linux; without it the
    pass still ends at its next cancellation point (:meth:`AnalyzerCore.triage`)."""
    tid = thread.native_id
    if tid is None or not thread.is_alive():
        return
    try:
        mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, tid, mine)
    except (AttributeError, OSError) as exc:
        log.debug("the live triage keeps its low priority at the close: %s", exc)


def _triage_loop(core: AnalyzerCore, interval_s: float, stop: threading.Event) -> None:
    """Run the detectors on the live run every ``interval_s``, and at once after an urgent event
    (:data:`~diag.analyzer.core.URGENT_KINDS`: a hang report, an exception, a rank exit; a
    short settle lets the other ranks' reports of the same moment arrive first); new findings are
    logged and ``RUN_DIR/findings.jsonl`` is rewritten whenever the findings change. Each pass
    runs in its own thread at a low priority (:class:`PassPriority`: nice 19, raised only while
    starved and then within a CPU budget): on a training node it yields the CPUs to the job (a
    triage pass takes a core for a second or more on a small host, and the ranks it delays
    would read as contended: a clean 4-rank run on 2 cores came out "rank 1 waits for a CPU"
    with the live triage every second at nice 0)."""
    # This thread keeps the analyzer's priority (it waits, and publishes what a pass found): a
    # thread starts at its creator's nice value, and a pass thread made by a niced one could
    # never go below it without privileges.
    priority = PassPriority()
    wait_s = interval_s
    seen: list[dict[str, Any]] = []
    while not core.closed:
        if core.urgent.wait(wait_s):
            if stop.wait(URGENT_SETTLE_S):
                break
            core.urgent.clear()
        if stop.is_set() or core.closed:
            break
        outcome = _run_pass(core, stop, priority.nice)
        wait_s = priority.after(outcome.cpu_s, outcome.wall_s, interval_s)
        if isinstance(outcome.result, Cancelled):
            break  # closing: the run's final triage follows on the caller's thread
        if isinstance(outcome.result, BaseException):  # a half-written run, a detector bug
            log.error("live triage failed; will retry", exc_info=outcome.result)
            continue
        result = outcome.result
        try:
            core.capture(result)
        except Exception:  # the loop's failure leaves ingest and triage running
            log.exception("automatic capture failed; will retry")
        current = [f.to_json() for f in result.findings]
        if current != seen:
            if not core.publish_findings(result.findings, live=True):
                break  # closed meanwhile: the final triage writes the run's findings
            known = {f["id"] for f in seen}
            for f in current:
                if f["id"] not in known:
                    # INFO: the analyzer's log file has it; diag run's own view shows findings
                    log.info("finding: %s (%s, confidence %.2f)", f["summary"], f["cause"],
                                f["confidence"])  # fmt: skip
            seen = current


@dataclass(slots=True)
class _PassOutcome:
    result: Any = None  # the TriageResult, or the exception the pass raised
    cpu_s: float = 0.0
    wall_s: float = 0.0


def _run_pass(
    core: AnalyzerCore, stop: threading.Event, nice: int, check_s: float = 2.0
) -> _PassOutcome:
    """One live triage pass in a new thread at ``nice``; its result (or exception) and its CPU
    and wall time. Every ``check_s`` that the pass is starved (under a quarter of a core), it is
    raised a level (:data:`TRIAGE_NICE_LEVELS`) where this process may raise a thread's priority
    (CAP_SYS_NICE, RLIMIT_NICE); elsewhere the next pass starts higher (:class:`PassPriority`).
    The close gives the thread its priority back (:func:`join_background`)."""
    out = _PassOutcome()

    def body() -> None:
        _lower_priority(nice)
        wall0, cpu0 = time.monotonic(), time.thread_time()
        try:
            out.result = core.live_triage(cancelled=lambda: stop.is_set() or core.closed)
        except BaseException as exc:  # handed to the loop, which logs it and goes on
            out.result = exc
        out.cpu_s, out.wall_s = time.thread_time() - cpu0, time.monotonic() - wall0

    thread = threading.Thread(target=body, name=TRIAGE_PASS_THREAD, daemon=True)
    thread.start()
    start, levels = time.monotonic(), [n for n in TRIAGE_NICE_LEVELS if n < nice]
    while True:
        thread.join(check_s)
        if not thread.is_alive():
            break
        if not levels or stop.is_set():
            continue
        try:
            cpu = time.clock_gettime(time.pthread_getcpuclockid(thread.ident or 0))
            tid = thread.native_id
        except (AttributeError, OSError, ValueError):
            continue
        if tid is not None and cpu < 0.25 * (time.monotonic() - start):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, levels[0])
                levels.pop(0)
            except OSError:  # not allowed here: the next pass starts a level higher instead
                levels = []
    return out


def serve(
    cfg: AnalyzerConfig, *, detectors: Mapping[str, object] | None = None
) -> tuple[grpc.Server, int, AnalyzerCore]:
    """Open (recovering) the store at ``cfg.run_dir``, start the server on ``cfg.bind`` and the
    flush thread (and the live triage, with ``detectors``: name -> config, defaults for the
    others). Returns the started server, the bound port and the core. Who may call: ``cfg``'s
    token and TLS files (:mod:`diag.transport.security`); a bind beyond loopback without a
    token is a :class:`ConfigError` unless ``cfg.insecure``.

    To stop: ``server.stop(grace).wait()``, ``core.close()`` (final flush; ends the threads), then
    ``join_background(core)``: the threads are daemon threads, and one left inside a triage pass
    (pandas, Arrow) while the interpreter exits aborts the process ("terminate called without an
    active exception": seen once in ~10 ``diag attach`` exits). A live pass in flight gives up at
    its next detector once the core is closed (at nice 19 on a loaded host a whole pass outlasted
    the join's 30 s).
    """
    if not cfg.run_dir:
        raise TransportError("the analyzer needs a run directory")
    security = ServerSecurity.from_files(
        cfg.token_file or None, cfg.tls_cert or None, cfg.tls_key or None, cfg.tls_ca or None
    )
    check_exposure(cfg.bind, security, cfg.insecure)
    auto = AutoCaptureConfig(mode=cfg.auto_capture, min_interval_s=cfg.auto_capture_interval_s)
    core = AnalyzerCore(RunStore.create(cfg.run_dir), detectors=detectors, auto_capture=auto)
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ("grpc.max_send_message_length", cfg.max_message_bytes),
        # One analyzer per port: without this, grpc lets a second process bind the same port.
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=options,
        interceptors=security.interceptors(),
        maximum_concurrent_rpcs=max(1, cfg.max_concurrent_rpcs),
    )
    add_to_server(AnalyzerServicer(core), server)
    try:
        port = security.add_port(server, cfg.bind)
    except RuntimeError as exc:
        core.close()
        raise TransportError(f"cannot bind {cfg.bind}: {exc}") from None
    if port == 0:
        core.close()
        raise TransportError(f"cannot bind {cfg.bind}")
    try:
        start_extras(core, cfg)
    except (ConfigError, TransportError):
        core.close()
        raise
    server.start()
    stop = core.stopping
    thread = threading.Thread(
        target=_flush_loop, args=(core, cfg.flush_interval_s, stop), name="diag-flush", daemon=True
    )
    thread.start()
    core.background.append(thread)
    if cfg.triage_interval_s > 0:
        triage = threading.Thread(
            target=_triage_loop,
            args=(core, cfg.triage_interval_s, stop),
            name=TRIAGE_THREAD,
            daemon=True,
        )
        triage.start()
        core.background.append(triage)
    return server, port, core


def start_extras(core: AnalyzerCore, cfg: AnalyzerConfig) -> None:
    """The metrics endpoint (``cfg.metrics_port`` >= 0) and the alerter (a webhook or a command)
    of ``core``; both stop in :meth:`AnalyzerCore.release`. :class:`ConfigError` for bad alert
    settings, :class:`TransportError` when the metrics address cannot be bound."""
    from diag.analyzer.alerts import AlertConfig, Alerter

    alerts = AlertConfig(
        webhook=cfg.alert_webhook,
        command=cfg.alert_command,
        min_severity=cfg.alert_severity,
        per_hour=cfg.alert_per_hour,
    )
    if cfg.metrics_port >= 0:
        from diag.analyzer.metrics import job_registry
        from diag.transport.metrics_http import serve_metrics

        metrics = serve_metrics(job_registry(core), cfg.metrics_addr, cfg.metrics_port)
        core.metrics_url, core.metrics_port = metrics.url, metrics.port
        core.extras.append(metrics.close)
        log.info("job metrics on %s", metrics.url)
    if alerts.enabled:
        alerter = Alerter(alerts)

        def alert(result: TriageResult) -> None:
            alerter.observe(result.run, result.findings)

        core.listeners.append(alert)
        core.extras.append(alerter.close)


def join_background(core: AnalyzerCore, timeout_s: float = 30.0) -> bool:
    """After ``core.close()``: wait up to ``timeout_s`` for :func:`serve`'s threads to end (a
    live triage pass in flight finishes first); ``False`` if one is still running."""
    threads, core.background = core.background, []
    for t in threading.enumerate():
        if t.name in (TRIAGE_THREAD, TRIAGE_PASS_THREAD):
            _restore_priority(t)
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        log.warning("analyzer threads still running at exit: %s", ", ".join(alive))
    return not alive
