"""A run's summary and the report's headline as a user reads them, from events stored in a real
RunStore."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from diag import schema
from diag.cli.render import tables as render
from diag.store.run_store import RunStore
from diag.store.summary import summarize
from tests.fakes.events import Source


def headline(tmp_path: Path, events: list[schema.Event], *, ranks: int = 3) -> tuple[dict, str]:
    """Store one step of ``ranks`` ranks and ``events``; the summary as JSON and the headline."""
    store = RunStore.create(tmp_path)
    store.append([Source(host="n0", rank=r, pid=10 + r).step(0) for r in range(ranks)] + events)
    store.flush()
    summary = json.loads(json.dumps(summarize(tmp_path).to_json(), allow_nan=False))
    buf = io.StringIO()
    Console(width=300, file=buf, color_system=None).print(render.headline(summary))
    return summary, buf.getvalue()
