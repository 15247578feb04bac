"""Typed, frozen configuration for each component, and the one way to load it.

Precedence (later wins): the dataclass defaults, then a TOML file (``[hook]``, ``[daemon]``,
``[analyzer]`` tables), then ``DIAG_<SECTION>_<FIELD>`` environment variables (for example
``DIAG_DAEMON_GPU_BACKEND=fake``), then explicit overrides (CLI flags). Unknown keys in any layer
are a :class:`ConfigError`, never silently ignored.

``diag run`` configures the hook in every worker through that same layer
(``DIAG_HOOK_DAEMON_SOCK``, ``DIAG_HOOK_JOB_ID``); ``DIAG_HOST`` overrides the host name that the
hook and the daemon report.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, TypeVar

from diag.errors import ConfigError, InputError


def default_host() -> str:
    """This node's name as diag reports it: ``DIAG_HOST`` if set, else the host name."""
    return os.environ.get("DIAG_HOST") or socket.gethostname()


@dataclass(frozen=True, slots=True, kw_only=True)
class HookConfig:
    """The in-job hook. Sizes bound its memory; intervals bound its background work."""

    daemon_sock: str = ""  # Unix socket of the node daemon; "" = keep events, count them dropped
    job_id: str = ""
    host: str = ""  # "" = default_host()
    queue_max_events: int = 20_000  # bounded buffer; beyond it events are dropped and counted
    flush_interval_s: float = 0.2  # hook thread: send what is queued this often
    fr_poll_interval_s: float = 2.0  # longest pause between Flight Recorder harvests (adaptive)
    # the hook thread's work in slices of gil_slice_s, each followed by a pause that keeps its
    # share of the GIL near gil_share while it is busy (diag.hook.gil_share); 0 = unpaced
    gil_share: float = 0.25
    gil_slice_s: float = 0.001
    # raise the hook thread's own nice value by this much (Linux schedules threads apart): a
    # core the training thread also wants goes to it first; 0 = unchanged. Not the default: on a
    # host another process saturates, a low-priority hook thread would fall behind (README)
    thread_nice: int = 0
    # harvest the Flight Recorder through torch's control-plane server on a private Unix socket
    # (its C++ threads build the dump without the GIL; diag.hook.fr_server) instead of
    # _dump_fr_trace, which holds the GIL while it dumps the whole ring. Off by default: the
    # server adds torch's HTTP thread pool and c10d log lines to every rank, and on a 2-core
    # host its dump competes with the job for the cores (README, session 16)
    fr_dump_server: bool = False
    # dump the Flight Recorder through diag's native library (diag.hook.opstats: the same call,
    # with the GIL released while torch builds the dump) once it is built for this torch
    fr_dump_native: bool = True
    # and read the generic ring from the first entry a harvest needs, not dump it whole
    # (diag.hook.fr_dump: trusted once a read agrees with torch's dump); needs fr_dump_native
    fr_read_native: bool = True
    health_interval_s: float = 5.0
    reconnect_interval_s: float = 1.0
    capture_collectives: bool = True
    capture_checkpoints: bool = True
    # on a job that uses CUDA, time each step's compute/wait split with CUDA events as well
    # (diag.hook.device_timer: recorded on the current stream, read back without synchronizing)
    device_timing: bool = True
    capture_dataloader: bool = True
    # Profiler windows: taken at the same step index on every rank. Periodic ones at
    # profile_first_step, then every profile_every_steps steps (0 = no periodic windows);
    # on-demand ones when a request arrives from the daemon.
    profile_first_step: int = 20
    profile_every_steps: int = 1000
    profile_num_steps: int = 1
    # input shapes in periodic windows too (on-demand windows, the closed loop's and diag
    # profile's, always record them: diag replay reruns the heaviest GEMM shapes); off, a window
    # step costs the training thread ~2.5 instead of 3-6 us per recorded operator
    profile_record_shapes: bool = False
    # CPU operators in periodic windows on a rank that uses CUDA too (on-demand windows always
    # record them). Off, such a window records the device's activity only (kernels, copies, the
    # collectives' kernels: what the kernel detector compares there), and the training thread
    # pays nothing per operator (~0.5 us while recorded, ~1.3-2 us more at the stop on CPU)
    profile_cpu_ops_on_cuda: bool = False
    # periodic windows that record CPU operators (a rank without CUDA work, no shapes) count
    # them with diag's own RecordFunction observer (diag.hook.opstats: per-operator calls and
    # durations, ~0.3 us per call, no raw trace) where it is built for this torch, instead of
    # Kineto (~2-3 us per call, most of it at the stop); off = Kineto always
    profile_aggregate: bool = True
    # the backward's "local gradients done" mark (where its gradient sync's wait starts) in C++
    # once diag's native library is loaded (diag.hook.opstats), not a Python pre-hook and
    # callback: ~20 us less a backward on the training thread; a step timed on the device
    # (device_timing on a CUDA job) keeps the Python mark, which records the device's event too
    grads_done_native: bool = True
    opstats_lib: str = ""  # the observer's library ("" = diag's cache for this torch)
    # a window's stop first waits up to this long for gloo's worker threads to end the records of
    # the collectives it saw (diag.hook.c10d_workers: torch frees them at the stop, a late end
    # writes through a freed pointer); 0 = do not wait
    profile_settle_s: float = 0.1
    trace_dir: str = ""  # raw traces of the windows go here ("" = not kept)
    max_traces_per_rank: int = 20  # the oldest are deleted beyond this
    max_trace_bytes: int = 32 * 1024 * 1024  # a compressed trace larger than this is not kept
    # every thread's Python stack on a fatal signal (SIGSEGV, SIGABRT, ...) goes to a file here,
    # one per process (diag.hook.crash); "" = not enabled; a job that enabled faulthandler keeps it
    crash_dir: str = ""
    # Hang watchdog (diag.hook.watchdog): no step end and no collective completed for
    # max(hang_factor x p99 of recent step times, hang_min_s) -> one HangReport + every thread's
    # stack, once per stall (hang_min_s <= 0 turns it off).
    hang_min_s: float = 30.0
    hang_factor: float = 3.0
    # Numerics (diag.hook.numerics): the loss checked for NaN/Inf every step; gradient norm
    # and batch statistics every numerics_every steps; a checksum of the DDP replica's parameters
    # every fingerprint_every steps (0 turns either off); on the first non-finite loss, the step's
    # forward replayed under no_grad with module checks (nonfinite_replay) to name the module.
    numerics: bool = True
    numerics_every: int = 50
    fingerprint_every: int = 100
    fingerprint_max_elements: int = 1 << 24  # beyond this, a fixed strided sample per tensor
    batch_stats_max_elements: int = 1 << 20  # per tensor on sampled steps (strided beyond)
    nonfinite_replay: bool = True
    nonfinite_max_events: int = 8  # NonFinite episodes reported per process


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonConfig:
    """The per-node daemon: where it listens, where it sends, how it batches and spools."""

    listen_sock: str = ""  # Unix socket the local hooks connect to
    analyzer: str = ""  # host:port of the analyzer
    spool_dir: str = ""  # "" = <tmp>/diag-spool-<pid>
    job_id: str = ""
    host: str = ""
    batch_max_events: int = 5_000
    flush_interval_s: float = 0.5
    gpu_backend: str = "nvml"  # "nvml", "fake" or "none"
    fake_gpus: int = 0  # devices of the fake backend
    gpu_interval_s: float = 1.0
    host_interval_s: float = 1.0
    net_interval_s: float = 1.0  # the job's TCP connections and the node's ports (0 = off)
    state_interval_s: float = 0.25  # read the rank processes' states (stopped, I/O) this often
    clock_sync_interval_s: float = 10.0
    spool_max_bytes: int = 1024 * 1024 * 1024
    rpc_timeout_s: float = 5.0
    control_poll_interval_s: float = 0.25  # ask the analyzer for control requests this often
    rank_watch_interval_s: float = 0.25  # look for rank processes that are gone this often
    stack_tool: str = "py-spy"  # native stacks of every local rank on a hang ("" = none)
    stack_timeout_s: float = 10.0  # the most one py-spy dump may take
    # Prometheus /metrics (diag.daemon.metrics): off (-1), a port (0 = any free one), the address
    metrics_port: int = -1
    metrics_addr: str = "127.0.0.1"
    # collectives (diag.daemon.collsum): ship each one (raw), one summary per rank, step and group
    # with the raw rows kept here for a fetch (summary), or summary once the job has
    # collectives_min_world ranks (auto)
    collectives: str = "auto"
    collectives_min_world: int = 256
    collectives_raw_steps: int = 10
    collectives_retain_s: float = 600.0
    collectives_retain_max_bytes: int = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class AnalyzerConfig:
    """The analyzer service: its address and its run directory (the store)."""

    bind: str = "127.0.0.1:0"
    run_dir: str = ""
    flush_interval_s: float = 1.0
    triage_interval_s: float = 5.0  # run the detectors on the live run this often (0 = never)
    # the closed loop (diag.analyzer.autocapture): on | observe | off, at most one automatic
    # profiler window per job this often
    auto_capture: str = "on"
    auto_capture_interval_s: float = 120.0
    max_message_bytes: int = 64 * 1024 * 1024
    # who may call (diag.transport.security): a token file required on every RPC, TLS (with a
    # CA: mutual); a bind beyond loopback without a token is refused unless insecure
    token_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    insecure: bool = False
    max_concurrent_rpcs: int = 256  # calls beyond it are answered RESOURCE_EXHAUSTED
    # Prometheus /metrics of the job (diag.analyzer.metrics): off (-1), a port (0 = any free)
    metrics_port: int = -1
    metrics_addr: str = "127.0.0.1"
    # alerts (diag.analyzer.alerts): each new or escalated finding at alert_severity or above is
    # POSTed to the webhook / piped to the command (sh -c) as JSON; at most alert_per_hour
    alert_webhook: str = ""
    alert_command: str = ""
    alert_severity: str = "warning"
    alert_per_hour: int = 30


_SECTIONS: dict[str, type] = {
    "hook": HookConfig,
    "daemon": DaemonConfig,
    "analyzer": AnalyzerConfig,
}
T = TypeVar("T")


#: TOML values a field of each type accepts (bool is an int in Python: kept apart).
_ACCEPTS: dict[type, tuple[type, ...]] = {
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
}


def read_toml(path: str | Path, *, what: str) -> dict[str, Any]:
    """The parsed TOML file at ``path``; :class:`InputError` in one line naming ``what`` (e.g.
    "config file") if it cannot be read or is not TOML. The one TOML reader of the project."""
    import tomllib

    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
        raise InputError(f"cannot read {what} {path}: {reason}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses per nested array or table
        raise InputError(f"{path} is not valid TOML: nested too deeply") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise InputError(f"{path} is not valid TOML: {exc}") from None


def field_types(hint: Any) -> tuple[type, ...]:
    """The types a field annotated ``hint`` holds, ``None`` left out (TOML has no null)."""
    if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(t for a in typing.get_args(hint) if a is not NoneType for t in field_types(a))
    return (hint,)


def toml_values(cls: type, table: Mapping[str, Any], *, where: str, name: str) -> dict[str, Any]:
    """The values of one TOML ``table`` for the fields of dataclass ``cls``, type-checked: an
    ``int`` field takes a TOML integer, a ``float`` field an integer or a float (made a float),
    a ``bool`` field ``true``/``false``, a ``str`` field a string. An unknown key or a wrong type
    is a :class:`ConfigError` in one line starting with ``where`` (the file) and naming the table
    ``[name]`` and the key."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(f"{where}: unknown key {key!r} in [{name}] (known: {known})")
        types = field_types(hints[key])
        allowed = tuple(t for base in types for t in _ACCEPTS.get(base, ()))
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            want = " or ".join(getattr(t, "__name__", str(t)) for t in types)
            got = type(value).__name__
            raise ConfigError(f"{where}: [{name}] {key} = {value!r}: expected {want}, got {got}")
        coerce = float in types and int not in types and isinstance(value, int)
        out[key] = float(typing.cast(int, value)) if coerce else value
    return out


def _coerce(cls: type, key: str, raw: Any) -> Any:
    field = {f.name: f for f in dataclasses.fields(cls)}[key]
    kind = field.type if isinstance(field.type, str) else field.type.__name__
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{cls.__name__}.{key}: {raw!r} is not a valid {kind}") from None


def _apply(cls: type[T], values: dict[str, Any], layer: Mapping[str, Any], where: str) -> None:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key, raw in layer.items():
        if key not in names:
            raise ConfigError(
                f"unknown setting {key!r} in {where} (known: {', '.join(sorted(names))})"
            )
        values[key] = _coerce(cls, key, raw)


def load_config(
    section: str,
    *,
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Any:
    """Build the frozen config of ``section`` ("hook", "daemon" or "analyzer") from all layers."""
    if section not in _SECTIONS:
        raise ConfigError(f"unknown config section {section!r}")
    cls = _SECTIONS[section]
    values: dict[str, Any] = {}
    if file is not None:
        data = read_toml(file, what="config file")
        unknown = set(data) - set(_SECTIONS)
        if unknown:
            raise ConfigError(f"{file}: unknown section(s) {sorted(unknown)}")
        table = data.get(section, {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"{file}: {section} = {table!r} is not a table; use [{section}]")
        values.update(toml_values(cls, table, where=str(file), name=section))
    env = os.environ if env is None else env
    prefix = f"DIAG_{section.upper()}_"
    env_layer = {k[len(prefix) :].lower(): v for k, v in env.items() if k.startswith(prefix)}
    _apply(cls, values, env_layer, f"{prefix}* environment variables")
    if overrides:
        _apply(cls, values, {k: v for k, v in overrides.items() if v is not None}, "overrides")
    return cls(**values)
