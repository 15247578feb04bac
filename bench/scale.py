"""Analysis cost at scale: one window of per-step summaries from 1,024 and 16,384 ranks.

For each world size a seeded synthetic window of ``--steps`` steps (default 50) is generated the
way a synchronous data-parallel job behaves (see ``tests/fakes/scenarios.py``): every rank
loads data, computes and meets its peers in the collectives, so its collective wait is the
slowest rank's busy time minus its own. Ranks live 8 to a host. Two culprits are injected with
their onsets inside the window: one slow rank (compute +``--rank-extra`` from step ``steps // 2``
+ 5) and one slow host (all 8 ranks' compute +``--host-extra`` from step ``steps // 2 - 5``).

The events are real :class:`~diag.schema.StepEvent` s, encoded with
:func:`diag.transport.codec.batch_to_proto` in batches of ``--batch`` events by a generator
process, which writes each batch's bytes to a file (``--batches DIR`` keeps the files for later
runs); the analyzer's process then reads them, parses each (``EventBatch.FromString``, as its
gRPC server does; timed apart as "parse") and feeds it through the real analyzer path,
``AnalyzerCore(RunStore.create(tmp)).ingest(batch)`` (decode, dedup, WAL with fsync, buffer),
flushed to Parquet as the analyzer's flush thread does (after each ``--flush-every-s`` seconds
of parsing and ingesting, its ``flush_interval_s``; ``--flush-every N``: every N-th step, as
up to session 14), once per ``--wire``: ``rows`` (one proto message
per event) and ``columns`` (the batch as column blocks,
:func:`diag.transport.codec.with_columns`, as a daemon ships to an analyzer of schema >= 1.13),
each in a process and a store of its own, so the ingest rates compare in one run (the conversion
is counted as encoding: the node pays it). Then, on the last wire's store, it times:

- ``core.triage()`` end to end (features + every detector + the run summary; the first read of
  the Parquet parts is paid here);
- the split, each timed on its own afterwards (parts cached, as the analyzer's periodic triage
  sees them): ``Features.from_store``, each entry of ``DETECTORS``, and ``summarize`` (the run
  section triage attaches). "analysis" = features + detectors;
- the next live-triage pass: one more step of every rank ingested (on the same flush
  cadence, as in a live run) and ``core.live_triage()`` (the screen,
  :mod:`diag.analyzer.screen`: it keeps the last full pass's findings when the new steps show
  nothing new), and a full ``core.triage()``
  on the same store for comparison;
- then a third rank computes ``--rank-extra`` ms longer for 8 more steps: the next
  ``core.live_triage()``, the screen's reason for a full pass, and whether it names that rank;
- peak RSS (``ru_maxrss``) after ingest and after analysis;
- whether the injected culprits are named: the top-ranked finding is one of them (top-1), and
  each culprit appears in some finding (the slow host as one whole-host finding).

Before the world sizes, what one rank-step costs on the wire to the analyzer as the daemon ships
it today, for a job whose ranks issue ``--collectives-per-step`` collectives a step (an FSDP-like
mix: all-gathers and reduce-scatters in an 8-rank shard group, all-reduces across replicas, a few
p2p sends): one host's 8 ranks for 10 steps, every Flight Recorder entry a ``CollectiveEvent``
beside the ``StepEvent``, encoded as column blocks in batches of the daemon's
``batch_max_events``: events and bytes per rank-step, and what that is at 131,072 ranks and one
step a second (the reason node-side summaries are wanted, issue 17).

Each world size and wire runs in its own child process so each peak RSS is the analyzer's own
(the generator's millions of event objects never share its heap). Everything runs in one
Python thread, so on one core. Measured numbers only, no asserts. The goal this measures against:
an analysis window over 16,384 ranks in <= 5 s on one core.

With ``--stages``, the resident size's high-water mark per stage (:class:`StageMemory`): the
ingest, each pass, and inside a pass the store's fold, the run summary, the features, each
detector and the reconciliation; where a pass's memory goes.

    .venv/bin/python bench/scale.py [--ranks 1024 16384] [--steps 50] [--wire rows columns]
        [--summaries] [--stages]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag import schema
from diag.analyzer.core import AnalyzerCore
from diag.config import AnalyzerConfig
from diag.diagnose.detectors.registry import DEFAULT_CONFIGS, DETECTORS
from diag.diagnose.features import Features
from diag.proto import diag_pb2 as pb
from diag.store.run_store import RunStore
from diag.store.summary import summarize
from diag.transport import codec

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
RANKS_PER_HOST = 8


def host_of(rank: int) -> str:
    return f"node{rank // RANKS_PER_HOST:05d}"


class Window:
    """The synthetic window: which culprits, when, and the events step by step."""

    def __init__(self, args: argparse.Namespace, ranks: int) -> None:
        self.ranks = ranks
        self.steps = args.steps
        self.seed = args.seed
        self.compute_ms, self.data_ms, self.comm_ms = 100.0, 5.0, 20.0
        self.noise = 0.03
        self.warmup_steps, self.warmup_factor = 3, 3.0
        num_hosts = ranks // RANKS_PER_HOST
        # Culprits away from rank 0 and host 0 (and from each other).
        self.slow_host = host_of((num_hosts * 2 // 3) * RANKS_PER_HOST)
        self.host_ranks = [r for r in range(ranks) if host_of(r) == self.slow_host]
        self.slow_rank = ranks // 3 + 1
        self.news_rank = ranks // 6 + 3
        self.host_onset = args.steps // 2 - 5
        self.rank_onset = args.steps // 2 + 5
        self.host_extra = args.host_extra
        self.rank_extra = args.rank_extra
        self._seq = [0] * ranks
        # --summaries: each rank's collectives of a step as its daemon ships them at fleet scale
        # (schema 1.17): one CollectiveSummary for its 8-rank shard group, one for its replica
        # group (the ranks of its local index across hosts), under its host's daemon source
        self.summaries = args.summaries
        self._daemon_seq = [0] * max(num_hosts, 1)

    def step_events(
        self, step: int, rng: np.random.Generator, t: int, also_slow: tuple[int, ...] = ()
    ) -> tuple[list, int]:
        n = self.ranks
        compute = self.compute_ms * (1 + self.noise * rng.standard_normal(n))
        data = self.data_ms * (1 + self.noise * rng.standard_normal(n))
        if step < self.warmup_steps:
            compute *= self.warmup_factor
        if step >= self.host_onset:
            compute[self.host_ranks] += self.host_extra
        if step >= self.rank_onset:
            compute[self.slow_rank] += self.rank_extra
        for r in also_slow:
            compute[r] += self.rank_extra
        busy = compute + data
        wait = busy.max() - busy + self.comm_ms
        dur_ms = float(busy.max() + self.comm_ms)
        dur = int(dur_ms * MS)
        out = []
        for r in range(n):
            c, w = float(compute[r]), float(wait[r])
            seq = self._seq[r]
            self._seq[r] = seq + 1
            out.append(
                schema.StepEvent(
                    ts_ns=t + dur,
                    host=host_of(r),
                    rank=r,
                    local_rank=r % RANKS_PER_HOST,
                    job_id="scale",
                    source=f"{host_of(r)}/rank{r}/{1000 + r}",
                    seq=seq,
                    step=step,
                    start_ns=t,
                    end_ns=t + dur,
                    duration_ns=dur,
                    data_wait_ns=int(data[r] * MS),
                    forward_ns=int(c * 0.3 * MS),
                    backward_ns=int((c * 0.6 + w) * MS),
                    optimizer_ns=int(c * 0.1 * MS),
                    compute_ns=int(c * MS),
                    collective_wait_ns=int(w * MS),
                    loss=1.0,
                    num_backward=1,
                    num_collectives=3,
                )
            )
        if self.summaries:
            out += self._summaries(step, t, wait)
        return out, t + dur

    def _summaries(self, step: int, t: int, wait_ms: np.ndarray) -> list:
        out = []
        for r in range(self.ranks):
            host = r // RANKS_PER_HOST
            w = int(wait_ms[r] * MS)
            for pg, size, calls, nbytes in (
                ("1", RANKS_PER_HOST, 96, 96 * 33_554_432),
                ("2", self.ranks // RANKS_PER_HOST, 8, 8 * 67_108_864),
            ):
                seq = self._daemon_seq[host]
                self._daemon_seq[host] = seq + 1
                out.append(
                    schema.CollectiveSummary(
                        ts_ns=t + w,
                        host=host_of(r),
                        rank=r,
                        local_rank=r % RANKS_PER_HOST,
                        job_id="scale",
                        source=f"{host_of(r)}/daemon/1.0",
                        seq=seq,
                        step=step,
                        pg_name=pg,
                        pg_size=size,
                        num_collectives=calls,
                        num_bytes=nbytes,
                        first_enqueue_ns=t,
                        last_enqueue_ns=t + w,
                        mean_enqueue_ns=t + w // 2,
                        first_seq_id=step * calls,
                        last_seq_id=step * calls + calls - 1,
                    )
                )
        return out

    def batches(self, batch_size: int) -> Iterator[tuple[int, list]]:
        """(step, events) chunks of at most ``batch_size`` events, step by step."""
        rng = np.random.default_rng(self.seed)
        t = T0
        for step in range(self.steps):
            events, t = self.step_events(step, rng, t)
            for i in range(0, len(events), batch_size):
                yield step, events[i : i + batch_size]
        self.t_end = t

    def next_step(self) -> list:
        """The step after the window (after :meth:`batches` ran): what a live triage's next
        pass finds new."""
        events, self.t_end = self.step_events(
            self.steps, np.random.default_rng(-1 % 2**32), self.t_end
        )
        return events

    def news(self, num_steps: int) -> Iterator[list]:
        """``num_steps`` steps after :meth:`next_step` in which a third rank (``news_rank``)
        also computes ``rank_extra`` ms longer: what the next live pass must not miss."""
        rng = np.random.default_rng(-2 % 2**32)
        for step in range(self.steps + 1, self.steps + 1 + num_steps):
            events, self.t_end = self.step_events(step, rng, self.t_end, (self.news_rank,))
            yield events


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def culprits(findings, win: Window) -> dict:
    """Which injected culprits the findings name, and whether the top finding is one."""

    def is_host(f) -> bool:
        return set(f.ranks) == set(win.host_ranks) and win.slow_host in f.hosts

    def is_rank(f) -> bool:
        return tuple(f.ranks) == (win.slow_rank,)

    top = findings[0] if findings else None
    return {
        "num_findings": len(findings),
        "top1": None if top is None else top.id,
        "top1_correct": top is not None and (is_host(top) or is_rank(top)),
        "slow_host_named": any(is_host(f) for f in findings),
        "slow_rank_named": any(is_rank(f) for f in findings),
        "others": [f.id for f in findings if not (is_host(f) or is_rank(f))][:5],
        "found": [
            {
                "id": f.id,
                "cause": f.cause,
                "onset": f.onset_step,
                "slowdown": round(f.slowdown, 3),
                "conf": round(f.confidence, 3),
            }
            for f in findings[:4]
        ],
    }


BATCH_HEADER = struct.Struct("<iI")  # a batch's step (the flush schedule) and its length


def batch_file(gen_dir: str, name: str) -> str:
    return os.path.join(gen_dir, f"{name}.batches")


def write_batch(fh: Any, step: int, batch: Any) -> int:
    payload = batch.SerializeToString()
    fh.write(BATCH_HEADER.pack(step, len(payload)))
    fh.write(payload)
    return len(payload)


def read_batches(path: str) -> Iterator[tuple[int, bytes]]:
    """``(step, payload)`` of each batch :func:`generate` wrote to ``path``, in order."""
    with open(path, "rb") as fh:
        while header := fh.read(BATCH_HEADER.size):
            step, size = BATCH_HEADER.unpack(header)
            yield step, fh.read(size)


def encode(events: list, wire: str) -> Any:
    batch = codec.batch_to_proto(events, sender="bench", sent_ns=T0)
    return codec.with_columns(batch) if wire == "columns" else batch


def generate(args: argparse.Namespace, ranks: int, gen_dir: str) -> dict:
    """The window's batches, encoded once per wire, into files under ``gen_dir`` (this runs in a
    process of its own: the millions of event objects and messages it builds are never in the
    analyzer's process), then the next step and the 8 steps of news on the last wire."""
    win = Window(args, ranks)
    gen_s = 0.0
    enc_s = dict.fromkeys(args.wire, 0.0)
    size = dict.fromkeys(args.wire, 0)
    files = {w: open(batch_file(gen_dir, w), "wb") for w in args.wire}  # noqa: SIM115
    t0 = time.perf_counter()
    for step, events in win.batches(args.batch):
        for wire in args.wire:
            batch, dt = timed(encode, events, wire)
            enc_s[wire] += dt
            size[wire] += write_batch(files[wire], step, batch)
    for fh in files.values():
        fh.close()
    gen_s = time.perf_counter() - t0 - sum(enc_s.values())
    with open(batch_file(gen_dir, "next"), "wb") as fh:
        write_batch(fh, args.steps, encode(win.next_step(), args.wire[-1]))
    with open(batch_file(gen_dir, "news"), "wb") as fh:
        for i, events in enumerate(win.news(8)):
            write_batch(fh, args.steps + 1 + i, encode(events, args.wire[-1]))
    return {"generate_s": gen_s, "encode_s": enc_s, "bytes": size}


def ingest_window(args: argparse.Namespace, gen_dir: str, wire: str, tmp: str) -> tuple:
    """The window's batches on ``wire`` (:func:`generate`) through a fresh analyzer core, each
    parsed from its bytes as the analyzer's gRPC server does: ``(core, figures)``."""
    parse_s = ingest_s = flush_s = 0.0
    num_events = num_bytes = 0
    core = AnalyzerCore(RunStore.create(tmp))
    cadence = Cadence(args)
    for step, payload in read_batches(batch_file(gen_dir, wire)):
        if cadence.due(step):
            _, dt = timed(core.flush)
            flush_s += dt
        batch, dt = timed(pb.EventBatch.FromString, payload)
        parse_s += dt
        cadence.ran(dt)
        num_bytes += len(payload)
        del payload
        result, dt = timed(core.ingest, batch)
        ingest_s += dt
        cadence.ran(dt)
        num_events += result.num_accepted
    _, dt = timed(core.flush)
    flush_s += dt
    return core, {
        "events": num_events,
        "parse_s": parse_s,
        "ingest_s": ingest_s,
        "ingest_events_per_s": num_events / ingest_s,
        "flush_s": flush_s,
        "bytes_per_event": num_bytes / max(num_events, 1),
    }


def ship_file(core: AnalyzerCore, path: str, args: argparse.Namespace) -> None:
    """The batches of ``path`` parsed and ingested, flushed on the bench's cadence."""
    cadence = Cadence(args)
    for step, payload in read_batches(path):
        if cadence.due(step):
            core.flush()
        t = time.perf_counter()
        core.ingest(pb.EventBatch.FromString(payload))
        cadence.ran(time.perf_counter() - t)


class Cadence:
    """When the bench flushes, as the analyzer's flush thread does: once ``--flush-every-s``
    seconds of parsing and ingesting (the analyzer's ``flush_interval_s``, 1 s) have passed since
    the last flush (a thread beside the ingest in the analyzer; here between two batches), or,
    with ``--flush-every N``, at every N-th step."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.every_steps = int(getattr(args, "flush_every", 0) or 0)
        self.every_s = float(getattr(args, "flush_every_s", AnalyzerConfig().flush_interval_s))
        self.last_step = -1
        self.busy_s = 0.0

    def ran(self, seconds: float) -> None:
        self.busy_s += seconds

    def due(self, step: int) -> bool:
        new_step, self.last_step = step != self.last_step and self.last_step >= 0, step
        if self.every_steps > 0:
            return new_step and step % self.every_steps == 0
        if self.busy_s < self.every_s:
            return False
        self.busy_s = 0.0
        return True


class StageMemory:
    """``--stages``: the resident size's high-water mark per stage of the run, from a thread that
    reads ``/proc/self/statm`` every ``period_s`` (5 ms: a GIL hand-off 200 times a second, so
    the timings of a ``--stages`` run are not the plain run's). The stages are the bench's
    (ingest, each pass) and, inside a pass, the analyzer's own steps, labelled by wrapping them
    in this process: the store's flush and fold, the run summary, the features, each detector
    and the reconciliation. A stage's peak includes what earlier stages left held."""

    def __init__(self, period_s: float = 0.005) -> None:
        import threading

        self.period_s = period_s
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.stage = "setup"
        self.peaks: dict[str, float] = {}
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            with open("/proc/self/statm") as fh:
                mib = int(fh.read().split()[1]) * self.page / 2**20
            stage = self.stage
            if mib > self.peaks.get(stage, 0.0):
                self.peaks[stage] = mib
            time.sleep(self.period_s)

    def enter(self, stage: str) -> None:
        self.peaks.setdefault(stage, 0.0)
        self.stage = stage

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def labelled(*a: Any, **kw: Any) -> Any:
            outer = self.stage
            self.enter(f"{outer.split(' / ')[0]} / {name}")
            try:
                return fn(*a, **kw)
            finally:
                self.stage = outer

        return labelled

    def label_analyzer(self) -> None:
        """Wrap the analyzer's steps (this process only: the bench's child)."""
        import diag.analyzer.core as analyzer_core
        import diag.diagnose.detectors.registry as registry

        analyzer_core.summarize = self.wrap("summary", analyzer_core.summarize)
        from_store = Features.from_store.__func__  # type: ignore[attr-defined]
        analyzer_core.Features.from_store = classmethod(self.wrap("features", from_store))  # type: ignore[method-assign,assignment]
        for name, detect in list(registry.DETECTORS.items()):
            registry.DETECTORS[name] = self.wrap(name, detect)
        registry.reconcile = self.wrap("reconcile", registry.reconcile)
        RunStore.fold = self.wrap("fold", RunStore.fold)  # type: ignore[method-assign]
        RunStore.flush = self.wrap("flush", RunStore.flush)  # type: ignore[method-assign]


def ingest_only(args: argparse.Namespace, ranks: int, wire: str) -> dict:
    """A child's work for a wire other than the last: its ingest alone, into its own store."""
    with tempfile.TemporaryDirectory(prefix="diag-scale-") as tmp:
        core, figures = ingest_window(args, args.gen_dir, wire, tmp)
        core.close()
    return {**figures, "rss_after_ingest_mib": rss_mib()}


def run_one(args: argparse.Namespace, ranks: int) -> dict:
    """The analyzer's process: the last wire's batches ingested, then the passes."""
    win = Window(args, ranks)  # its facts only: the events come from the generator's files
    res: dict = {
        "ranks": ranks,
        "hosts": ranks // RANKS_PER_HOST,
        "steps": args.steps,
        "slow_rank": win.slow_rank,
        "slow_host": win.slow_host,
        "host_onset": win.host_onset,
        "rank_onset": win.rank_onset,
        "wires": {},
        "summaries": args.summaries,
    }
    mem = StageMemory() if args.stages else None
    if mem is not None:
        mem.label_analyzer()
        mem.enter("ingest")
    with tempfile.TemporaryDirectory(prefix="diag-scale-") as tmp:
        core, figures = ingest_window(args, args.gen_dir, args.wire[-1], tmp)
        res["wires"][args.wire[-1]] = figures
        res.update(figures, wire=args.wire[-1], rss_after_ingest_mib=rss_mib())
        if mem is not None:
            mem.enter("pass 1, full")
        triage, res["triage_s"] = timed(core.triage)
        if mem is not None:
            mem.enter("the split, timed apart")
        features, res["features_s"] = timed(Features.from_store, core.store)
        det: dict[str, float] = {}
        for name, detect in DETECTORS.items():
            _, det[name] = timed(detect, features, DEFAULT_CONFIGS[name])
        res["detectors_s"] = det
        del features  # the analyzer holds none between passes: nor does the bench
        _, res["summarize_s"] = timed(summarize, core.store)
        res["analysis_s"] = res["features_s"] + sum(det.values())

        # one more step arrives (buffered, as in a live run): the next live-triage pass
        if mem is not None:
            mem.enter("pass 2, live, one more step")
        ship_file(core, batch_file(args.gen_dir, "next"), args)
        _, res["next_pass_s"] = timed(core.live_triage)
        res["next_pass_verdict"] = core.last_verdict.reason if core.last_verdict else ""
        res["next_pass_screened"] = core.num_screened_passes
        if mem is not None:
            mem.enter("pass 3, full")
        _, res["next_full_pass_s"] = timed(core.triage)
        if mem is not None:
            mem.enter("pass 4, live, 8 more steps")
        # a third rank slows down: the screen must make the next live pass a full one
        ship_file(core, batch_file(args.gen_dir, "news"), args)
        news, res["news_pass_s"] = timed(core.live_triage)
        res["news_verdict"] = core.last_verdict.reason if core.last_verdict else ""
        res["news_named"] = any(win.news_rank in f.ranks for f in news.findings)
        res["news_rank"] = win.news_rank
        res["rss_peak_mib"] = rss_mib()
        if mem is not None:
            time.sleep(2 * mem.period_s)
            res["stage_peaks_mib"] = {k: round(v) for k, v in mem.peaks.items() if v}
        res.update(culprits(list(triage.findings), win))
        core.close()
    return res


def shipped_per_rank_step(collectives: int, steps: int = 10) -> dict:
    """Events and bytes per rank-step on the daemon -> analyzer wire (column blocks)."""
    from diag.config import DaemonConfig

    max_events = DaemonConfig().batch_max_events
    ranks = RANKS_PER_HOST
    from diag.daemon.collsum import CollectiveSummarizer, SummaryConfig

    # kind -> [events, bytes]; "summary": the same collectives through the daemon's summarizer
    per_kind = {"step": [0, 0], "collective": [0, 0], "summary": [0, 0]}
    summarizer = CollectiveSummarizer(SummaryConfig(mode="summary", raw_steps=0))
    sum_cpu = 0.0
    seq = [0] * ranks
    coll_seq = 0
    mix = ("_allgather_base", "_reduce_scatter_base", "allreduce", "send")
    for step in range(steps):
        t = T0 + step * 50 * MS
        step_events: list = []
        for kind in ("step", "collective"):
            events: list = []
            for r in range(ranks):
                common = dict(
                    host=host_of(r),
                    rank=r,
                    local_rank=r,
                    job_id="scale",
                    source=f"{host_of(r)}/rank{r}/{1000 + r}",
                )
                if kind == "step":
                    events.append(
                        schema.StepEvent(
                            ts_ns=t + 50 * MS,
                            seq=seq[r],
                            step=step,
                            start_ns=t,
                            end_ns=t + 50 * MS,
                            duration_ns=50 * MS,
                            data_wait_ns=2 * MS,
                            forward_ns=15 * MS,
                            backward_ns=28 * MS,
                            optimizer_ns=5 * MS,
                            compute_ns=40 * MS,
                            collective_wait_ns=8 * MS,
                            loss=2.5,
                            num_backward=1,
                            num_collectives=collectives,
                            cpu_wait_ns=100_000,
                            **common,
                        )
                    )
                    seq[r] += 1
                    continue
                for i in range(collectives):
                    op = mix[0 if i % 25 < 12 else 1 if i % 25 < 24 else 2 if i % 50 == 24 else 3]
                    shard = op != "allreduce"
                    start = t + i * 200_000
                    events.append(
                        schema.CollectiveEvent(
                            ts_ns=start + 150_000,
                            seq=seq[r],
                            step=step,
                            op=op,
                            pg_name="1" if shard else "2",
                            pg_desc="fsdp_shard" if shard else "replicate",
                            pg_size=8 if shard else 16384,
                            seq_id=coll_seq + i,
                            p2p_seq_id=i if op == "send" else -1,
                            is_p2p=op == "send",
                            num_bytes=33_554_432,
                            dtype="BFloat16",
                            enqueue_ns=start - 20_000,
                            start_ns=start,
                            end_ns=start + 150_000,
                            duration_ns=150_000,
                            state="completed",
                            origin="fr",
                            **common,
                        )
                    )
                    seq[r] += 1
            if kind == "step":
                step_events = events
            else:  # what the summarizer makes of them, timed (the daemon's CPU per collective)
                batch = events + step_events
                protos = codec.events_to_protos(batch)  # as the daemon has them, decoded
                cpu0 = time.thread_time()
                held, summaries = summarizer.take(batch, protos)
                sum_cpu += time.thread_time() - cpu0
                assert len(held) == len(events)
                stamped = [  # as the daemon relays them: its source, its next seq
                    dataclasses.replace(e, source="h0/daemon/1.0", seq=step * 1000 + i)
                    for i, e in enumerate(summaries)
                ]
                _ship(per_kind["summary"], stamped, max_events, t)
            _ship(per_kind[kind], events, max_events, t)
        coll_seq += collectives
    rank_steps = ranks * steps
    out = {
        k: {"events": v[0] / rank_steps, "bytes": v[1] / rank_steps} for k, v in per_kind.items()
    }
    out["collectives_per_step"] = collectives
    out["summarize_us_per_collective"] = sum_cpu * 1e6 / (rank_steps * collectives)
    out["retained_bytes_per_collective"] = summarizer.stats().retained_bytes / (
        rank_steps * collectives
    )
    return out


def _ship(tally: list[int], events: list, max_events: int, t: int) -> None:
    for i in range(0, len(events), max_events):
        batch = codec.batch_to_proto(events[i : i + max_events], sender="d", sent_ns=t)
        tally[0] += len(events[i : i + max_events])
        tally[1] += codec.with_columns(batch).ByteSize()


def report_shipped(s: dict) -> None:
    events = s["step"]["events"] + s["collective"]["events"]
    size = s["step"]["bytes"] + s["collective"]["bytes"]
    fleet = 131_072
    print(
        f"shipped to the analyzer per rank-step, {s['collectives_per_step']} collectives a step: "
        f"{events:,.0f} events, {size:,.0f} B (the step event {s['step']['bytes']:,.0f} B, the "
        f"collectives {s['collective']['bytes']:,.0f} B); at {fleet:,} ranks and one step a "
        f"second: {events * fleet / 1e6:,.1f} M events/s, {size * fleet / 1e6:,.0f} MB/s (steps "
        f"alone: {fleet / 1e6:,.2f} M events/s, {s['step']['bytes'] * fleet / 1e6:,.1f} MB/s)"
    )
    events = s["step"]["events"] + s["summary"]["events"]
    size = s["step"]["bytes"] + s["summary"]["bytes"]
    print(
        f"  with node-side summaries (daemon collectives=summary, after a rank's first raw steps): "
        f"{events:,.1f} events, {size:,.0f} B per rank-step (the summaries "
        f"{s['summary']['events']:,.1f} events, {s['summary']['bytes']:,.0f} B); at {fleet:,} "
        f"ranks: {events * fleet / 1e6:,.2f} M events/s, {size * fleet / 1e6:,.0f} MB/s; the "
        f"daemon summed them at {s['summarize_us_per_collective']:.2f} us of CPU per collective "
        f"and keeps {s['retained_bytes_per_collective']:.0f} B per collective for a fetch (8 ranks "
        f"x 200 a step, one step a second: "
        f"{s['retained_bytes_per_collective'] * 8 * s['collectives_per_step'] * 600 / 2**20:,.0f} "
        f"MiB for the default 10 minutes)"
    )


def report(r: dict) -> None:
    det = r["detectors_s"]
    kinds = "a StepEvent and 2 CollectiveSummary" if r["summaries"] else "a StepEvent"
    print(
        f"\n== {r['ranks']:,} ranks ({r['hosts']:,} hosts x {RANKS_PER_HOST}), {r['steps']} steps: "
        f"{r['events']:,} events ({kinds} per rank-step); culprits: rank {r['slow_rank']} "
        f"from step {r['rank_onset']}, host {r['slow_host']} from step {r['host_onset']}"
    )
    for wire, w in r["wires"].items():
        print(
            f"  wire {wire:>7}: encode {w['encode_s']:.2f} s   parse {w['parse_s']:.2f} s   "
            f"ingest {w['ingest_s']:.2f} s ({w['ingest_events_per_s']:,.0f} events/s, goal 400k)"
            f"   flush {w['flush_s']:.2f} s   {w['bytes_per_event']:.0f} B/event   peak RSS after "
            f"it {w.get('rss_after_ingest_mib', r['rss_after_ingest_mib']):,.0f} MiB"
        )
    if len(r["wires"]) > 1:
        rates = {k: w["ingest_events_per_s"] for k, w in r["wires"].items()}
        names = list(rates)
        first, last = names[0], names[-1]
        print(f"  ingest {last} / {first}: {rates[last] / rates[first]:.2f}x (same run)")
    print(f"  core.triage() end to end (features + detectors + run summary): {r['triage_s']:.2f} s")
    split = "  ".join(f"{k} {v:.3f}" for k, v in det.items())
    print(
        f"  split (s): features {r['features_s']:.3f}  {split}  | summarize {r['summarize_s']:.3f}"
    )
    print(
        f"  analysis (features + detectors) {r['analysis_s']:.2f} s; "
        f"with summarize {r['analysis_s'] + r['summarize_s']:.2f} s   (goal at 16,384: <= 5 s)"
    )
    print(
        f"  the next live-triage pass, one more step buffered: {r['next_pass_s']:.3f} s "
        f"({'screened' if r['next_pass_screened'] else 'full'}: {r['next_pass_verdict']}; "
        f"goal at 16,384: <= 1 s); a full pass instead {r['next_full_pass_s']:.2f} s"
    )
    print(
        f"  rank {r['news_rank']} slower for 8 more steps: the next live pass "
        f"{r['news_pass_s']:.2f} s ({r['news_verdict']}), names it: "
        f"{'yes' if r['news_named'] else 'NO'}"
    )
    print(
        f"  peak RSS: {r['rss_after_ingest_mib']:,.0f} MiB after ingest, "
        f"{r['rss_peak_mib']:,.0f} MiB after analysis"
    )
    if r.get("stage_peaks_mib"):
        print("  resident high-water mark by stage (--stages; MiB):")
        for stage, mib in r["stage_peaks_mib"].items():
            print(f"    {stage:48s} {mib:8,}")
    yn = {True: "yes", False: "NO"}
    print(
        f"  culprits: top-1 {r['top1']} correct: {yn[r['top1_correct']]}; slow host named: "
        f"{yn[r['slow_host_named']]}; slow rank named: {yn[r['slow_rank_named']]}; "
        f"{r['num_findings']} findings, others: {r['others'] or 'none'}"
    )
    for f in r["found"]:
        print(f"    {f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1024, 16384])
    ap.add_argument("--steps", type=int, default=50, help="steps in the window (default 50)")
    ap.add_argument("--batch", type=int, default=4096, help="events per ingested batch")
    ap.add_argument(
        "--flush-every-s",
        type=float,
        default=AnalyzerConfig().flush_interval_s,
        help="flush to Parquet after this many seconds of parsing and ingesting, as the "
        "analyzer's flush thread does every flush_interval_s (default %(default)s)",
    )
    ap.add_argument(
        "--flush-every",
        type=int,
        default=0,
        help="flush at every N-th step instead (0: by time; sessions up to 14 used 10)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--host-extra", type=float, default=25.0, help="slow host: extra compute ms")
    ap.add_argument("--rank-extra", type=float, default=40.0, help="slow rank: extra compute ms")
    ap.add_argument(
        "--wire",
        nargs="+",
        choices=["rows", "columns"],
        default=["rows", "columns"],
        help="how batches travel, each ingested in turn (one event per row, or column blocks as "
        "a daemon sends them to an analyzer of schema >= 1.13); triage runs on the last",
    )
    ap.add_argument(
        "--collectives-per-step",
        type=int,
        default=200,
        help="the wire figure: collectives per rank-step (0: skip it)",
    )
    ap.add_argument(
        "--summaries",
        action="store_true",
        help="also ship two CollectiveSummary events per rank-step (node-side summaries)",
    )
    ap.add_argument(
        "--stages",
        action="store_true",
        help="print the resident high-water mark of each stage (a 5 ms sampler thread: its "
        "timings are not a plain run's)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object per world size")
    ap.add_argument(
        "--batches",
        metavar="DIR",
        help="keep the generated batches under DIR and reuse them in later runs (the generator "
        "takes ~2 minutes at 131,072 ranks)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ingest-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gen-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        print(json.dumps(generate(args, args.ranks[0], args.gen_dir)))
        return
    if args.child:
        wire = args.wire[-1]
        out = (
            ingest_only(args, args.ranks[0], wire)
            if args.ingest_only
            else run_one(args, args.ranks[0])
        )
        print(json.dumps(out))
        return
    print(
        "one analyzer process per world size and wire, single-threaded (one core), fed the "
        "batches' bytes by a generator process before it; "
        f"python {sys.version.split()[0]}"
    )
    if args.collectives_per_step > 0:
        shipped = shipped_per_rank_step(args.collectives_per_step)
        print(json.dumps({"shipped": shipped})) if args.json else report_shipped(shipped)
    for ranks in args.ranks:
        base = [sys.executable, __file__, "--ranks", str(ranks)]
        for opt in (
            "steps", "batch", "flush_every", "flush_every_s", "seed", "host_extra", "rank_extra"
        ):  # fmt: skip
            base += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
        base += ["--summaries"] if args.summaries else []

        def child(*extra: str, base: list[str] = base) -> dict:
            out = subprocess.run([*base, *extra], check=True, capture_output=True, text=True).stdout
            return json.loads(out.strip().splitlines()[-1])

        with contextlib.ExitStack() as stack:
            if args.batches:  # kept: generated once, read by every later run with these options
                key = "-".join(
                    str(getattr(args, o))
                    for o in ("steps", "batch", "seed", "host_extra", "rank_extra")
                )
                gen_dir = os.path.join(
                    args.batches, f"{ranks}-{key}-{'s' if args.summaries else 'p'}"
                )
                os.makedirs(gen_dir, exist_ok=True)
            else:
                gen_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="diag-scale-gen-"))
            meta = os.path.join(gen_dir, "generated.json")
            have = os.path.exists(meta) and all(
                os.path.exists(batch_file(gen_dir, w)) for w in args.wire
            )
            if have:
                with open(meta) as fh:
                    gen = json.load(fh)
            else:
                gen = child("--generate", "--gen-dir", gen_dir, "--wire", *args.wire)
                with open(meta, "w") as fh:
                    json.dump(gen, fh)
            wires = {
                w: child("--child", "--ingest-only", "--gen-dir", gen_dir, "--wire", w)
                for w in args.wire[:-1]
            }
            stages = ["--stages"] if args.stages else []
            r = child("--child", "--gen-dir", gen_dir, "--wire", args.wire[-1], *stages)
        wires[args.wire[-1]] = r["wires"][args.wire[-1]]
        for w, figures in wires.items():
            figures.update(generate_s=gen["generate_s"], encode_s=gen["encode_s"][w])
        r["wires"] = wires
        print(json.dumps(r)) if args.json else report(r)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
