"""Synthetic process groups and p2p traffic, as the hook reports them (schema 1.6), for layouts.

:func:`pg_events`: one ``ProcessGroupInfo`` per group and member rank (every rank's hook sees
every group it belongs to). :func:`p2p_events`: per step, each rank's point-to-point operations in
the order it issues them (``CollectiveEvent`` with ``is_p2p``, origin ``python``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from diag import schema
from tests.fakes.events import MS, T0, Source

#: (pg_name, pg_desc, member ranks in group-rank order)
Group = tuple[str, str, Sequence[int]]


def sources(ranks: int, ranks_per_host: int = 2) -> list[Source]:
    return [Source(f"node{r // ranks_per_host}", r, pid=1000 + r) for r in range(ranks)]


def pg_events(srcs: Sequence[Source], groups: Sequence[Group]) -> list[schema.Event]:
    out: list[schema.Event] = []
    world = list(range(len(srcs)))
    for name, desc, ranks in [("0", "default_pg", world), *groups]:
        for r in ranks:
            out.append(
                schema.ProcessGroupInfo(
                    **srcs[r].env(T0),
                    pg_name=name,
                    pg_desc=desc,
                    ranks_json=json.dumps(list(ranks)),
                    size=len(ranks),
                    backend="gloo",
                )
            )
    return out


def p2p_events(
    srcs: Sequence[Source], ops: dict[int, Sequence[str]], steps: int, pg_name: str = "0"
) -> list[schema.Event]:
    """Rank ``r`` issues ``ops[r]`` (e.g. ``("send", "recv")``) in order at every step."""
    out: list[schema.Event] = []
    for step in range(steps):
        for r, seq in ops.items():
            for i, op in enumerate(seq):
                t = T0 + step * 200 * MS + i * MS
                out.append(
                    schema.CollectiveEvent(
                        **srcs[r].env(t, step),
                        op=op,
                        pg_name=pg_name,
                        pg_desc="default_pg" if pg_name == "0" else pg_name,
                        is_p2p=True,
                        enqueue_ns=t,
                        start_ns=t,
                        end_ns=t + MS,
                        duration_ns=MS,
                        origin="python",
                    )
                )
    return out
