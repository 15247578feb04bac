"""Choosing a run's layout (:func:`infer`), and work classes from the ranks' time profiles.

:func:`infer` takes the best source there is (:mod:`~diag.diagnose.layout`): a timing table's
columns, else the process groups, else the time profiles (:func:`from_profiles`), else one class
holding every rank.

A *profile* is one row per rank of per-phase times (ms; e.g. median forward, backward, optimizer,
data, wait per step over the run's early steps, and for timing tables where in the step the
rank's compute begins: a later pipeline stage starts later). Ranks doing the same work have the
same profile up to noise; a pipeline stage that does more (or other) work does not.

:func:`from_profiles` is conservative: unless every check below holds, it answers None and the
caller keeps one class holding every rank (today's comparison with all ranks).

1. Distinct ranks: a rank is distinct when some phase differs from the median rank's by more
   than ``DISTINCT`` (10%, on a log scale) and by more than ``z`` standard errors of the rank's
   median of it (a profile's ``<phase>_se`` columns, :func:`summarize`; at least the ranks'
   median standard error), ``z`` at least ``NOISE_SE`` (4) and large enough that all ranks and
   phases together stray that far by chance with probability under 1% (Bonferroni).
   Fewer than two distinct ranks: one class (a single odd rank is a suspect, never a class of
   its own). Distinct ranks all on one host (of several): one class (a host that differs is a
   node question, not a layout).
2. Clusters: agglomerative (Ward) clustering (scikit-learn; ``k`` = 2 to ``MAX_CLASSES``) of
   the log profiles, standardized per phase, on at most 1,024 ranks (a seeded sample; the others
   join the nearest class centre); the partition with the best silhouette is kept only when
   its silhouette is at least ``MIN_SILHOUETTE`` (0.6: clearly separated), every class holds at
   least two ranks, class sizes are multiples of the smallest (a PP x DP x TP layout's classes
   are unions of equal-size positions), and no class lies on a single host (of several).

scikit-learn is imported only when step 2 runs (it costs about a second to import).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from statistics import NormalDist

import numpy as np
import pandas as pd

from diag.diagnose.layout import Layout, from_process_groups, unknown
from diag.store.groupwise import medians_by

DISTINCT = 0.10
NOISE_SE = 4.0
MAX_CLASSES = 8
MIN_SILHOUETTE = 0.6
_SEED = 0
_SAMPLE = 1024  # ranks clustered (the others join the nearest class)


#: StepEvent columns (ns) that make a live run's profile.
STEP_PHASES = ("forward_ns", "backward_ns", "optimizer_ns", "data_wait_ns", "collective_wait_ns")


def infer(
    ranks: list[int],
    hosts: Mapping[int, str],
    *,
    groups: pd.DataFrame | None = None,
    collectives: pd.DataFrame | None = None,
    profiles: pd.DataFrame | None = None,
) -> Layout:
    """The layout of a run's ``ranks`` from its process groups and collectives, else from its
    per-rank ``profiles``; one class holding every rank when neither says it."""
    empty = pd.DataFrame()
    found = from_process_groups(
        groups if groups is not None else empty,
        collectives if collectives is not None else empty,
        ranks,
        hosts,
    )
    if found is None and profiles is not None and len(ranks) >= 4:
        found = from_profiles(profiles.reindex(ranks), hosts)
    return found if found is not None else unknown(ranks)


def early_steps(steps: pd.Series, warmup_steps: int, min_steps: int = 10) -> pd.Series:
    """Which rows of a frame (``steps``: its step column) are early analysed steps: after
    ``warmup_steps``, the first third of the rest (at least ``min_steps``). A work class is the
    job's from the start; a fault that begins later should not make one."""
    return steps.isin(early(steps.unique(), warmup_steps, min_steps))


def early(distinct: np.ndarray, warmup_steps: int, min_steps: int = 10) -> np.ndarray:
    """The early analysed steps of a run whose steps are ``distinct`` (see :func:`early_steps`)."""
    distinct = np.sort(distinct)
    rest = distinct[warmup_steps:] if len(distinct) > warmup_steps + min_steps else distinct
    return rest[: max(min_steps, len(rest) // 3)]


def profiles_from_steps(step_events: pd.DataFrame, warmup_steps: int = 5) -> pd.DataFrame:
    """Per rank, over its early steps, each of :data:`STEP_PHASES` (ms): see
    :func:`summarize`."""
    cols = [c for c in STEP_PHASES if c in step_events.columns]
    if step_events.empty or not cols or not {"rank", "step"} <= set(step_events.columns):
        return pd.DataFrame()
    # the rows first, then each phase column alone: filtering the frame copied every column of
    # it (at 131,072 ranks x 50 steps, the features' peak: ~1 GB of step rows), and a frame of
    # the chosen rows' phases held five columns, and the deviations five more (~0.4 GB)
    # and the early rows as one mask over the columns as the store holds them: positions of
    # every training rank's row and a Series of their steps were ~100 MB at that size
    step, rank = step_events["step"].to_numpy(), step_events["rank"].to_numpy()
    ranked = rank >= 0
    every = bool(ranked.all())
    distinct = pd.unique(step if every else step[ranked])
    ranked &= np.isin(step, early(distinct, warmup_steps))
    chosen = np.flatnonzero(ranked)
    del ranked
    keys = rank[chosen]

    def phase_ms(name: str) -> np.ndarray:
        return step_events[name].array.take(chosen).to_numpy(dtype=float, na_value=np.nan) / 1e6

    return _profile(keys, {c: functools.partial(phase_ms, c) for c in cols})


def summarize(per_step: pd.DataFrame) -> pd.DataFrame:
    """A profile from per (rank, step) phase times (ms; index rank, step): per rank and phase
    the median over steps, and ``<phase>_se``, the standard error of that median (``1.2533 x
    1.4826 x MAD / sqrt(steps)``): how far two ranks doing the same work may differ by noise."""
    keys = per_step.index.get_level_values("rank").to_numpy()

    def values(name: str) -> np.ndarray:
        return per_step[name].to_numpy(dtype=float, na_value=np.nan)

    return _profile(keys, {c: functools.partial(values, c) for c in per_step.columns})


def _profile(keys: np.ndarray, columns: Mapping[str, Callable[[], np.ndarray]]) -> pd.DataFrame:
    """:func:`summarize` of the rows whose ranks are ``keys``, one phase at a time (each
    column's values made when needed and let go of after)."""
    names = list(columns)
    ranks, med, mad = None, {}, {}
    for name in names:
        values = columns[name]()
        ranks, got = medians_by(keys, {name: values})
        med[name] = got[name]
        row = np.searchsorted(ranks, keys)  # each row's rank, as a position in ``ranks``
        _, dev = medians_by(keys, {name: np.abs(values - med[name][row])})
        mad[name] = dev[name]
        del values, row
    if ranks is None:
        ranks = np.unique(keys)
    size = np.sqrt(np.bincount(np.searchsorted(ranks, keys), minlength=len(ranks)).astype(float))
    index = pd.Index(ranks, name="rank")
    med_frame = pd.DataFrame(med, index=index, columns=names)
    se = pd.DataFrame(
        {c: 1.2533 * (mad[c] * 1.4826) / size for c in names}, index=index, columns=names
    )
    return pd.concat([med_frame, se.add_suffix("_se")], axis=1).astype(float)


def from_profiles(profiles: pd.DataFrame, hosts: Mapping[int, str]) -> Layout | None:
    """Work classes of the ranks (``profiles``: index rank, one column per phase, ms) or None
    when the profiles do not clearly say them (see the module docstring)."""
    profiles = profiles.dropna()
    phases = [c for c in profiles.columns if not str(c).endswith("_se")]
    n = len(profiles)
    if n < 4 or not phases:
        return None
    values = profiles[phases].to_numpy(dtype=float).clip(min=0.0)
    se_cols = [f"{p}_se" for p in phases]
    se = profiles.reindex(columns=se_cols).fillna(0.0).to_numpy(dtype=float)
    scale = np.median(values, axis=0)
    eps = 0.01 * np.maximum(scale, 0.0) + 0.01  # phases near 0 ms do not make ranks distinct
    x = np.log(values + eps)
    dev = np.abs(x - np.median(x, axis=0))
    # Distinct: more than DISTINCT apart, and beyond noise: more than z standard errors of the
    # rank's median (its own, or the ranks' typical one if larger: a few steps can make one
    # rank's look tiny), z such that all ranks and phases together stray that far by chance
    # with probability under 1% (many ranks make some stray 10% from the median by noise).
    se = np.maximum(se, np.median(se, axis=0))
    z = max(NOISE_SE, NormalDist().inv_cdf(1.0 - 0.01 / (2 * values.size)))
    beyond_noise = np.abs(values - scale) > z * se
    distinct = ((dev > np.log1p(DISTINCT)) & beyond_noise).any(axis=1)
    ranks = [int(r) for r in profiles.index]
    odd = [r for r, d in zip(ranks, distinct, strict=True) if d]
    many_hosts = len({hosts.get(r, "") for r in ranks}) > 1
    if len(odd) < 2 or (many_hosts and len({hosts.get(r, "") for r in odd}) == 1):
        return None
    labels = _best_partition(x, n)
    if labels is None:
        return None
    sizes = np.bincount(labels)
    if sizes.min() < 2 or (sizes % sizes.min()).any():
        return None
    if many_hosts:
        for k in range(len(sizes)):
            members = [r for r, lab in zip(ranks, labels, strict=True) if lab == k]
            if len({hosts.get(r, "") for r in members}) == 1:
                return None
    # Class ids in order of the classes' total time, lightest first.
    order = np.argsort([values[labels == k].sum(axis=1).mean() for k in range(len(sizes))])
    ids = {int(k): i for i, k in enumerate(order)}
    work_class = {r: ids[int(lab)] for r, lab in zip(ranks, labels, strict=True)}
    counts = ", ".join(str(int(sizes[k])) for k in order)
    return Layout(
        source="time profiles",
        work_class=work_class,
        summary=f"{len(sizes)} work classes of {counts} ranks",
    )


def _best_partition(x: np.ndarray, n: int) -> np.ndarray | None:
    """The best clearly separated partition of the rows of ``x`` (see the module docstring):
    agglomerative (Ward) clustering of at most ``_SAMPLE`` rows (seeded), the other rows
    joining the nearest class centre."""
    from sklearn.cluster import AgglomerativeClustering  # lazily: a second to import
    from sklearn.metrics import silhouette_score

    std = x.std(axis=0)
    z = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)
    rng = np.random.default_rng(_SEED)
    sample = np.sort(rng.choice(n, size=min(n, _SAMPLE), replace=False))
    zs = z[sample]
    best, best_score = None, MIN_SILHOUETTE - 1e-9
    for k in range(2, min(MAX_CLASSES, len(sample) // 2) + 1):
        labels = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(zs)
        score = float(silhouette_score(zs, labels))
        if score > best_score:
            best, best_score = labels, score
    if best is None:
        return None
    centres = np.stack([zs[best == k].mean(axis=0) for k in range(int(best.max()) + 1)])
    dist = ((z[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    return np.asarray(dist.argmin(axis=1))
