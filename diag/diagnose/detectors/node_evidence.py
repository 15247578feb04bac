"""Corroboration of a node finding: what besides step times says the culprit is slow.

The node detector names a culprit from compute times alone; this module looks for independent
signs of the same thing over the anomaly (the wall-clock span from the first step of the anomaly
to its last, all ranks) and returns them as :class:`Evidence` plus the *sources* that agree.
Only what corroborates becomes evidence; missing telemetry, an unmapped GPU or a quiet host add
nothing and never raise.

- ``gpu`` (GPU slowdown), the culprit's GPU(s) against its peers' (the GPUs of the ranks doing
  the same work, as the node detector compared them; else of the job's other ranks), each
  GPU's median over the anomaly, then the median over GPUs: SM clock at least ``CLOCK_DROP``
  (5%) lower; share of samples with a slowdown throttle reason set at least
  ``THROTTLE_SHARE`` (0.25) above the peers' share; temperature at least ``TEMP_EXCESS_C``
  (10 C) higher; power at least ``POWER_DIFF`` (15%) off the peers' median, either way; the
  PCIe link (schema 1.12) trained narrower than its maximum and than the peers' links (median
  width), or, over the samples with the GPU busy (``BUSY_UTIL_PCT``: an idle link steps its
  generation down to save power), at a lower generation than its maximum and the peers' busy
  links.
- ``gpu_errors``: XID events on the culprit's GPU from the first analysed step to the anomaly's
  end, more per GPU than on the peers' GPUs; growth (max - min over that span) of the volatile
  ECC counters on the culprit's worst GPU: any double-bit error, or more single-bit errors than
  the peers' median GPU; a row remap pending a reset or failed (set on the culprit's GPU, on
  none of the peers'); growth of uncorrectable remapped rows or retired pages (any), of NVLink
  CRC, replay or recovery errors (more than the peers' median GPU).
- ``host`` (contention): CPU cores used on the culprit's host by processes other than the job's
  ranks, per collector cycle (host and proc samples of one cycle share ``ts_ns``)
  ``others = num_cpus x cpu_busy_pct / 100 - sum(ranks' cpu_pct) / 100``; the median over the
  anomaly must exceed, by ``max(CONTENTION_CORES, CONTENTION_FRAC x num_cpus)`` (1 core, 5% of
  the host), each reference there is: the same host's median before onset and the other hosts'
  median over the anomaly. Data-loader workers are child processes, so they count as "others":
  the two references keep their steady load from counting.
- Own history (:func:`history`), the culprit's median compute before onset against in the
  anomaly, is evidence but not a source: it restates what the detector measured.

Rank -> GPU, by the surest evidence there is: the device's UUID (``RankInfo.device_uuid``,
schema 1.10) matched to a GPU sample's ``uuid`` on the rank's host, which holds whatever
``CUDA_VISIBLE_DEVICES`` does; else the rank's latest ``RankInfo.device`` ``"cuda:N"`` gives GPU
``N`` on the rank's host (``"cpu"``: no GPU), right only when the process sees every device in
NVML's order; else the rank's ``local_rank`` (torchrun's one GPU per local rank).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.diagnose.features import Features
from diag.findings import Evidence

CLOCK_DROP = 0.05
THROTTLE_SHARE = 0.25
TEMP_EXCESS_C = 10.0
POWER_DIFF = 0.15
BUSY_UTIL_PCT = 50.0
CONTENTION_CORES = 1.0
CONTENTION_FRAC = 0.05

GpuKey = tuple[str, int]  # (host, gpu_index)


@dataclass(frozen=True, slots=True, kw_only=True)
class Corroboration:
    """Evidence that corroborates a finding, and the independent sources it came from
    (``"gpu"``, ``"gpu_errors"``, ``"host"``; each at most once)."""

    evidence: tuple[Evidence, ...] = ()
    sources: tuple[str, ...] = ()


def corroborate(
    features: Features,
    *,
    ranks: tuple[int, ...],
    host: str,
    anomaly: tuple[int, int],
    before: tuple[int, int] | None,
    peers: tuple[int, ...] | None = None,
) -> Corroboration:
    """Corroboration of ``ranks`` (on ``host``) being slow over the steps ``anomaly`` (first,
    last), with the steps ``before`` onset (first, last; ``None`` for a finding from the
    start). ``peers``: the ranks whose GPUs are the reference (the ranks doing the same work;
    None: every other rank)."""
    span = _span(features.steps, anomaly)
    if span is None:
        return Corroboration()
    before_span = _span(features.steps, before) if before is not None else None
    since_ns = before_span[0] if before_span is not None else span[0]  # first analysed step
    evidence: list[Evidence] = []
    sources: list[str] = []
    has_gpu_data = not (features.gpu.empty and features.xid.empty)
    gpus = gpu_of_ranks(features) if has_gpu_data else {}
    mine = sorted({gpus[r] for r in ranks if r in gpus})
    peers_gpus = {g for r, g in gpus.items() if r not in ranks and (peers is None or r in peers)}
    others = sorted(peers_gpus - set(mine))
    if mine:
        who = _gpu_name(mine, gpus)
        for source, found in (
            ("gpu", _gpu_slowdown(features.gpu, mine, others, span, who)),
            ("gpu_errors", _gpu_errors(features, mine, others, (since_ns, span[1]), who)),
        ):
            if found:
                evidence.extend(found)
                sources.append(source)
    contention = _contention(features, host, span, before_span)
    if contention:
        evidence.extend(contention)
        sources.append("host")
    return Corroboration(evidence=tuple(evidence), sources=tuple(sources))


def history(rank: int, before_ms: float, after_ms: float) -> Evidence:
    """The rank's own median compute in the anomaly against its median before onset."""
    ratio = after_ms / before_ms if before_ms > 0 else float("nan")
    return Evidence(
        metric="own_compute_ms",
        subject=f"rank {rank}",
        value=after_ms,
        reference=before_ms,
        unit="ms",
        note=f"its median in the anomaly vs its own before onset ({ratio:.2f}x)",
    )


def gpu_of_ranks(features: Features) -> dict[int, GpuKey]:
    """rank -> (host, GPU index) as the hooks report it (see the module docstring)."""
    out: dict[int, GpuKey] = {}
    steps = features.step_events
    if not steps.empty and {"rank", "host", "local_rank"} <= set(steps.columns):
        last = steps[steps["rank"] >= 0].groupby("rank")[["host", "local_rank"]].last()
        last = last[last["local_rank"] >= 0]
        hosts, indexes = last["host"].astype(str).tolist(), last["local_rank"].astype(int).tolist()
        keys = zip(hosts, indexes, strict=True)
        out.update(zip(last.index.astype(int).tolist(), keys, strict=True))
    info = features.rank_info
    if not info.empty and {"rank", "host", "device"} <= set(info.columns):
        info = info[(info["rank"] >= 0) & (info["device"].astype(str) != "")]
        last = info.groupby("rank")[["host", "device"]].last()
        device = last["device"].astype(str)
        index = device.str.removeprefix("cuda:")
        cuda = device.str.startswith("cuda:") & index.str.isdigit()
        for rank in last.index[~device.str.startswith("cuda")].tolist():
            out.pop(int(rank), None)  # a CPU rank has no GPU, whatever its local rank
        hosts, indexes = last.loc[cuda, "host"].astype(str).tolist(), index[cuda].astype(int)
        keys = zip(hosts, indexes.tolist(), strict=True)
        out.update(zip(last.index[cuda].astype(int).tolist(), keys, strict=True))
    out.update(_by_uuid(features))
    return out


def _uuid_key(text: object) -> str:
    """A device UUID as both sides can write it: NVML's ``GPU-<hex>``, torch's bare ``<hex>``."""
    return str(text or "").strip().lower().removeprefix("gpu-")


def _by_uuid(features: Features) -> dict[int, GpuKey]:
    """rank -> (host, NVML index) where the rank's device UUID is among its host's samples."""
    info, gpu = features.rank_info, features.gpu
    need_info, need_gpu = {"rank", "host", "device_uuid"}, {"host", "gpu_index", "uuid"}
    if info.empty or gpu.empty or not (need_info <= set(info.columns)):
        return {}
    if not need_gpu <= set(gpu.columns):
        return {}
    info = info[(info["rank"] >= 0) & (info["device_uuid"].astype(str) != "")]
    if info.empty:
        return {}
    last = info.groupby("rank")[["host", "device_uuid"]].last()
    devices = gpu[["host", "gpu_index", "uuid"]].drop_duplicates()
    index = {
        (str(h), _uuid_key(u)): int(i)
        for h, i, u in zip(devices["host"], devices["gpu_index"], devices["uuid"], strict=True)
        if _uuid_key(u)
    }
    out: dict[int, GpuKey] = {}
    for rank, host, uuid in zip(last.index, last["host"], last["device_uuid"], strict=True):
        found = index.get((str(host), _uuid_key(uuid)))
        if found is not None:
            out[int(rank)] = (str(host), found)
    return out


# -- GPU ------------------------------------------------------------------------------------------


def _gpu_rows(rows: pd.DataFrame, keys: list[GpuKey], span: tuple[int, int]) -> pd.DataFrame:
    """The rows (GPU samples, XID events) of the GPUs ``keys`` within ``span``."""
    if rows.empty or not keys or not {"host", "gpu_index", "ts_ns"} <= set(rows.columns):
        return rows.iloc[0:0]
    in_span = rows[(rows["ts_ns"] >= span[0]) & (rows["ts_ns"] <= span[1])]
    index = pd.MultiIndex.from_frame(in_span[["host", "gpu_index"]].astype({"host": str}))
    return in_span[index.isin(keys)]


def _median_of_gpus(rows: pd.DataFrame, column: str) -> float | None:
    """Median over GPUs of each GPU's median of ``column`` (NA dropped); None without values."""
    if rows.empty or column not in rows.columns:
        return None
    values = pd.to_numeric(rows[column], errors="coerce").astype(float)
    per_gpu = values.groupby([rows["host"], rows["gpu_index"]]).median().dropna()
    return float(per_gpu.median()) if len(per_gpu) else None


def _gpu_slowdown(
    gpu: pd.DataFrame, mine: list[GpuKey], peers: list[GpuKey], span: tuple[int, int], who: str
) -> list[Evidence]:
    own, other = _gpu_rows(gpu, mine, span), _gpu_rows(gpu, peers, span)
    if own.empty or other.empty:
        return []
    out = []
    clock, ref = _median_of_gpus(own, "sm_clock_mhz"), _median_of_gpus(other, "sm_clock_mhz")
    if clock is not None and ref and clock <= (1 - CLOCK_DROP) * ref:
        note = "median SM clock in the anomaly vs the peers' GPUs"
        out.append(_gpu_ev("gpu_sm_clock_mhz", who, clock, ref, "MHz", note))
    if "throttle_reasons" in own.columns:
        throttled = own["throttle_reasons"].astype(str) != ""
        share = float(throttled.mean())
        ref_share = float((other["throttle_reasons"].astype(str) != "").mean())
        if share - ref_share >= THROTTLE_SHARE:
            reasons = Counter(
                r for names in own.loc[throttled, "throttle_reasons"] for r in str(names).split(",")
            )
            named = ", ".join(r for r, _ in reasons.most_common())
            note = f"share of samples throttled ({named}) in the anomaly vs the peers' GPUs"
            out.append(_gpu_ev("gpu_throttled_share", who, share, ref_share, "fraction", note))
    temp, ref = _median_of_gpus(own, "temp_c"), _median_of_gpus(other, "temp_c")
    if temp is not None and ref is not None and temp - ref >= TEMP_EXCESS_C:
        note = "median temperature in the anomaly vs the peers' GPUs"
        out.append(_gpu_ev("gpu_temp_c", who, temp, ref, "C", note))
    power, ref = _median_of_gpus(own, "power_w"), _median_of_gpus(other, "power_w")
    if power is not None and ref and abs(power - ref) >= POWER_DIFF * ref:
        way = "lower" if power < ref else "higher"
        note = f"median power draw in the anomaly vs the peers' GPUs ({way})"
        out.append(_gpu_ev("gpu_power_w", who, power, ref, "W", note))
    out.extend(_pcie_link(own, other, who))
    return out


def _pcie_link(own: pd.DataFrame, other: pd.DataFrame, who: str) -> list[Evidence]:
    """A PCIe link trained below its maximum width, or generation while busy, and the peers'."""
    out = []
    width, ref = _median_of_gpus(own, "pcie_link_width"), _median_of_gpus(other, "pcie_link_width")
    width_max = _median_of_gpus(own, "pcie_link_width_max")
    if width and ref and width_max and width < width_max and width < ref:
        note = f"PCIe link width in the anomaly (x{width:g} of x{width_max:g}) vs the peers' GPUs"
        out.append(_gpu_ev("gpu_pcie_link_width", who, width, ref, "lanes", note))
    if "util_pct" in own.columns and "util_pct" in other.columns:
        busy_own = own[pd.to_numeric(own["util_pct"], errors="coerce") >= BUSY_UTIL_PCT]
        busy_other = other[pd.to_numeric(other["util_pct"], errors="coerce") >= BUSY_UTIL_PCT]
        gen = _median_of_gpus(busy_own, "pcie_link_gen")
        ref = _median_of_gpus(busy_other, "pcie_link_gen")
        gen_max = _median_of_gpus(own, "pcie_link_gen_max")
        if gen and ref and gen_max and gen < gen_max and gen < ref:
            note = f"PCIe generation while busy (Gen{gen:g} of Gen{gen_max:g}) vs the peers' GPUs"
            out.append(_gpu_ev("gpu_pcie_link_gen", who, gen, ref, "generation", note))
    return out


def _gpu_errors(
    features: Features,
    mine: list[GpuKey],
    peers: list[GpuKey],
    span: tuple[int, int],
    who: str,
) -> list[Evidence]:
    out = []
    xid = features.xid
    if not xid.empty and {"host", "gpu_index", "ts_ns", "xid"} <= set(xid.columns):
        own, other = _gpu_rows(xid, mine, span), _gpu_rows(xid, peers, span)
        ref = len(other) / len(peers) if peers else 0.0
        if len(own) and len(own) / len(mine) > ref:
            codes = ", ".join(str(x) for x, _ in Counter(own["xid"].astype(int)).most_common())
            note = f"XID {codes} from the first analysed step to the anomaly's end (peers: per GPU)"
            out.append(_gpu_ev("gpu_xid_events", who, float(len(own)), ref, "events", note))
    own, other = _gpu_rows(features.gpu, mine, span), _gpu_rows(features.gpu, peers, span)
    for column, kind in (("ecc_dbe_volatile", "double"), ("ecc_sbe_volatile", "single")):
        grown, ref_grown = _growth(own, column), _growth(other, column)
        if grown is None:
            continue
        worst = float(grown.max())
        ref = float(ref_grown.median()) if ref_grown is not None else 0.0
        if worst > 0 and (kind == "double" or worst > ref):
            note = f"new {kind}-bit ECC errors from the first analysed step to the anomaly's end"
            note += " (the culprit's worst GPU; peers: median GPU)"
            out.append(_gpu_ev(f"gpu_{column}", who, worst, ref, "errors", note))
    out.extend(_memory_and_nvlink(own, other, who))
    return out


#: Cumulative health counters (schema 1.12): column, what grew, whether any growth counts (else
#: only more than the peers' median GPU).
_HEALTH_COUNTERS = (
    ("remapped_rows_uncorrectable", "rows remapped for uncorrectable errors", True),
    ("retired_pages_dbe", "pages retired for double-bit errors", True),
    ("retired_pages_sbe", "pages retired for repeated single-bit errors", True),
    ("nvlink_crc_flit_errors", "NVLink CRC flit errors", False),
    ("nvlink_crc_data_errors", "NVLink CRC data errors", False),
    ("nvlink_replay_errors", "NVLink replays", False),
    ("nvlink_recovery_errors", "NVLink recoveries", False),
)


def _memory_and_nvlink(own: pd.DataFrame, other: pd.DataFrame, who: str) -> list[Evidence]:
    """Row-remap flags set on the culprit's GPU only; growth of memory and NVLink error counts."""
    out = []
    for column, what in (
        ("row_remap_failure", "a row remap failed (NVIDIA's RMA criterion)"),
        ("row_remap_pending", "a row remap waits for a GPU reset"),
        ("retired_pages_pending", "a page retirement waits for a GPU reset"),
    ):
        mine, ref = _flag_share(own, column), _flag_share(other, column)
        if mine is not None and mine > 0 and not ref:
            note = f"{what}: share of samples with it set, from the first analysed step to the"
            note += " anomaly's end, vs the peers' GPUs'"
            out.append(_gpu_ev(f"gpu_{column}", who, mine, ref or 0.0, "fraction", note))
    for column, what, any_growth in _HEALTH_COUNTERS:
        grown, ref_grown = _growth(own, column), _growth(other, column)
        if grown is None:
            continue
        worst = float(grown.max())
        ref = float(ref_grown.median()) if ref_grown is not None else 0.0
        if worst > 0 and (any_growth or worst > ref):
            note = f"new {what} from the first analysed step to the anomaly's end"
            note += " (the culprit's worst GPU; peers: median GPU)"
            out.append(_gpu_ev(f"gpu_{column}", who, worst, ref, "count", note))
    return out


def _flag_share(rows: pd.DataFrame, column: str) -> float | None:
    """Share of ``rows`` with the 0/1 flag ``column`` set; None without any value."""
    if rows.empty or column not in rows.columns:
        return None
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return float((values > 0).mean()) if len(values) else None


def _growth(rows: pd.DataFrame, column: str) -> pd.Series | None:
    """Per GPU, max - min of a cumulative counter over ``rows``; None without any value."""
    if rows.empty or column not in rows.columns:
        return None
    values = pd.to_numeric(rows[column], errors="coerce").astype(float)
    by_gpu = values.groupby([rows["host"], rows["gpu_index"]])
    grown = (by_gpu.max() - by_gpu.min()).dropna()
    return grown if len(grown) else None


def _gpu_name(mine: list[GpuKey], gpus: dict[int, GpuKey]) -> str:
    ranks = sorted(r for r, g in gpus.items() if g in mine)
    hosts = sorted({h for h, _ in mine})
    which = ", ".join(str(i) for _, i in mine)
    plural = "s" if len(mine) > 1 else ""
    return f"{'/'.join(hosts)} GPU{plural} {which} (rank{plural} {', '.join(map(str, ranks))})"


def _gpu_ev(metric: str, who: str, value: float, ref: float, unit: str, note: str) -> Evidence:
    return Evidence(metric=metric, subject=who, value=value, reference=ref, unit=unit, note=note)


# -- host contention ------------------------------------------------------------------------------


def _others_cpu(features: Features) -> pd.DataFrame:
    """Per host sample: ``others_cores`` (CPU cores used by non-rank processes) and num_cpus."""
    host, proc = features.host, features.proc
    need = {"host", "ts_ns", "num_cpus", "cpu_busy_pct"}
    if host.empty or proc.empty or not need <= set(host.columns):
        return pd.DataFrame(columns=["host", "ts_ns", "num_cpus", "others_cores"])
    ranks_pct = proc[proc["rank"] >= 0].groupby(["host", "ts_ns"])["cpu_pct"].sum()
    joined = host.join(ranks_pct.rename("ranks_pct"), on=["host", "ts_ns"], how="inner")
    joined = joined[joined["num_cpus"] > 0]
    busy = joined["num_cpus"] * joined["cpu_busy_pct"] / 100.0
    others = (busy - joined["ranks_pct"] / 100.0).clip(lower=0.0)
    return joined.assign(others_cores=others)[["host", "ts_ns", "num_cpus", "others_cores"]]


def _contention(
    features: Features,
    host: str,
    span: tuple[int, int],
    before: tuple[int, int] | None,
) -> list[Evidence]:
    cpu = _others_cpu(features)
    if cpu.empty or not host:
        return []

    def median(rows: pd.DataFrame, within: tuple[int, int]) -> float | None:
        rows = rows[(rows["ts_ns"] >= within[0]) & (rows["ts_ns"] <= within[1])]
        return float(rows["others_cores"].median()) if len(rows) else None

    mine = cpu[cpu["host"] == host]
    now = median(mine, span)
    if now is None:
        return []
    floor = max(CONTENTION_CORES, CONTENTION_FRAC * float(mine["num_cpus"].median()))
    earlier = median(mine, before) if before is not None else None
    others = [median(rows, span) for _, rows in cpu[cpu["host"] != host].groupby("host")]
    elsewhere = [m for m in others if m is not None]
    peers = float(pd.Series(elsewhere).median()) if elsewhere else None
    refs = [r for r in (earlier, peers) if r is not None]
    if not refs or any(now - r < floor for r in refs):
        return []
    what = f"CPU cores used on {host} by processes other than the job's ranks: median"
    out = []
    if earlier is not None:
        note = f"{what} in the anomaly vs before onset"
        out.append(_host_ev(host, now, earlier, note))
    if peers is not None:
        note = f"{what} in the anomaly vs the other hosts' median"
        out.append(_host_ev(host, now, peers, note))
    return out


def _host_ev(host: str, value: float, ref: float, note: str) -> Evidence:
    return Evidence(
        metric="host_other_cpu_cores",
        subject=host,
        value=value,
        reference=ref,
        unit="cores",
        note=note,
    )


# -- spans ----------------------------------------------------------------------------------------


def _span(steps: pd.DataFrame, first_last: tuple[int, int]) -> tuple[int, int] | None:
    """Wall-clock (start of the first step, end of the last) over all ranks, or None."""
    if steps.empty:
        return None
    step = steps["step"].to_numpy()
    inside = (step >= first_last[0]) & (step <= first_last[1])
    if not inside.any():
        return None
    # two columns, not the whole frame (at 32k ranks a row selection of every column: 0.1 s),
    # reduced where inside, not gathered (at 131,072 ranks the gather was 60 MB, the node
    # detector's peak)
    start, end = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    if start.dtype.kind != "i" or end.dtype.kind != "i":
        return int(start[inside].min()), int(end[inside].max())
    first = start.min(where=inside, initial=np.iinfo(start.dtype).max)
    last = end.max(where=inside, initial=np.iinfo(end.dtype).min)
    return int(first), int(last)
