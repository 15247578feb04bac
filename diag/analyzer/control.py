"""The analyzer's control board: on-demand requests (profiler windows, probes, the raw collectives
a daemon kept while it shipped summaries) that the daemons pull.

No gRPC here (``diag.analyzer.service`` adapts it). The flow is pull-only: the analyzer issues a
:class:`~diag.proto.diag_pb2.ProfileRequest`, every node daemon asks for the requests newer than the
last ``seq`` it saw (``PollControl``, every ``control_poll_interval_s`` = 0.5 s) and relays them
to its hooks, which pull them from their daemon connection (~every 0.2 s).

Numbers:

- ``seq`` numbers requests 1, 2, 3, ... per run directory. It is kept in ``RUN_DIR/control.json``
  (written and fsynced before a request is returned), so an analyzer restarted on the same run
  directory continues the sequence and a daemon polling with the ``after_seq`` of the previous
  analyzer process misses nothing. (Seeding from the clock would also be monotonic, but it depends
  on the wall clock never stepping back, loses the "1, 2, 3" that people can read, and keeps no
  record of who asked for what; the file is tiny and written only when a request is made.)
  If the file is unreadable, numbering resumes from the wall clock in milliseconds, which is
  larger than any sequence a run could have issued one by one.
- ``at_step``, when not given, is the step the job is estimated to be at now plus a lead of
  ``max(min_lead_steps, ceil(lead_s / median recent step duration))`` steps. Step events reach the
  analyzer seconds late (the hook holds a step until its next Flight Recorder harvest, up to 2 s,
  and the daemon batches), so the estimate extrapolates from the newest step's end time:
  ``newest + (now - its end_ns) / median step`` (at most 10 s of extrapolation). With the defaults
  the lead is at least 3 steps and 2.0 s of training: the way back takes up to ~0.5 s (daemon
  poll 0.25 s, hook cycle 0.2 s) and the estimate can be off by a few hundred ms on a loaded node,
  so every rank has the request before it reaches that step. On a node too loaded for that, a
  rank that gets it after ``at_step`` has begun takes it at ``at_step`` plus a whole number of
  leads (``realign_steps``): the ranks late by less than a lead still share one step (each going
  at its next boundary, four ranks beside a busy loop once took one window at steps 92-95). So
  an estimate that lags costs at most a lead, one that runs ahead costs all it runs ahead. The
  median is over the 16 newest durations (``num_durations``; four steps of a four-rank job, a
  part of one step of a large one): when the closed loop asks, the job has just slowed down, and
  the median of the last 64 (16 steps of four ranks) was still the pace before, 17 ms a step
  against 118: a window asked for at step 75 was placed at step 365, 34 s later (at their quick
  quarter, tried first: step 493).
- ``expires_ns`` = ``requested_ns + ttl_s``; expired requests are no longer handed out.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diag.analyzer.marks import HighWater
from diag.errors import ConfigError, NotReady
from diag.fsutil import atomic_open
from diag.proto import diag_pb2 as pb
from diag.transport.codec import control_seq

log = logging.getLogger(__name__)

MAX_NUM_STEPS = 100
MAX_EXTRAPOLATE_NS = 10_000_000_000  # a job silent for longer is not assumed to be progressing
MAX_TTL_S = 24 * 3600.0
CONTROL_FILE = "control.json"
_KEEP_REQUESTS = 200  # history kept in control.json (expired ones included, for the record)


@dataclass(frozen=True, slots=True)
class StepProgress:
    """What the board knows of training progress: the newest step index seen on any rank
    (-1 before any), how many ranks reported steps, the median duration of the recent steps in
    nanoseconds (0 when none), the lead in steps that an automatic ``at_step`` gets now and the
    step the job is estimated to be at (module docstring)."""

    newest_step: int
    num_ranks: int
    median_step_ns: int
    lead_steps: int
    estimated_step: int = -1  # newest_step extrapolated to now (see the module docstring)


def request_to_json(req: pb.ProfileRequest) -> dict[str, Any]:
    """A ``ProfileRequest`` as JSON (integers stay integers): ``control.json``, ``diag profile``."""
    return {
        "request_id": req.request_id,
        "seq": req.seq,
        "at_step": req.at_step,
        "num_steps": req.num_steps,
        "ranks": list(req.ranks),
        "requested_ns": req.requested_ns,
        "expires_ns": req.expires_ns,
        "realign_steps": req.realign_steps,
    }


def probe_request_to_json(req: pb.ProbeRequest) -> dict[str, Any]:
    return {
        "request_id": req.request_id,
        "seq": req.seq,
        "probe": req.probe,
        "params_json": req.params_json,
        "host": req.host,
        "device": req.device,
        "rank": req.rank,
        "requested_ns": req.requested_ns,
        "expires_ns": req.expires_ns,
    }


def fetch_to_json(req: pb.CollectiveFetch) -> dict[str, Any]:
    return {
        "request_id": req.request_id,
        "seq": req.seq,
        "host": req.host,
        "ranks": list(req.ranks),
        "first_step": req.first_step,
        "last_step": req.last_step,
        "requested_ns": req.requested_ns,
        "expires_ns": req.expires_ns,
    }


def _fetch_from_json(data: dict[str, Any]) -> pb.CollectiveFetch:
    return pb.CollectiveFetch(
        request_id=str(data["request_id"]),
        seq=int(data["seq"]),
        host=str(data["host"]),
        ranks=[int(r) for r in data.get("ranks", [])],
        first_step=int(data["first_step"]),
        last_step=int(data["last_step"]),
        requested_ns=int(data["requested_ns"]),
        expires_ns=int(data["expires_ns"]),
    )


def _request_from_json(data: dict[str, Any]) -> pb.ProfileRequest:
    return pb.ProfileRequest(
        request_id=str(data["request_id"]),
        seq=int(data["seq"]),
        at_step=int(data["at_step"]),
        num_steps=int(data["num_steps"]),
        ranks=[int(r) for r in data.get("ranks", [])],
        requested_ns=int(data["requested_ns"]),
        expires_ns=int(data["expires_ns"]),
        realign_steps=int(data.get("realign_steps", 0)),
    )


class ControlBoard:
    """Issues profile requests and answers daemon polls. Thread-safe (one lock).

    ``clock`` is the analyzer's wall time in ns (``requested_ns``/``expires_ns`` are in it; hooks
    compare ``expires_ns`` with their own wall clock). ``state_path`` is where the sequence and the
    requests are kept (``None``: memory only). ``lead_s`` and ``min_lead_steps`` set the automatic
    ``at_step`` (module docstring); ``num_durations`` is how many recent step durations (across all
    ranks) the median is taken over.
    """

    def __init__(
        self,
        clock: Callable[[], int] = time.time_ns,
        *,
        state_path: str | Path | None = None,
        lead_s: float = 2.0,
        min_lead_steps: int = 3,
        num_durations: int = 16,
    ) -> None:
        self._clock = clock
        self._path = Path(state_path) if state_path is not None else None
        self._lead_s = lead_s
        self._min_lead_steps = min_lead_steps
        self._lock = threading.Lock()
        self._max_step = HighWater()  # rank -> newest step index seen
        self._newest_end_ns = 0  # wall-clock end of the newest step seen (any rank)
        self._newest = -1  # the newest step index seen on any rank (max of _max_step)
        self._durations: deque[int] = deque(maxlen=num_durations)
        self._requests: list[pb.ProfileRequest] = []  # in seq order
        self._probes: list[pb.ProbeRequest] = []  # in seq order; numbered with the requests
        self._fetches: list[pb.CollectiveFetch] = []  # likewise
        self._last_seq = 0
        self._load()

    # -- state --------------------------------------------------------------------------------

    def _load(self) -> None:
        if self._path is None or not self._path.exists():
            return
        try:
            data = json.loads(self._path.read_text())
            requests = [_request_from_json(r) for r in data.get("requests", [])]
            probes = [pb.ProbeRequest(**p) for p in data.get("probes", [])]
            fetches = [_fetch_from_json(f) for f in data.get("fetches", [])]
            last_seq = int(data["last_seq"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._last_seq = self._clock() // 1_000_000
            log.warning(
                "cannot read %s (%s); numbering control requests from %d",
                self._path,
                " ".join(str(exc).split()),
                self._last_seq,
            )
            return
        self._requests = sorted(requests, key=lambda r: r.seq)
        self._probes = sorted(probes, key=lambda r: r.seq)
        self._fetches = sorted(fetches, key=lambda r: r.seq)
        self._last_seq = max(
            [
                last_seq,
                *(r.seq for r in requests),
                *(p.seq for p in probes),
                *(f.seq for f in fetches),
            ]
        )

    def _save(self) -> None:
        if self._path is None:
            return
        data = {
            "last_seq": self._last_seq,
            "requests": [request_to_json(r) for r in self._requests[-_KEEP_REQUESTS:]],
            "probes": [probe_request_to_json(p) for p in self._probes[-_KEEP_REQUESTS:]],
            "fetches": [fetch_to_json(f) for f in self._fetches[-_KEEP_REQUESTS:]],
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(self._path, "w", durable=True) as fh:
            json.dump(data, fh, indent=1)
            fh.write("\n")

    # -- progress -----------------------------------------------------------------------------

    def observe_steps(self, steps: Iterable[tuple[int, ...]]) -> None:
        """Note finished steps as ``(rank, step, duration_ns[, end_ns])`` (columns:
        :meth:`observe_step_columns`). Steps with a negative index or rank are ignored;
        durations <= 0 are not counted in the median; a step without its end time leaves the
        newest end as it was."""
        rows = [(*r[:3], r[3] if len(r) > 3 else 0) for r in steps]
        if rows:
            self.observe_step_columns(*zip(*rows, strict=True))

    def observe_step_columns(
        self,
        ranks: Sequence[object],
        steps: Sequence[object],
        durations_ns: Sequence[object],
        ends_ns: Sequence[object],
    ) -> None:
        """:meth:`observe_steps` for a batch's ``StepEvent`` columns, vectorized (the ingest path:
        no Python work per event or per rank). The newest end time is the latest end of a step at
        or after the newest step known before the batch."""
        rank = np.asarray(ranks, dtype=np.int64)
        step = np.asarray(steps, dtype=np.int64)
        dur = np.asarray(durations_ns, dtype=np.int64)
        end = np.asarray(ends_ns, dtype=np.int64)
        valid = (step >= 0) & (rank >= 0)
        if not valid.any():
            return
        rank, step, dur, end = rank[valid], step[valid], dur[valid], end[valid]
        codes, uniques = pd.factorize(rank)
        newest_of = np.full(len(uniques), -1, dtype=np.int64)
        np.maximum.at(newest_of, codes, step)
        recent = dur[dur > 0][-(self._durations.maxlen or len(dur)) :].tolist()
        with self._lock:
            later = step >= self._newest
            if later.any():
                self._newest_end_ns = max(self._newest_end_ns, int(end[later].max()))
            self._max_step.raise_to(np.asarray(uniques, dtype=np.int64), newest_of)
            self._newest = max(self._newest, int(newest_of.max()))
            self._durations.extend(recent)

    @property
    def newest_step(self) -> int:
        """The newest step index seen on any rank (-1 before the first); cheap."""
        return self._newest

    def progress(self) -> StepProgress:
        with self._lock:
            return self._progress()

    def _progress(self) -> StepProgress:
        median_ns = int(np.median(np.fromiter(self._durations, np.int64))) if self._durations else 0
        lead = self._min_lead_steps
        if median_ns > 0:
            lead = max(lead, math.ceil(self._lead_s * 1e9 / median_ns))
        newest = self._newest
        estimated = newest
        if newest >= 0 and median_ns > 0 and self._newest_end_ns > 0:
            behind_ns = min(max(self._clock() - self._newest_end_ns, 0), MAX_EXTRAPOLATE_NS)
            estimated = newest + behind_ns // median_ns
        return StepProgress(newest, len(self._max_step), median_ns, lead, estimated)

    # -- requests -----------------------------------------------------------------------------

    def request_profile(
        self,
        num_steps: int = 1,
        ranks: Sequence[int] = (),
        at_step: int = 0,
        ttl_s: float = 120.0,
    ) -> pb.ProfileRequest:
        """Issue a request for a profiler window of ``num_steps`` steps (1..100) from ``at_step``
        on ``ranks`` (empty = every rank); ``at_step <= 0`` = the newest step seen plus the lead.
        It is handed to pollers for ``ttl_s`` seconds. Raises :class:`ConfigError` (one line) on
        bad arguments, ``OSError`` if ``control.json`` cannot be written (nothing is issued)."""
        if not 1 <= num_steps <= MAX_NUM_STEPS:
            raise ConfigError(f"num_steps must be between 1 and {MAX_NUM_STEPS}, got {num_steps}")
        bad = [r for r in ranks if r < 0]
        if bad:
            raise ConfigError(f"ranks must be >= 0, got {bad}")
        if not 0 < ttl_s <= MAX_TTL_S:
            raise ConfigError(f"ttl_s must be in (0, {MAX_TTL_S:g}], got {ttl_s}")
        with self._lock:
            now = self._clock()
            p = self._progress()
            if at_step <= 0:
                if p.newest_step < 0:
                    # No step seen: any step chosen now could already be past on the ranks, and
                    # each would then take its window at a different step.
                    raise NotReady(
                        "the analyzer has seen no training step yet; ask again once the job "
                        "is training, or give the step explicitly"
                    )
                at_step = p.estimated_step + p.lead_steps
            req = pb.ProfileRequest(
                request_id=secrets.token_hex(4),
                seq=self._last_seq + 1,
                at_step=at_step,
                num_steps=num_steps,
                ranks=sorted(set(ranks)),
                requested_ns=now,
                expires_ns=now + int(ttl_s * 1e9),
                # a rank reached late moves on by whole leads: one step for every late rank
                realign_steps=p.lead_steps if p.newest_step >= 0 else 0,
            )
            self._requests.append(req)
            self._last_seq = req.seq
            try:
                self._save()
            except OSError:
                self._requests.pop()
                self._last_seq -= 1
                raise
            self._requests = self._requests[-_KEEP_REQUESTS:]
        log.info(
            "profile request %s (seq %d): %d step(s) at step %d, ranks %s (newest step seen %d, "
            "its end %.2f s ago; median step %.1f ms; estimated now %d, lead %d)",
            req.request_id,
            req.seq,
            req.num_steps,
            req.at_step,
            list(req.ranks) or "all",
            p.newest_step,
            (now - self._newest_end_ns) / 1e9 if self._newest_end_ns else math.nan,
            p.median_step_ns / 1e6,
            p.estimated_step,
            p.lead_steps,
        )
        return req

    def request_probe(
        self,
        probe: str,
        params_json: str,
        host: str,
        device: str = "",
        rank: int = -1,
        ttl_s: float = 120.0,
    ) -> pb.ProbeRequest:
        """Issue a request for one registered probe with ``params_json`` on ``host`` (``"*"``:
        every node) and ``device`` (a CUDA index; ``""``: the CPU). The name and parameters are
        validated here (:func:`probes.validate.validate`) and again by the daemon. Raises
        :class:`ConfigError` (one line) on a bad request, ``OSError`` as :meth:`request_profile`."""
        from probes.validate import RequestRejected, validate

        try:
            validate(probe, params_json)
        except RequestRejected as exc:
            raise ConfigError(str(exc)) from None
        if not host or (device and device != "cpu" and not device.isdigit()):
            raise ConfigError(f"a probe request needs a host and a device index, got {device!r}")
        if not 0 < ttl_s <= MAX_TTL_S:
            raise ConfigError(f"ttl_s must be in (0, {MAX_TTL_S:g}], got {ttl_s}")
        with self._lock:
            now = self._clock()
            req = pb.ProbeRequest(
                request_id=secrets.token_hex(4),
                seq=self._last_seq + 1,
                probe=probe,
                params_json=params_json,
                host=host,
                device=device,
                rank=rank,
                requested_ns=now,
                expires_ns=now + int(ttl_s * 1e9),
            )
            self._probes.append(req)
            self._last_seq = req.seq
            try:
                self._save()
            except OSError:
                self._probes.pop()
                self._last_seq -= 1
                raise
            self._probes = self._probes[-_KEEP_REQUESTS:]
        log.info("probe request %s (seq %d): %s on %s", req.request_id, req.seq, probe, host)
        return req

    def request_fetch(
        self,
        first_step: int,
        last_step: int,
        ranks: Sequence[int] = (),
        host: str = "*",
        ttl_s: float = 120.0,
    ) -> pb.CollectiveFetch:
        """Ask the node daemons (``host``; ``"*"``: every one) for the raw collectives they kept
        of ``ranks`` (empty: all) in steps ``first_step..last_step`` while shipping summaries
        (:mod:`diag.daemon.collsum`). Raises :class:`ConfigError` (one line) on a bad range,
        ``OSError`` as :meth:`request_profile`."""
        if first_step < 0 or last_step < first_step:
            raise ConfigError(
                f"a fetch needs 0 <= first_step <= last_step, got {first_step}..{last_step}"
            )
        if not host:
            raise ConfigError("a fetch needs a host ('*': every node)")
        if not 0 < ttl_s <= MAX_TTL_S:
            raise ConfigError(f"ttl_s must be in (0, {MAX_TTL_S:g}], got {ttl_s}")
        with self._lock:
            now = self._clock()
            req = pb.CollectiveFetch(
                request_id=secrets.token_hex(4),
                seq=self._last_seq + 1,
                host=host,
                ranks=sorted({int(r) for r in ranks}),
                first_step=first_step,
                last_step=last_step,
                requested_ns=now,
                expires_ns=now + int(ttl_s * 1e9),
            )
            self._fetches.append(req)
            self._last_seq = req.seq
            try:
                self._save()
            except OSError:
                self._fetches.pop()
                self._last_seq -= 1
                raise
            self._fetches = self._fetches[-_KEEP_REQUESTS:]
        log.info(
            "collective fetch %s (seq %d): steps %d-%d of ranks %s on %s",
            req.request_id,
            req.seq,
            first_step,
            last_step,
            list(req.ranks) or "all",
            host,
        )
        return req

    def poll(self, after_seq: int) -> list[pb.ControlMessage]:
        """The unexpired requests with ``seq > after_seq``, in seq order, as control messages."""
        with self._lock:
            now = self._clock()
            live = [r for r in self._requests if r.seq > after_seq and r.expires_ns > now]
            probes = [p for p in self._probes if p.seq > after_seq and p.expires_ns > now]
            fetches = [f for f in self._fetches if f.seq > after_seq and f.expires_ns > now]
        out = []
        for r in live:
            msg = pb.ControlMessage()
            msg.profile.CopyFrom(r)
            out.append(msg)
        for p in probes:
            msg = pb.ControlMessage()
            msg.probe.CopyFrom(p)
            out.append(msg)
        for f in fetches:
            msg = pb.ControlMessage()
            msg.fetch.CopyFrom(f)
            out.append(msg)
        return sorted(out, key=control_seq)

    @property
    def last_seq(self) -> int:
        """The seq of the newest request issued (0 before any)."""
        with self._lock:
            return self._last_seq
