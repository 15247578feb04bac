"""A diag run's own collective events as per-rank :class:`RankDump` records.

The hook harvests each rank's Flight Recorder while the job runs and stores every entry once it
is done, or still in flight after its hold time (:mod:`diag.hook.fr_state`), as a
``CollectiveEvent`` (``origin == "fr"``). For a run that failed, the newest event per
(rank, group, sequence id) is that rank's last word on the collective: the same facts a dump gives
(state, op, sizes), without ``pg_status``. A group's members are the ranks that have events in it.
Python-timed calls with no FR entry (``seq_id == -1``) carry no sequence number and are left out.
"""

from __future__ import annotations

import pandas as pd

from diag.postmortem.records import FrEntry, GroupInfo, RankDump

_STATE = {"enqueued": "scheduled", "": "scheduled"}


def dumps_from_collectives(df: pd.DataFrame, source: str) -> tuple[RankDump, ...]:
    """Per-rank records of a run store's ``collective`` frame (see the module docstring)."""
    need = {"rank", "pg_name", "seq_id", "op", "state", "ts_ns"}
    if df.empty or not need <= set(df.columns):
        return ()
    df = df[(df["rank"] >= 0) & (df["seq_id"] >= 0)]
    if "origin" in df:
        df = df[df["origin"] == "fr"]
    if df.empty:
        return ()
    keys = ["rank", "pg_name", "seq_id", "p2p_seq_id", "is_p2p"]
    keys = [k for k in keys if k in df.columns]
    df = df.sort_values("ts_ns", kind="stable").drop_duplicates(keys, keep="last")
    members: dict[str, tuple[int, ...]] = {
        str(pg): tuple(sorted(int(r) for r in ranks.unique()))
        for pg, ranks in df.groupby("pg_name")["rank"]
    }
    descs = (
        {str(pg): str(d.iloc[-1]) for pg, d in df.groupby("pg_name")["pg_desc"]}
        if "pg_desc" in df
        else {}
    )
    out = []
    for rank, rows in df.groupby("rank", sort=True):
        entries = tuple(
            FrEntry(
                pg_name=str(row.pg_name),
                pg_desc=descs.get(str(row.pg_name), ""),
                pg_uid=-1,
                seq_id=int(row.seq_id),
                p2p_seq_id=int(getattr(row, "p2p_seq_id", -1)),
                is_p2p=bool(getattr(row, "is_p2p", False)),
                op=str(row.op),
                profiling_name=str(row.op),
                state=_STATE.get(str(row.state), str(row.state)),
                created_ns=int(getattr(row, "enqueue_ns", 0) or 0),
            )
            for row in rows.sort_values(
                ["enqueue_ns" if "enqueue_ns" in rows else "ts_ns"]
            ).itertuples()
        )
        groups = tuple(
            GroupInfo(name=pg, desc=descs.get(pg, ""), ranks=members[pg])
            for pg in sorted({e.pg_name for e in entries})
        )
        out.append(
            RankDump(
                rank=int(rank),
                file=f"{source} (rank {rank})",
                backend="diag",
                groups=groups,
                entries=entries,
            )
        )
    return tuple(out)
