"""run_all's order: the detectors that build no step x rank table run before those that do."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.diagnose.detectors import registry
from diag.diagnose.features import Features
from diag.store.run_store import RunStore
from tests.fakes.scenarios import Scenario


def _wide_tables(features: Features) -> list[object]:
    return [k for k in features._memo if isinstance(k, tuple) and k[0] == "wide"]


def _features(tmp_path: Path) -> Features:
    run = Scenario(slow_ranks=(2,), onset_step=40, severity=0.3, ckpt_every=25, ckpt_ms=800)
    return Features.from_store(run.write(tmp_path))


def test_detectors_outside_the_wide_readers_build_no_step_by_rank_table(tmp_path: Path) -> None:
    """WIDE_READERS is a memory hint run_all relies on: each detector left out of it must not
    build a table (it would run first and leave it to the others)."""
    _features(tmp_path)  # writes the run
    for name, detect in registry.DETECTORS.items():
        if name in registry.WIDE_READERS:
            continue
        fresh = Features.from_store(RunStore.open(tmp_path))
        detect(fresh, registry.DEFAULT_CONFIGS[name])
        assert _wide_tables(fresh) == [], name
    # and the readers do read them (the set is not stale the other way either)
    for name in sorted(registry.WIDE_READERS - {"kernel"}):  # kernel: only with profiler windows
        fresh = Features.from_store(RunStore.open(tmp_path))
        registry.DETECTORS[name](fresh, registry.DEFAULT_CONFIGS[name])
        assert _wide_tables(fresh), name


def test_run_all_runs_the_others_first_and_keeps_the_registry_order_of_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    features = _features(tmp_path)
    calls: list[tuple[str, int]] = []
    real = dict(registry.DETECTORS)
    for name, detect in real.items():

        def wrapped(f: Features, cfg: object, name: str = name, detect=detect) -> list:
            calls.append((name, len(_wide_tables(f))))
            return detect(f, cfg)

        monkeypatch.setitem(registry.DETECTORS, name, wrapped)
    found = registry.run_all(features)
    order = [name for name, _ in calls]
    assert sorted(order) == sorted(real)
    first = order[: len(real) - len(registry.WIDE_READERS)]
    assert set(first) == set(real) - registry.WIDE_READERS
    assert all(tables == 0 for name, tables in calls if name in first)
    # the same findings as the detectors run in the registry's order
    monkeypatch.setattr(registry, "WIDE_READERS", frozenset())
    again = registry.run_all(Features.from_store(RunStore.open(tmp_path)))
    assert repr(again) == repr(found)  # repr: a NaN in evidence is never == itself
    assert any(f.cause == "node" and 2 in f.ranks for f in found)
