"""The moving parts of ``diag run``: embedded analyzer, daemon subprocess, the job, the live view.

Every part that belongs to diag fails soft: if the analyzer or the daemon cannot start, the user
gets one line and the job runs without diagnostics. The job's own output passes through unchanged
(and is kept in ``logs/job.log``); the job's exit code is diag run's exit code.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import diag
from diag.errors import TransportError
from diag.schema import Event, RunEvent
from diag.transport import local

log = logging.getLogger(__name__)

INJECT_DIR = Path(__file__).resolve().parent.parent / "hook" / "inject"
PACKAGE_ROOT = Path(diag.__file__).resolve().parent.parent


@dataclass(slots=True)
class Launcher:
    """``diag run`` as an event source: ``<host>/launcher/<pid>``, numbering its events from 0."""

    host: str
    job_id: str
    pid: int = field(default_factory=os.getpid)
    seq: int = 0

    @property
    def source(self) -> str:
        return f"{self.host}/launcher/{self.pid}"

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    def send(self, sock_path: str, *events: Event) -> None:
        try:
            local.send_events(sock_path, list(events), sender=self.source)
        except TransportError as exc:
            print(f"diag run: {exc}", file=sys.stderr)


def _flag(command: list[str], *names: str) -> int:
    for i, arg in enumerate(command):
        for name in names:
            value = None
            if arg == name and i + 1 < len(command):
                value = command[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
            if value is not None:
                m = re.match(r"(\d+)", value)  # "--nnodes 1:2" counts the minimum
                return int(m.group(1)) if m else 0
    return 0


def run_event(
    launcher: Launcher,
    phase: str,
    *,
    command: list[str],
    exit_code: int = -1,
    duration_ns: int = 0,
) -> RunEvent:
    """The launcher's record of the run's start or end (torchrun's shape read from its flags)."""
    return RunEvent(
        ts_ns=time.time_ns(),
        host=launcher.host,
        job_id=launcher.job_id,
        source=launcher.source,
        seq=launcher.next_seq(),
        phase=phase,
        run_id=launcher.job_id,
        command=" ".join(command),
        nnodes=_flag(command, "--nnodes") or 1,
        nproc_per_node=_flag(command, "--nproc_per_node", "--nproc-per-node"),
        exit_code=exit_code,
        duration_ns=duration_ns,
    )


def write_run_json(out: Path, **fields: Any) -> None:
    """Merge ``fields`` into ``out/run.json`` (atomic replace)."""
    path = out / "run.json"
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
    data.update(fields)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


#: Kineto's log level above its per-window USDT and STAGE lines.
KINETO_QUIET = "6"


def worker_env(
    base: Mapping[str, str],
    *,
    daemon_sock: str,
    job_id: str,
    trace_dir: Path | None = None,
    crash_dir: Path | None = None,
) -> dict[str, str]:
    """The job's environment: the hook's ``sitecustomize`` first on ``PYTHONPATH``, its config."""
    env = dict(base)
    paths = [str(INJECT_DIR), str(PACKAGE_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["DIAG_HOOK"] = "1"
    env["DIAG_HOOK_DAEMON_SOCK"] = daemon_sock
    env["DIAG_HOOK_JOB_ID"] = job_id
    # Kineto prints "USDT: profiler_start/stop" (and "STAGE") lines on the job's stderr around
    # every profiler window diag opens: its level 6 keeps only what is above them. A user who
    # set the level keeps it.
    env.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)
    # NCCL collective start and end times in the Flight Recorder (each rank's arrival and the
    # collective's duration: the straggler without the compute/wait split); a user's own
    # setting, on or off, wins. Costs two CUDA events per collective; no effect on gloo.
    env.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
    if trace_dir is not None:
        env.setdefault("DIAG_HOOK_TRACE_DIR", str(trace_dir.resolve()))
    if crash_dir is not None:
        env.setdefault("DIAG_HOOK_CRASH_DIR", str(crash_dir.resolve()))
    return env


def build_opstats(out: Path, env: Mapping[str, str] | None = None) -> None:
    """Build diag's operator observer for this torch beside the job when it is not built yet
    (:mod:`diag.hook.opstats`: ~10 s of g++ in the background, once per torch; the hooks load it
    when it lands, their windows use Kineto until then). Not when the job's periodic windows
    will not use it (``DIAG_HOOK_PROFILE_AGGREGATE`` false, read as the hooks read it). Never
    fails the launch."""
    from diag.config import load_config
    from diag.hook import opstats

    try:
        if not load_config("hook", env=env).profile_aggregate:
            return
        opstats.build_in_background(out / "logs" / "opstats-build.log")
    except Exception as exc:
        log.debug("diag: the operator observer's build did not start: %s", exc)


def metrics_ports(args: Any) -> tuple[int, int]:
    """The node daemon's and the embedded analyzer's metrics ports from ``--metrics-port P``:
    P and P + 1 (0: a free port each; not given: -1, off)."""
    port = getattr(args, "metrics_port", None)
    if port is None or port < 0:
        return -1, -1
    return port, (port + 1 if port > 0 else 0)


def analyzer_settings(args: Any, metrics_port: int) -> dict[str, Any]:
    """The embedded analyzer's metrics and alert settings from the command's arguments."""
    from diag.cli.service_args import alert_overrides

    return {
        "metrics_port": metrics_port,
        "metrics_addr": getattr(args, "metrics_addr", None),
        **alert_overrides(args),
    }


class EmbeddedAnalyzer:
    """An analyzer served from this process on 127.0.0.1 (port chosen by the OS)."""

    def __init__(self, server: Any, port: int, core: Any, run_dir: Path) -> None:
        self._server = server
        self.port = port
        self._core = core
        self.run_dir = run_dir

    @classmethod
    def start(
        cls,
        run_dir: Path,
        detectors: Mapping[str, object] | None = None,
        *,
        auto_capture: str = "on",
        triage_interval_s: float = 5.0,
        settings: Mapping[str, Any] | None = None,
    ) -> EmbeddedAnalyzer:
        """Serve ``run_dir``; live and final triage use ``detectors`` (name -> config), the live
        one every ``triage_interval_s`` with the closed loop in mode ``auto_capture``.
        ``settings``: more :class:`~diag.config.AnalyzerConfig` fields (metrics, alerts; None
        values are left at their defaults). A job metrics endpoint is announced on stderr."""
        from diag.analyzer.service import serve
        from diag.config import AnalyzerConfig

        cfg = AnalyzerConfig(
            bind="127.0.0.1:0",
            run_dir=str(run_dir),
            triage_interval_s=triage_interval_s,
            auto_capture=auto_capture,
            **{k: v for k, v in (settings or {}).items() if v is not None},
        )
        server, port, core = serve(cfg, detectors=detectors)
        if core.metrics_url:
            print(f"diag: job metrics on {core.metrics_url}", file=sys.stderr, flush=True)
        return cls(server, port, core, run_dir)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def listen(self, listener: Callable[[Any], None]) -> None:
        """Call ``listener`` with every live triage result (a
        :class:`~diag.analyzer.core.TriageResult`), on the analyzer's triage thread; its
        failure is logged and costs the triage nothing."""
        self._core.listeners.append(listener)

    def summary(self) -> dict[str, Any] | None:
        try:
            return dict(self._core.summary_json())
        except Exception as exc:  # a half-written store must not break the live view
            log.debug("summary unavailable: %s", exc)
            return None

    def stop(self, spool_dir: Path | None = None) -> dict[str, Any] | None:
        """Stop serving, take in what our stopped daemon left in ``spool_dir`` (batches it could
        not deliver before it exited), fold everything into the store, run the detectors once
        more on the whole run (``findings.jsonl``) and return the summary with the findings."""
        from diag.analyzer.service import join_background

        self._server.stop(grace=2.0).wait(5.0)
        if spool_dir is not None:
            self.take_spool(spool_dir)
        self._core.close()
        join_background(self._core)
        try:
            self._core.publish_findings(self._core.triage(final=True).findings, live=False)
        except Exception as exc:  # the run is stored; only the findings are missing
            print(f"diag run: triage of the run failed: {exc}", file=sys.stderr)
        self._core.release()  # after the final triage: its alerts go out first
        return self.summary()

    def take_spool(self, spool_dir: Path) -> int:
        """Ingest the batches a stopped daemon left unacknowledged in ``spool_dir``, in order;
        the number taken. The analyzer is in this process and still open, so nothing the node
        sent is lost to a daemon that ran out of time (a loaded host: its ``Ingest`` calls ran
        past their deadline and a ``diag attach`` store lacked most of three ranks' steps).
        Batches delivered before are dropped as duplicates on (source, seq). A spool that
        cannot be read is reported in one line and left where it is."""
        from diag.daemon.spool import Spool
        from diag.errors import DiagError
        from diag.proto import diag_pb2 as pb

        if not (spool_dir / "cursor").exists():
            return 0
        taken = 0
        try:
            spool = Spool(spool_dir)
        except (DiagError, OSError) as exc:
            print(f"diag: the daemon's spool {spool_dir} was not read: {exc}", file=sys.stderr)
            return 0
        try:
            while (rec := spool.peek()) is not None:
                try:
                    self._core.ingest(pb.EventBatch.FromString(rec.payload), rec.payload)
                    taken += 1
                except Exception as exc:  # a bad batch is skipped, the rest still taken
                    log.warning("a spooled batch was not ingested: %s", exc)
                spool.ack(rec)
        finally:
            spool.close()
        if taken:
            log.info("took %d batch(es) the daemon left in %s", taken, spool_dir)
        return taken


class SummarySource:
    """Where the live view and the final table get the run summary from."""

    def __init__(self, embedded: EmbeddedAnalyzer | None, target: str | None) -> None:
        self._embedded = embedded
        self._target = target

    def get(self) -> dict[str, Any] | None:
        if self._embedded is not None:
            return self._embedded.summary()
        if not self._target:
            return None
        try:
            from diag.transport.client import AnalyzerClient

            with AnalyzerClient(self._target, timeout_s=3.0) as client:
                return dict(json.loads(client.summary()))
        except Exception as exc:
            log.debug("summary from %s unavailable: %s", self._target, exc)
            return None


def start_daemon(
    *,
    listen_sock: str,
    analyzer: str,
    spool_dir: Path,
    log_path: Path,
    job_id: str,
    gpu_backend: str,
    fake_gpus: int,
    wait_s: float = 20.0,
    metrics_port: int = -1,
    metrics_addr: str | None = None,
) -> subprocess.Popen[bytes] | None:
    """Start ``diag daemon`` as a subprocess, wait for its socket; None (one line) if it fails.
    ``metrics_port`` >= 0: the daemon serves the node's metrics there (0: a free port), and the
    endpoint is announced on stderr once bound."""
    port_file = Path(listen_sock + ".metrics-port")
    cmd = [
        sys.executable, "-m", "diag.cli.main", "daemon",
        "--listen", listen_sock,
        "--analyzer", analyzer,
        "--spool", str(spool_dir),
        "--job-id", job_id,
        "--gpu-backend", gpu_backend,
        "--fake-gpus", str(fake_gpus),
        "--exit-with", str(os.getpid()),
    ]  # fmt: skip
    if metrics_port >= 0:
        cmd += ["--metrics-port", str(metrics_port), "--metrics-port-file", str(port_file)]
        if metrics_addr:
            cmd += ["--metrics-addr", metrics_addr]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
    logf = open(log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
    proc = subprocess.Popen(
        cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    logf.close()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if os.path.exists(listen_sock) and (metrics_port < 0 or port_file.exists()):
            if metrics_port >= 0:
                port = port_file.read_text().strip()
                host = metrics_addr or "127.0.0.1"
                print(f"diag: node metrics on http://{host}:{port}/metrics", file=sys.stderr,
                      flush=True)  # fmt: skip
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    print(
        f"diag run: the node daemon did not start (see {log_path}); running without diagnostics",
        file=sys.stderr,
    )
    if proc.poll() is None:
        proc.kill()
    return None


def stop_daemon(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """Ask the daemon to flush and exit; kill it if it does not within ``timeout_s``."""
    if proc.poll() is not None:
        if proc.returncode not in (0, -signal.SIGTERM):
            print(f"diag run: the node daemon had exited with {proc.returncode}", file=sys.stderr)
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        print("diag run: the node daemon did not stop in time; killed it", file=sys.stderr)
        proc.kill()
        proc.wait()


LineSink = Callable[[str, bool], None]


class Job:
    """The user's command: its output passed through (and kept in a log), its exit code returned."""

    def __init__(self, proc: subprocess.Popen[bytes], log_file: IO[bytes]) -> None:
        self.proc = proc
        self._log = log_file
        self._lock = threading.Lock()
        self.sink: LineSink = _plain_sink
        self._threads = [
            threading.Thread(target=self._pump, args=(proc.stdout, False), daemon=True),
            threading.Thread(target=self._pump, args=(proc.stderr, True), daemon=True),
        ]
        for t in self._threads:
            t.start()

    @classmethod
    def start(cls, command: list[str], *, env: Mapping[str, str], log_path: Path) -> Job:
        try:
            proc = subprocess.Popen(
                command, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as exc:
            from diag.errors import ConfigError

            raise ConfigError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
        return cls(proc, open(log_path, "ab"))

    def _pump(self, stream: IO[bytes] | None, is_err: bool) -> None:
        if stream is None:
            return
        for raw in iter(stream.readline, b""):
            with self._lock:
                self._log.write(raw)
                # Line by line: a user tailing logs/job.log (or a harness acting at a step) sees
                # each line when the job prints it, not 8 KiB later.
                self._log.flush()
            # The display must never stall the job's pipes.
            with contextlib.suppress(Exception):
                self.sink(raw.decode(errors="replace").rstrip("\n"), is_err)

    def forward_signal(self, signum: int, _frame: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self) -> int:
        code = self.proc.wait()
        for t in self._threads:
            t.join(timeout=5.0)
        self._log.close()
        return 128 - code if code < 0 else code  # killed by signal N -> 128 + N, as shells do


def _plain_sink(line: str, is_err: bool) -> None:
    stream = sys.stderr if is_err else sys.stdout
    stream.write(line + "\n")
    stream.flush()


def watch(job: Job, source: SummarySource, *, live: bool, refresh_s: float = 1.0) -> int:
    """Wait for the job; on a terminal show the live view above which the job's output scrolls."""
    if not live:
        try:
            return job.wait()
        except KeyboardInterrupt:
            return job.wait()
    from rich.live import Live

    from diag.cli.render import tables
    from diag.cli.render.console import stdout_console

    console = stdout_console()
    job.sink = functools.partial(_job_line, console)
    start = time.monotonic()
    history: list[tuple[float, int]] = []
    initial = tables.live(None, elapsed_s=0, steps_per_s=None)
    with Live(initial, console=console, transient=True) as view:
        while job.poll() is None:
            try:
                time.sleep(refresh_s)
            except KeyboardInterrupt:
                break
            summary = source.get()
            now = time.monotonic()
            steps = int((summary or {}).get("run", {}).get("steps", 0) or 0)
            history = [*history[-10:], (now, steps)]
            rate = None
            if len(history) >= 2 and history[-1][0] > history[0][0]:
                rate = (history[-1][1] - history[0][1]) / (history[-1][0] - history[0][0])
            view.update(tables.live(summary, elapsed_s=now - start, steps_per_s=rate))
    return job.wait()


def _job_line(console: Any, line: str, is_err: bool) -> None:
    """One line of the job's output under the live view: on a terminal above the view (rich
    keeps the view at the bottom); piped, as the job wrote it, to the stream it wrote it to
    (never wrapped at the console's width, stderr never merged into stdout)."""
    if console.is_terminal:
        console.print(line, markup=False, highlight=False)
        return
    _plain_sink(line, is_err)


def print_final(summary: Mapping[str, Any] | None, *, out: Path, exit_code: int) -> None:
    from diag.cli.render import tables
    from diag.cli.render.console import stdout_console

    # A report piped to a file or a pager still gets room for its columns.
    console = stdout_console()
    if summary:
        console.print(tables.report(summary))
    else:
        console.print("diag: no summary available (the analyzer was not reachable)")
    steps = sum(int(r.get("steps") or 0) for r in (summary or {}).get("ranks", []))
    if exit_code != 0 and steps == 0:
        _print_job_tail(console, out / "logs" / "job.log")
    console.print(verdict(summary), markup=False)
    console.print(f"run directory: {out}   job exit code: {exit_code}", markup=False)
    console.print(
        f"next: diag triage {out} [--html report.html]   |   diag report {out} --kernels   |   "
        f"diag trace {out}  (a Perfetto timeline)",
        markup=False,
    )


def verdict(summary: Mapping[str, Any] | None) -> str:
    """The run in one sentence: its top finding, or that none was found in how much."""
    if not summary:
        return "verdict: unknown (no summary)"
    findings = summary.get("findings") or []
    if findings:
        top = findings[0]
        more = f" (+{len(findings) - 1} more: diag triage)" if len(findings) > 1 else ""
        level, cause = top.get("severity", "?"), top.get("cause", "?")
        return f"verdict: {level} {cause}: {top.get('summary', '')}{more}"
    ranks = summary.get("ranks") or []
    steps = max((int(r.get("steps") or 0) for r in ranks), default=0)
    if not ranks:
        return "verdict: no rank reported a step: nothing to judge"
    from diag.cli.render import tables

    return tables.verdict_line((), steps, len(ranks), summary.get("run")).plain


#: Lines of the job's log shown when it failed before any step.
JOB_TAIL_LINES = 20


def _print_job_tail(console: Any, log: Path) -> None:
    """The end of the job's own output: a job that failed before its first step (a typo, an
    import error) would otherwise leave only an empty table."""
    try:
        with log.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            lines = fh.read().decode("utf-8", "replace").splitlines()[-JOB_TAIL_LINES:]
    except OSError:
        return
    if lines:
        console.print(f"the job failed before its first step; the end of {log}:", markup=False)
        for line in lines:
            console.print("  " + line, markup=False, highlight=False)
