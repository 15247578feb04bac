"""The slow-link fault with node-side summaries: the two-node job of ``test_fault_link`` (network
namespaces, gloo over a bridge, node B's link rate-limited from step 30), its daemons forced to
ship one ``CollectiveSummary`` per rank, step and group after the first 5 steps (what they do by
themselves from 256 ranks up). The link must be named as from raw rows, and no raw collective of
a summed step may reach the analyzer except those it asked back (``CollectiveFetch``, under a
daemon's source), which the live triage does while the job runs. Needs root, ``ip netns`` and
``tc``. One two-node launch (about 45 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from diag.selftest.cases import Case
from diag.selftest.link import HOSTS, run_link_case
from diag.selftest.netns import unavailable_reason
from diag.selftest.score import judge, the_machines
from diag.store.run_store import RunStore

pytestmark = [pytest.mark.integration, pytest.mark.netns]

ONSET = 30
# 270 slow steps (~20 s): the live triage (every second here) names the link ~8 s after the onset
# on a quiet host, while the job and its daemons still run
STEPS = 300
RAW_STEPS = 5


def test_slow_link_is_named_from_node_summaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = unavailable_reason(("tc",))
    if reason is not None:
        pytest.skip(f"two-node network unavailable: {reason}")
    monkeypatch.setenv("DIAG_DAEMON_COLLECTIVES", "summary")
    monkeypatch.setenv("DIAG_DAEMON_COLLECTIVES_RAW_STEPS", str(RAW_STEPS))
    monkeypatch.setenv("DIAG_ANALYZER_TRIAGE_INTERVAL_S", "1")
    case = Case(cause="link", severity=0.5, onset_step=ONSET, steps=STEPS)
    case, findings = run_link_case(case, tmp_path)
    shown = "\n".join(f"{f.id} {f.cause} {f.severity} {f.summary}" for f in findings)

    store = RunStore.open(tmp_path / "run")
    sums = store.frame("collective_summary")
    raw = store.frame("collective")
    from_hooks = raw[~raw["source"].astype(str).str.contains("/daemon/", regex=False)]
    fetched = raw[raw["source"].astype(str).str.contains("/daemon/", regex=False)]
    summed_steps = set(sums["step"].unique())
    assert set(sums["rank"].unique()) == set(range(case.world_size))
    assert min(summed_steps) == RAW_STEPS and max(summed_steps) >= case.steps - 2
    # the hooks' own rows: the early steps, and collectives not completed when harvested
    late = from_hooks[from_hooks["step"] >= RAW_STEPS]
    assert late["state"].isin(["", "completed"]).sum() == 0, late.head()
    # none lost, none doubled: per rank, the hook's own rows of the default group and the
    # summaries' call ranges cover its collectives' sequence numbers once each, without a gap
    own = from_hooks[~from_hooks["is_p2p"] & (from_hooks["seq_id"] >= 0)]
    for rank in range(case.world_size):
        mine = sums[(sums["rank"] == rank) & (sums["pg_name"] == "0")]
        assert (mine["last_seq_id"] - mine["first_seq_id"] + 1 == mine["num_collectives"]).all()
        ids = sorted(own.loc[(own["rank"] == rank) & (own["pg_name"] == "0"), "seq_id"])
        ids += [i for a, b in zip(mine["first_seq_id"], mine["last_seq_id"], strict=True)
                for i in range(a, b + 1)]  # fmt: skip
        assert sorted(ids) == list(range(min(ids), max(ids) + 1)), rank
    outcome = judge(case, findings)
    assert outcome.ok, f"top finding: {outcome.top}\n{shown}"
    top = next(f for f in findings if not the_machines(case, f))
    assert top.cause == "link" and set(top.link.hosts) == set(HOSTS), shown

    # the live triage named the link from summaries while the job ran and asked the daemons for
    # the raw rows of its group around the onset; they came back under the daemons' sources
    control = json.loads((tmp_path / "run" / "control.json").read_text())
    fetches = control.get("fetches", [])
    # (a busy host can make an earlier live pass see a passing slowdown and ask for its steps too:
    # some of the ranks, over a window that may hold the onset; seen beside a busy loop)
    covering = [f for f in fetches if f["first_step"] <= ONSET <= f["last_step"]]
    onset = [f for f in covering if set(f["ranks"]) == set(range(case.world_size))]
    assert onset, control
    asked = np.zeros(case.steps + 1, dtype=bool)
    for f in fetches:
        asked[f["first_step"] : f["last_step"] + 1] = True
    assert asked[fetched["step"].to_numpy()].all(), "raw rows shipped again that nobody asked for"
    near = fetched[fetched["step"].between(onset[0]["first_step"], onset[0]["last_step"])]
    assert set(near["rank"].unique()) == set(range(case.world_size)), shown
    assert near["step"].max() >= ONSET
