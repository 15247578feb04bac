"""Link detector: collectives of one process group slow while compute is balanced and ranks
arrive together, so the time goes to the wire, not to a late rank.

Per collective (matched across ranks by ``(pg_name, seq_id)``, point-to-point ops left out):

- **arrival skew** = ``max(enqueue_ns) - min(enqueue_ns)`` over its ranks (raw host clocks: it
  assumes hosts are synced to well under a collective's duration);
- **transfer** = the smallest per-rank duration (``duration_ns``, else ``end_ns - start_ns``).
  The last rank to arrive waits for nobody, so its duration is the transfer itself, and each
  duration is measured on one host's clock. Without durations (e.g. gloo) the proxy is the
  smallest ``collective_wait_ns`` over the group's ranks in the step: coarse (a rank's wait covers
  all its groups and every collective of the step, and on a busy CPU its collective threads'
  scheduling), and flagged in the evidence. A proxy covers the step, so the group's collectives
  without durations in one step are one row: that transfer, the sum of their bytes, the median
  of their skews;
- **cost** = transfer / ``num_bytes`` (ns per byte, the inverse bandwidth; per call when bytes
  are unknown).

Per group and step the cost is the group's transfer over its bytes in the step (sum over its rows:
bulk transfers dominate, a small eval all-reduce's latency does not), then the centered rolling
median over ``smooth_steps`` steps (one eval or checkpoint step, or a rank descheduled once, is
not a trend; a step change keeps its step). A step is *slow* against a reference cost when its
cost is ``slow_ratio`` x the reference and the excess, (cost - reference) x the group's bytes in
the step, is at least ``min_excess_frac`` of the step's median duration (a tiny collective's
noise is not a slowdown). Two references:

- its own level just before: each step whose cost is slow against the median of the
  ``baseline_steps`` steps before it (at least half of them there) and whose predecessor is not
  starts a candidate period, whose later steps are judged against that same level (the job's
  pace drifts, e.g. with the host's load: the first steps of a run are no baseline for its end);
- its peers (other groups of the same size spanning as many hosts): each step against their
  median cost in that step; the first such step is a candidate too (a group slow from the start).

A candidate period counts when, from its start to the end, at least ``persist_frac`` of the steps
(and ``min_slow_steps``) are slow against its reference (or against the peers); of those, the one
with the most evidence, ``sum(slow - persist_frac)``, wins (the earliest on a tie). Its onset is
the change point of the log cost near its start (:func:`_refine_onset`: noisy steps just before a
real change would date it early), ``None`` when it is the first step. ``detected_step`` is the
``min_slow_steps``-th slow step from the onset plus the ``smooth_steps // 2`` later steps its
smoothed cost needed.
Over the slow steps:

- no late rank explains it. A rank's own work before a collective is its ``compute_ns`` less
  ``cpu_wait_ns`` (the time its training thread waited for a CPU: a rank descheduled on a busy
  host is not a slow rank) plus ``data_wait_ns`` and ``checkpoint_ns``; per step, the imbalance
  is ``max / median`` of that over the ranks and the late rank's excess is ``max - median``
  (medians over the slow steps). It is a late rank when the imbalance is above
  ``max_compute_ratio`` and the excess is at least ``max_compute_share`` of the group's median
  excess transfer per step, or when the arrivals are skewed (median skew above
  ``max(skew_floor_ns, max_skew_ratio x median transfer)``) and the excess is at least
  ``max_skew_ratio`` of that skew. A skew its ranks' own work does not explain is left to the
  collectives: ranks leave a slow ring all-reduce at different times, so they also arrive at the
  next one at different times.
- no rank of the group was kept from a CPU to explain it: per step, the most ``cpu_wait_ns`` of
  the group's ranks; its median over the slow steps, less its median over the
  ``baseline_steps`` steps before them (a host busy all along is not a change), is below
  ``max_compute_share`` of the median excess transfer per step. A collective needs its ranks'
  CPUs too (gloo's copies and reductions, a loopback's sockets): a rank a busy neighbour
  deschedules makes its group's collectives slow, which its contention finding explains (seen
  beside a busy loop: a two-rank group inside one host 19.7x slower per byte while one of its
  ranks waited 15-64 ms a step for a CPU, named a slow link).

From node summaries (schema 1.17: at fleet scale a daemon ships one ``CollectiveSummary`` per
rank, step and group instead of the raw rows, and the raw rows again for a window the analyzer
fetches): raw rows win. For a (group, step), when every rank with a summary there also has
completed raw rows, the summaries are dropped; otherwise that step's raw rows are, and its
summaries make one row (as the proxy's merged rows): its ranks, the largest ``num_bytes`` of a
rank, the transfer (the least ``duration_sum_ns`` of a rank when every rank timed every
collective: the last to arrive at every call waits for nobody, so its summed durations are the
transfers; else the proxy above) and the skew: exact for the step's first and last calls when
every rank's summary starts (ends) with the same call (the spread of ``first_enqueue_ns``,
``last_enqueue_ns``), their mean; else ``max - min`` of the ranks' ``mean_enqueue_ns`` (the
skew of a rank late to every call, inflated when the ranks' call sets differ). A finding whose
slow steps were judged from summaries says so (``from_summaries`` evidence, with the steps to
fetch to confirm).

A group inside one host judged by the proxy is left out: on one host the collective wait
cannot tell a slow interconnect from the host's CPU contention, which slows the same ranks alike.

Localization: the host pairs each group spans; the suspect pairs are those common to every slow
group and absent from the fast ones (or, when the fast groups use the same pairs, those common to
the slow groups: then the ranks point at the NICs). ``slowdown`` = median over slow steps of the
group's excess transfer (transfer - reference cost x bytes) / the step's median duration (an upper
bound: collectives may overlap compute). Severity: ``critical`` at ``critical_slowdown``,
``warning`` at ``warn_slowdown``, else ``info`` (``warning`` when step durations are unknown).
Confidence = 0.4 + 0.3 x persistence + 0.15 (measured durations, not the proxy) + 0.1 (a unique
host pair, or a peer group that stayed fast), at most 0.95.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from diag.diagnose.features import change_point
from diag.findings import Evidence, Finding, LinkRef
from diag.store.run_store import RunStore

#: The evidence metric of a finding judged, at least in part, from node summaries (its value: the
#: share of its slow steps); the analyzer's loop fetches the raw rows for it.
FROM_SUMMARIES = "from_summaries"


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkConfig:
    """Thresholds of the link detector (see the module doc for the formulas)."""

    slow_ratio: float = 1.5  # smoothed cost / reference (level before, or peers): slow step
    min_excess_frac: float = 0.03  # ... and its excess transfer / the step's median duration
    smooth_steps: int = 5  # centered rolling median of the per-step cost (1: none)
    baseline_steps: int = 10  # the steps before a candidate onset whose median is its reference
    min_slow_steps: int = 5  # fewer slow steps is noise
    max_later_starts: int = 32  # later rises in a period tried as its onset (the steepest)
    persist_frac: float = 0.8  # share of steps from the onset on that must be slow
    max_compute_ratio: float = 1.15  # own work max/median above this: maybe a late rank
    max_compute_share: float = 0.5  # ... when its excess is this share of the excess transfer
    max_skew_ratio: float = 0.5  # skew / transfer above this, explained by own work: late rank
    skew_floor_ns: int = 1_000_000  # skews under 1 ms always count as aligned
    warn_slowdown: float = 0.05
    critical_slowdown: float = 0.2


def detect_from_store(store: RunStore, cfg: LinkConfig | None = None) -> list[Finding]:
    """:func:`detect` on the store's ``collective``, ``collective_summary`` and ``step`` frames."""
    kinds = store.kinds()
    if "collective" not in kinds and "collective_summary" not in kinds:
        return []
    steps = store.resident_frame("step") if "step" in kinds else pd.DataFrame()
    coll = store.frame("collective") if "collective" in kinds else pd.DataFrame()
    summaries = store.frame("collective_summary") if "collective_summary" in kinds else None
    return detect(coll, steps, cfg or LinkConfig(), summaries)


def detect(
    collectives: pd.DataFrame,
    steps: pd.DataFrame,
    cfg: LinkConfig,
    summaries: pd.DataFrame | None = None,
) -> list[Finding]:
    """Link findings from a ``collective`` frame, a ``step`` frame and a ``collective_summary``
    frame (each may be empty)."""
    coll = _per_collective(collectives, steps, summaries)
    if coll.empty:
        return []
    hosts = _hosts_by_rank(collectives, steps, *([] if summaries is None else [summaries]))
    ranks_of = {
        g: tuple(sorted(set().union(*rs))) for g, rs in coll.groupby("pg")["ranks"] if len(rs)
    }
    span = {g: tuple(sorted({hosts.get(r, "?") for r in rs})) for g, rs in ranks_of.items()}
    by_step = coll.groupby(["pg", "step"])
    nbytes = by_step["bytes"].sum().unstack("pg").sort_index()
    cost = _smooth(by_step["transfer"].sum().unstack("pg").sort_index() / nbytes, cfg.smooth_steps)
    balance = _own_work_balance(steps)
    step_ns = steps.groupby("step")["duration_ns"].median() if len(steps) else pd.Series()
    slow: dict[str, dict] = {}
    for g in cost.columns:
        peers = [
            p
            for p in cost.columns
            if p != g and _kind(p, ranks_of, span) == _kind(g, ranks_of, span)
        ]
        res = _slow_group(
            g, cost, nbytes[g], peers, coll, balance, step_ns, cfg, steps, ranks_of[g]
        )
        # Inside one host the proxy cannot tell the interconnect from CPU contention.
        if res is not None and not (res["proxy"] and len(span[g]) < 2):
            slow[g] = res
    if not slow:
        return []
    pairs = {g: _pairs(span[g]) for g in cost.columns}
    fast_pairs = set().union(*(pairs[g] for g in cost.columns if g not in slow))
    common = set.intersection(*(pairs[g] for g in slow))
    suspect = common - fast_pairs or common
    clusters = [sorted(slow)] if suspect and len(slow) > 1 else [[g] for g in sorted(slow)]
    return [
        _finding(
            c, slow, ranks_of, span, suspect, fast_pairs, bool(set(cost.columns) - set(slow)), cfg
        )
        for c in clusters
    ]


def _per_collective(
    collectives: pd.DataFrame, steps: pd.DataFrame, summaries: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per matched collective with a duration, and per (group, step) for those without
    (the proxy covers the step) or judged from summaries: pg, seq, step, ranks, skew, transfer,
    bytes, cost, proxy, summary."""
    out, covered = _raw_calls(collectives, steps)
    summed, members = _summary_rows(summaries, steps)
    if len(members):
        out, summed = _raw_wins(out, covered, summed, members)
    if out.empty and summed.empty:
        return pd.DataFrame()
    proxied = out[out["proxy"]] if len(out) else out
    if len(proxied):
        merged = proxied.groupby(["pg", "step"], as_index=False).agg(
            seq=("seq", "min"),
            ranks=("ranks", "first"),
            skew=("skew", "median"),
            transfer=("transfer", "first"),
            bytes=("bytes", "sum"),
            proxy=("proxy", "first"),
        )
        out = pd.concat([out[~out["proxy"]], merged], ignore_index=True)
    if len(summed):
        out = pd.concat([out.assign(summary=False), summed], ignore_index=True)
    else:
        out = out.assign(summary=False)
    # cost: per byte; per call where the bytes are unknown (the bytes then count 1 per call)
    out["bytes"] = out["bytes"].where(out["bytes"] > 0, 1.0)
    out["cost"] = out["transfer"] / out["bytes"]
    return out.sort_values(["pg", "step", "seq"], ignore_index=True)


def _raw_calls(collectives: pd.DataFrame, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The raw rows' calls (:func:`_calls`, in steps >= 0; empty when none) and the (pg, step,
    rank) that have completed raw rows (what covers a rank's summary there)."""
    none = (pd.DataFrame(), pd.DataFrame(columns=["pg", "step", "rank"]))
    c = collectives
    if c.empty:
        return none
    c = c[(c["rank"] >= 0) & (c["seq_id"] >= 0) & ~c["is_p2p"]].copy()
    if c.empty:
        return none
    c["pg"] = c["pg_name"].where(c["pg_name"] != "", "default")
    c["step"] = _steps_of(c, steps)
    dur = c["duration_ns"].astype("Float64")
    dur = dur.fillna((c["end_ns"] - c["start_ns"]).astype("Float64"))
    c["dur"] = dur.astype(float)
    # In flight or failed rows always ship raw (a hang's evidence), beside the summaries of a
    # rank's completed ones: they do not stand for the rank's step.
    done = c["state"].isin(("", "completed")) if "state" in c else slice(None)
    covered = c.loc[done, ["pg", "step", "rank"]].drop_duplicates()
    out = _calls(c, steps)
    if out.empty:
        return pd.DataFrame(), covered
    return out[out["step"] >= 0], covered


def _summary_rows(
    summaries: pd.DataFrame | None, steps: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per (group, step) of the node summaries (see the module doc) with the columns of
    :func:`_per_collective` less ``cost`` (``summary`` True), and their (pg, step, rank). A row
    judged by the proxy is dropped when a rank's collective wait in that step is unknown.

    By sorted arrays and ``reduceat`` (a group-by over millions of summaries spent seconds
    building one object per group)."""
    none = (pd.DataFrame(), pd.DataFrame(columns=["pg", "step", "rank"]))
    if summaries is None or summaries.empty:
        return none
    f = summaries
    keep = (
        (f["rank"] >= 0) & (f["step"] >= 0) & (f["num_collectives"] > 0) & (f["first_seq_id"] >= 0)
    ).to_numpy()
    if not keep.any():
        return none
    codes, names = pd.factorize(f["pg_name"].to_numpy()[keep], sort=True)
    names = pd.Index(names).where(names != "", "default")
    codes, names = _recode(codes, names)  # "" and "default" are one group
    rows = np.flatnonzero(keep)
    order = np.lexsort(
        (f["rank"].to_numpy(np.int64)[rows], f["step"].to_numpy(np.int64)[rows], codes)
    )
    rows, codes = rows[order], codes[order]
    del order, keep
    # each column gathered once, kept and sorted in one take (at 131,072 ranks a column of the
    # summaries is 100 MB: a filtered copy and then a sorted one held two of each at once)
    col = {
        k: f[k].to_numpy(dtype=np.int64)[rows]
        for k in ("step", "rank", "num_collectives", "num_bytes", "num_timed",
                  "duration_sum_ns", "mean_enqueue_ns", "first_seq_id", "last_seq_id",
                  "first_enqueue_ns", "last_enqueue_ns")
    }  # fmt: skip
    del rows
    # enqueue times relative to the earliest, as floats (ns since the epoch overflow a float's
    # mantissa), weighted by calls: a rank's step summed in two parts is one mean
    enq = (col["mean_enqueue_ns"] - col["mean_enqueue_ns"].min()).astype(float)
    enq *= col["num_collectives"]
    same = (codes[1:] == codes[:-1]) & (col["step"][1:] == col["step"][:-1])
    dup = same & (col["rank"][1:] == col["rank"][:-1])
    if dup.any():
        at = np.flatnonzero(np.r_[True, ~dup])
        for k in ("num_collectives", "num_bytes", "num_timed", "duration_sum_ns"):
            col[k] = np.add.reduceat(col[k], at)
        for k in ("first_seq_id", "first_enqueue_ns"):
            col[k] = np.minimum.reduceat(col[k], at)
        for k in ("last_seq_id", "last_enqueue_ns"):
            col[k] = np.maximum.reduceat(col[k], at)
        enq = np.add.reduceat(enq, at)
        codes, col["step"], col["rank"] = codes[at], col["step"][at], col["rank"][at]
        same = (codes[1:] == codes[:-1]) & (col["step"][1:] == col["step"][:-1])
    enq /= col["num_collectives"]
    timed = col["num_timed"] == col["num_collectives"]
    at = np.flatnonzero(np.r_[True, ~same])
    size = np.diff(np.r_[at, len(codes)])
    members = col["rank"].tolist()
    out = pd.DataFrame(
        {
            "pg": names[codes[at]],
            "seq": np.minimum.reduceat(col["first_seq_id"], at),
            "step": col["step"][at],
            "ranks": pd.Series(
                [
                    tuple(members[i : i + n])
                    for i, n in zip(at.tolist(), size.tolist(), strict=True)
                ],
                dtype=object,
            ).to_numpy(),
            "skew": _summary_skew(col, enq, at),
            "transfer": np.minimum.reduceat(col["duration_sum_ns"], at).astype(float),
            "bytes": np.maximum.reduceat(col["num_bytes"], at).astype(float),
            "proxy": ~np.logical_and.reduceat(timed, at),
            "summary": True,
        }
    )
    ranks = pd.DataFrame({"pg": names[codes], "step": col["step"], "rank": col["rank"]})
    proxied = out["proxy"].to_numpy()
    if proxied.any():
        # the least collective wait of the group's ranks in the step; NaN (dropped) when a
        # rank's is unknown
        wait = _waits_at(steps, ranks["rank"].to_numpy(), ranks["step"].to_numpy())
        least = np.minimum.reduceat(wait, at)
        out.loc[proxied, "transfer"] = least[proxied]
        out = out[~proxied | ~np.isnan(least)].reset_index(drop=True)
    return out, ranks


def _waits_at(steps: pd.DataFrame, rank: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Each (``rank``, ``step``)'s ``collective_wait_ns`` (its last step event's), NaN where none:
    a lookup in a dense rank x step table (a merge of millions of keys spent most of the time)."""
    out = np.full(len(rank), np.nan)
    if steps.empty or not len(rank):
        return out
    s = steps[(steps["rank"] >= 0) & (steps["step"] >= 0)]
    r, t = s["rank"].to_numpy(np.int64), s["step"].to_numpy(np.int64)
    if not len(r):
        return out
    shape = (int(max(r.max(), rank.max())) + 1, int(max(t.max(), step.max())) + 1)
    if shape[0] * shape[1] > 8 * max(len(r), len(rank)) + 1_000_000:  # sparse: merge instead
        waits = s[["rank", "step", "collective_wait_ns"]].drop_duplicates(
            ["rank", "step"], keep="last"
        )
        found = pd.DataFrame({"rank": rank, "step": step}).merge(
            waits, on=["rank", "step"], how="left"
        )
        return found["collective_wait_ns"].to_numpy(dtype=float, na_value=np.nan)
    table = np.full(shape, np.nan)
    last = ~pd.DataFrame({"r": r, "t": t}).duplicated(keep="last").to_numpy()
    table[r[last], t[last]] = s["collective_wait_ns"].to_numpy(dtype=float)[last]
    ok = (rank >= 0) & (step >= 0)
    out[ok] = table[rank[ok], step[ok]]
    return out


def _summary_skew(col: dict[str, np.ndarray], enq: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Each (group, step)'s arrival skew from its ranks' summaries (rows grouped at ``at``).

    Exact where the summaries show it: when every rank's first call is the same call (equal
    ``first_seq_id``), the spread of their ``first_enqueue_ns`` is that call's skew; likewise the
    last call. The skew is the mean of those one or two calls' skews. Where neither end lines up
    (a call counted in another step on some rank), the spread of the ranks' mean enqueue times
    (``enq``), which a rank late to every call shows but which also grows with a call set that
    differs between ranks."""

    def spread(x: np.ndarray) -> np.ndarray:
        return (np.maximum.reduceat(x, at) - np.minimum.reduceat(x, at)).astype(float)

    first_ok = spread(col["first_seq_id"]) == 0
    last_ok = spread(col["last_seq_id"]) == 0
    first, last = spread(col["first_enqueue_ns"]), spread(col["last_enqueue_ns"])
    exact = np.where(first_ok & last_ok, (first + last) / 2, np.where(first_ok, first, last))
    return np.where(first_ok | last_ok, exact, spread(enq))


def _recode(codes: np.ndarray, names: pd.Index) -> tuple[np.ndarray, pd.Index]:
    """``codes`` into ``names`` with repeated names merged (sorted, unique)."""
    if names.is_unique:
        return codes, names
    new, uniq = pd.factorize(names, sort=True)
    return new[codes], pd.Index(uniq)


def _raw_wins(
    raw: pd.DataFrame, covered: pd.DataFrame, summed: pd.DataFrame, members: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``raw`` and ``summed`` with each (pg, step) counted once: from the raw calls when every
    rank with a summary there has completed raw rows (fetched), else from the summaries."""
    have = members.merge(covered.assign(raw=True), on=["pg", "step", "rank"], how="left")
    full = have["raw"].notna().groupby([have["pg"], have["step"]]).all()
    if len(summed):
        at = pd.MultiIndex.from_arrays([summed["pg"], summed["step"]])
        summed = summed[~at.isin(full.index[full.to_numpy()])]
    if len(raw):
        at = pd.MultiIndex.from_arrays([raw["pg"], raw["step"]])
        raw = raw[~at.isin(full.index[~full.to_numpy()])]
    return raw, summed


def _calls(c: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per collective call (``pg``, ``seq_id``), by group-bys (no Python step per call):
    its ranks (sorted tuple), step (the latest of its ranks'), skew (enqueue spread), transfer
    (the shortest duration; without durations the least collective wait of its ranks in that
    step, the call dropped when a rank's wait is unknown), bytes (the largest) and whether the
    transfer is that proxy."""
    g = c.groupby(["pg", "seq_id"], sort=True)
    calls = g.agg(
        step=("step", "max"),
        first=("enqueue_ns", "min"),
        last=("enqueue_ns", "max"),
        transfer=("dur", "min"),
        num_durations=("dur", "count"),
        bytes=("num_bytes", "max"),
    )
    members = c[["pg", "seq_id", "rank"]].drop_duplicates().sort_values(["pg", "seq_id", "rank"])
    ranks = members.groupby(["pg", "seq_id"], sort=True)["rank"].agg(
        lambda r: tuple(int(x) for x in r)
    )
    out = pd.DataFrame(
        {
            "pg": calls.index.get_level_values(0),
            "seq": calls.index.get_level_values(1).astype(int),
            "step": calls["step"].to_numpy(dtype=np.int64),
            "ranks": ranks.reindex(calls.index).to_numpy(),
            "skew": (calls["last"] - calls["first"]).to_numpy(dtype=float),
            "transfer": calls["transfer"].to_numpy(dtype=float),
            "bytes": calls["bytes"].to_numpy(dtype=float),
            "proxy": (calls["num_durations"] == 0).to_numpy(),
        }
    )
    proxied = out["proxy"].to_numpy()
    if proxied.any():
        # the least collective wait of the call's ranks in its step; every rank's wait known
        waits = steps.loc[steps["rank"] >= 0, ["rank", "step", "collective_wait_ns"]]
        waits = waits.drop_duplicates(["rank", "step"], keep="last")
        need = members.merge(
            out.loc[proxied, ["pg", "seq", "step"]].rename(columns={"seq": "seq_id"}),
            on=["pg", "seq_id"],
        )
        need = need.merge(waits, on=["rank", "step"], how="left")
        per = need.groupby(["pg", "seq_id"], sort=False).agg(
            wait=("collective_wait_ns", "min"),
            known=("collective_wait_ns", "count"),
            size=("rank", "size"),
        )
        key = pd.MultiIndex.from_arrays([out["pg"], out["seq"]])
        per = per.reindex(key)
        ok = (per["known"] == per["size"]).to_numpy() & (out["step"].to_numpy() >= 0)
        out.loc[proxied, "transfer"] = per["wait"].to_numpy(dtype=float)[proxied]
        out = out[~proxied | ok]
    return out.reset_index(drop=True)


def _smooth(cost: pd.DataFrame, window: int) -> pd.DataFrame:
    """Each group's per-step cost as the centered rolling median over ``window`` of its steps."""
    if window <= 1:
        return cost
    return cost.apply(
        lambda col: col.dropna().rolling(window, center=True, min_periods=1).median()
    ).reindex(cost.index)


def _steps_of(c: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """The envelope step, else the rank's step whose end is the first at/after the enqueue."""
    out = c["step"].to_numpy(dtype=np.int64).copy()
    if steps.empty or (out >= 0).all():
        return out
    for rank, idx in c.groupby("rank").groups.items():
        st = steps[steps["rank"] == rank].sort_values("end_ns")
        if st.empty:
            continue
        pos = np.searchsorted(st["end_ns"].to_numpy(), c.loc[idx, "enqueue_ns"].to_numpy())
        cand = st["step"].to_numpy()[np.minimum(pos, len(st) - 1)]
        cand = np.where(pos < len(st), cand, -1)
        loc = c.index.get_indexer(idx)
        out[loc] = np.where(out[loc] >= 0, out[loc], cand)
    return out


def _hosts_by_rank(*frames: pd.DataFrame) -> dict[int, str]:
    """rank -> host: its first row's, in the frames' order."""
    parts = [  # each frame's first row per rank first: the host as text for those rows only
        f.loc[f["rank"] >= 0, ["rank", "host"]].drop_duplicates("rank").astype({"host": str})
        for f in frames
        if len(f)
    ]
    if not parts:
        return {}
    first = pd.concat(parts, ignore_index=True).drop_duplicates("rank", keep="first")
    return dict(zip(first["rank"].astype(int).tolist(), first["host"].tolist(), strict=True))


def _own_work_balance(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step: ``ratio`` = max / median and ``excess_ns`` = max - median over the ranks of
    their own work before a collective: ``compute_ns`` less ``cpu_wait_ns`` (a rank descheduled
    on a busy host is not a late rank), plus ``data_wait_ns`` and ``checkpoint_ns`` less the
    part of that delay met there (``cpu_wait_data_ns``, schema 1.18)."""
    if steps.empty:
        return pd.DataFrame(columns=["ratio", "excess_ns"], dtype=float)
    s = steps[(steps["rank"] >= 0) & (steps["compute_ns"] > 0)]
    own = s["compute_ns"].astype(float)
    queued = pd.Series(0.0, index=s.index)
    in_data = pd.Series(0.0, index=s.index)
    if "cpu_wait_ns" in s:
        queued = s["cpu_wait_ns"].astype(float).fillna(0).clip(lower=0)
    if "cpu_wait_data_ns" in s:
        in_data = s["cpu_wait_data_ns"].astype(float).fillna(0).clip(lower=0, upper=queued)
    own = (own - (queued - in_data)).clip(lower=0)
    io = pd.Series(0.0, index=s.index)
    for col in ("data_wait_ns", "checkpoint_ns"):
        if col in s:
            io = io + s[col].astype(float).fillna(0).clip(lower=0)
    own = own + (io - in_data).clip(lower=0)
    agg = own.groupby(s["step"]).agg(["max", "median"])
    ratio = (agg["max"] / agg["median"]).where(agg["median"] > 0)
    return pd.DataFrame({"ratio": ratio, "excess_ns": agg["max"] - agg["median"]})


def _cpu_wait_grew(
    steps: pd.DataFrame, ranks: tuple[int, ...], before: pd.Index, slow: pd.Index
) -> float:
    """How much longer the group's most-waiting rank waited for a CPU per step (``cpu_wait_ns``)
    in the ``slow`` steps than in the steps ``before`` them (medians; ns); 0 without the waits.
    Read for a slow group only, from its ranks' rows."""
    if steps.empty or "cpu_wait_ns" not in steps or not len(slow):
        return 0.0
    s = steps[steps["rank"].isin(ranks)]
    if s.empty:
        return 0.0
    most = s["cpu_wait_ns"].astype(float).fillna(0).clip(lower=0).groupby(s["step"]).max()
    during = most.reindex(slow).dropna()
    if not len(during):
        return 0.0
    ref = most.reindex(before).dropna()
    return float(during.median()) - (float(ref.median()) if len(ref) else 0.0)


def _kind(g: str, ranks_of: dict, span: dict) -> tuple[int, int]:
    return (len(ranks_of[g]), len(span[g]))


def _pairs(hosts: tuple[str, ...]) -> set[tuple[str, str]]:
    return set(combinations(hosts, 2)) if len(hosts) > 1 else {(hosts[0], hosts[0])}


def _is_slow(
    values: np.ndarray,
    ref: np.ndarray | float,
    size: np.ndarray,
    floor: np.ndarray,
    cfg: LinkConfig,
) -> np.ndarray:
    """Per step: cost >= ``slow_ratio`` x ``ref`` and (cost - ref) x bytes >= ``floor``
    (``False`` where ``ref`` is NaN)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(
            (values >= cfg.slow_ratio * ref) & ((values - ref) * size >= floor), dtype=bool
        )


def _slow_period(
    values: np.ndarray,
    size: np.ndarray,
    floor: np.ndarray,
    peer: np.ndarray | None,
    cfg: LinkConfig,
) -> tuple[int, np.ndarray, float] | None:
    """The slow period (see the module doc): its start position, its slow flags and the reference
    cost it was judged against, or ``None``."""
    w = cfg.baseline_steps
    series = pd.Series(values)
    # The level before step t ends half a smoothing window before it: the centred median of
    # the steps just before t holds t's own values (a busy CI run: the two steps before the
    # limit, smoothed, already held its cost; with one noisy step they lifted the reference
    # from 14 to 17.6 and the doubled cost stayed slow in 79.7% of the steps, not 80%).
    lag = 1 + max(0, cfg.smooth_steps) // 2
    before = series.rolling(w, min_periods=max(2, w // 2)).median().shift(lag).to_numpy()
    peer_flags = np.zeros(len(values), dtype=bool)
    if peer is not None:
        peer_flags = _is_slow(values, peer, size, floor, cfg)
    above = _is_slow(values, before, size, floor, cfg)  # each step against the level before it
    starts = np.flatnonzero(above & ~np.r_[False, above[:-1]])
    candidates = [(int(t), float(before[t])) for t in starts]
    candidates += [(int(t), float("nan")) for t in np.flatnonzero(peer_flags)[:1]]
    best: tuple[float, int, np.ndarray, float] | None = None
    for t, ref in candidates:
        flags = peer_flags.copy()
        if not np.isnan(ref):
            flags[t:] |= _is_slow(values[t:], ref, size[t:], floor[t:], cfg)
        tail = flags[t:]
        if not tail[0] or tail.sum() < cfg.min_slow_steps or tail.mean() < cfg.persist_frac:
            continue
        evidence = float((tail - cfg.persist_frac).sum())
        if best is None or evidence > best[0] or (evidence == best[0] and t < best[1]):
            best = (evidence, t, flags, ref)
    if best is None:
        return None
    _, start, flags, ref = best
    if np.isnan(ref):
        assert peer is not None
        ref = float(np.nanmedian(peer[start:][flags[start:]]))
    elif start > 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            jump = values / before
        later = [int(t) for t in starts if t > start and np.isfinite(jump[t])]
        later = sorted(later, key=lambda t: -jump[t])[: cfg.max_later_starts]
        start = _refine_onset(values, flags, start, later, cfg)
    return start, flags, ref


def _refine_onset(
    values: np.ndarray, flags: np.ndarray, start: int, later: list[int], cfg: LinkConfig
) -> int:
    """The change point of the log cost in the candidate's period: the split ``t`` of one fixed
    span (``baseline_steps`` before the start to the end) into the two most homogeneous segments
    (least summed absolute deviation from each segment's median) with a higher median after,
    searched from the start to ``baseline_steps`` after it and at the ``later`` candidate starts
    inside the period; the onset is the first slow step at or after it. Noisy steps just before
    the real change (a busy host, the proxy's coarse waits), or a milder rise long before it
    (a busy host's gloo collectives 1.6x slower 23 steps before the link limit: CI), would
    otherwise date the onset early, before the fault: the biggest change is the fault's."""
    w = cfg.baseline_steps
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.log(np.where(values > 0, values, np.nan))
    x = np.nan_to_num(x, nan=float(np.nanmin(x)) if np.isfinite(x).any() else 0.0)
    last = len(x) - cfg.min_slow_steps
    hi = min(start + w, last)
    near = list(range(start, hi + 1))
    found = change_point(
        x, [*near, *(t for t in later if hi < t <= last)], max(0, start - w), len(x)
    )
    best = start if found is None else found
    onset = best + int(np.argmax(flags[best:])) if flags[best:].any() else start
    tail = flags[onset:]
    if tail.sum() < cfg.min_slow_steps or tail.mean() < cfg.persist_frac:
        return start
    return onset


def _slow_group(
    g: str,
    cost: pd.DataFrame,
    nbytes: pd.Series,
    peers: list[str],
    coll: pd.DataFrame,
    balance: pd.DataFrame,
    step_ns: pd.Series,
    cfg: LinkConfig,
    steps: pd.DataFrame,
    ranks: tuple[int, ...],
) -> dict | None:
    """The group's slow period and its numbers, or ``None`` when it is not a link suspect."""
    series = cost[g].dropna()
    if len(series) < cfg.min_slow_steps:
        return None
    values = series.to_numpy(dtype=float)
    size = nbytes.reindex(series.index).to_numpy(dtype=float)
    floor = (cfg.min_excess_frac * step_ns.reindex(series.index).fillna(0.0)).to_numpy(float)
    peer = cost[peers].median(axis=1).reindex(series.index).to_numpy(float) if peers else None
    found = _slow_period(values, size, floor, peer, cfg)
    if found is None:
        return None
    start, flags, ref = found
    slow_steps = series.index[start:][flags[start:]]
    rows = coll[(coll["pg"] == g) & coll["step"].isin(slow_steps)]
    summed = rows.groupby("step")["summary"].any()
    excess = (rows["transfer"] - ref * rows["bytes"]).clip(lower=0)
    per_step = excess.groupby(rows["step"]).sum()
    # A late rank: its own work is unbalanced by enough to explain the excess, or the skew.
    own = balance.reindex(slow_steps).dropna()
    late = float(own["excess_ns"].median()) if len(own) else 0.0
    unbalanced = len(own) > 0 and float(own["ratio"].median()) > cfg.max_compute_ratio
    med_transfer = float(rows["transfer"].median())
    med_skew = float(rows["skew"].median())
    skewed = med_skew > max(cfg.skew_floor_ns, cfg.max_skew_ratio * med_transfer)
    if (unbalanced and late >= cfg.max_compute_share * float(per_step.median())) or (
        skewed and late >= cfg.max_skew_ratio * med_skew
    ):
        return None
    before = series.index[max(0, start - cfg.baseline_steps) : start]
    if _cpu_wait_grew(steps, ranks, before, slow_steps) >= cfg.max_compute_share * float(
        per_step.median()
    ):
        return None  # its ranks waited for a CPU: contention (detectors.contention), not a link
    slowdown = None
    if len(step_ns.reindex(per_step.index).dropna()):
        slowdown = float(min(1.0, (per_step / step_ns.reindex(per_step.index)).median()))
    nth = slow_steps[min(cfg.min_slow_steps, len(slow_steps)) - 1]
    later = series.index[series.index >= nth][: cfg.smooth_steps // 2 + 1]
    return {
        "onset": None if start == 0 else int(series.index[start]),
        "detected": int(later[-1]),
        "persist": float(flags[start:].mean()),
        "ratio": float(series.loc[slow_steps].median() / ref) if ref > 0 else float("inf"),
        "transfer": med_transfer,
        "skew": med_skew,
        "imbalance": float(own["ratio"].median()) if len(own) else None,
        "slowdown": slowdown,
        "proxy": bool(rows["proxy"].any()),
        # the slow steps judged from node summaries: their share, and the window to fetch
        "summary": summed.mean() if len(summed) else 0.0,
        "summary_steps": (int(summed.index[summed].min()), int(summed.index[summed].max()))
        if summed.any()
        else None,
    }


def _finding(
    groups: list[str],
    slow: dict[str, dict],
    ranks_of: dict[str, tuple[int, ...]],
    span: dict[str, tuple[str, ...]],
    suspect: set[tuple[str, str]],
    fast_pairs: set[tuple[str, str]],
    has_fast_peer: bool,
    cfg: LinkConfig,
) -> Finding:
    stats = [slow[g] for g in groups]
    ranks = tuple(sorted({r for g in groups for r in ranks_of[g]}))
    pair = sorted(suspect)[0] if len(suspect) == 1 else None
    hosts = (
        tuple(sorted(set(pair))) if pair else tuple(sorted({h for g in groups for h in span[g]}))
    )
    slowdowns = [s["slowdown"] for s in stats if s["slowdown"] is not None]
    slowdown = max(slowdowns) if slowdowns else None
    if slowdown is None:
        severity = "warning"
    else:
        severity = (
            "critical"
            if slowdown >= cfg.critical_slowdown
            else "warning"
            if slowdown >= cfg.warn_slowdown
            else "info"
        )
    persist = statistics.mean(s["persist"] for s in stats)
    measured = not any(s["proxy"] for s in stats)
    confidence = 0.4 + 0.3 * persist + 0.15 * measured + 0.1 * bool(pair or has_fast_peer)
    onsets = [s["onset"] for s in stats if s["onset"] is not None]
    summed = [s["summary_steps"] for s in stats if s["summary_steps"] is not None]
    # before ": suspect the link", which the refinements keep
    judged = (
        f" (judged from node summaries; the raw collectives of steps "
        f"{min(a for a, _ in summed)}-{max(b for _, b in summed)} would confirm)"
        if summed
        else ""
    )
    name = ",".join(groups)
    where = f"between {' and '.join(hosts)}" if len(hosts) > 1 else f"inside {hosts[0]}"
    if pair and pair not in fast_pairs:
        probe = f"confirm with a point-to-point bandwidth probe between {pair[0]} and {pair[1]}"
    else:
        probe = (
            f"confirm with point-to-point bandwidth probes between ranks "
            f"{', '.join(map(str, ranks))} "
            f"({where}), against a fast group's ranks on the same hosts"
        )
    evidence = []
    for g, s in zip(groups, stats, strict=True):
        note = "proxy: collective_wait_ns" if s["proxy"] else ""
        evidence += [
            Evidence(
                metric="transfer_cost_ratio",
                subject=f"group {g}",
                value=s["ratio"],
                reference=1.0,
                unit="x",
                note=note,
            ),
            Evidence(
                metric="arrival_skew_ns",
                subject=f"group {g}",
                value=s["skew"],
                reference=s["transfer"],
                unit="ns",
                note="median skew vs median transfer",
            ),
        ]
        if s["imbalance"] is not None:
            evidence.append(
                Evidence(
                    metric="compute_imbalance",
                    subject=f"group {g}",
                    value=s["imbalance"],
                    reference=cfg.max_compute_ratio,
                    unit="max/median",
                )
            )
        if s["summary_steps"] is not None:
            first, last = s["summary_steps"]
            evidence.append(
                Evidence(
                    metric=FROM_SUMMARIES,
                    subject=f"group {g}",
                    value=float(s["summary"]),
                    unit="share of slow steps",
                    note=f"judged from node summaries: fetch the raw collectives of steps "
                    f"{first}-{last} to confirm",
                )
            )
    return Finding(
        id=f"link:{name}",
        symptom="slowdown",
        cause="link",
        severity=severity,
        ranks=ranks,
        hosts=hosts,
        link=LinkRef(ranks=ranks, hosts=hosts, group=name),
        onset_step=min(onsets) if onsets else None,
        detected_step=max(s["detected"] for s in stats),
        slowdown=slowdown,
        confidence=min(0.95, confidence),
        summary=(
            f"collectives of group {name} (ranks {list(ranks)}) are "
            f"{stats[0]['ratio']:.1f}x slower per byte{judged} while compute is balanced and ranks "
            f"arrive together: suspect the link "
            f"{where}; {probe}"
        ),
        evidence=tuple(evidence),
    )
