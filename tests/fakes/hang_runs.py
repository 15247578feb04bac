"""Run stores of hung and crashed jobs for the hang detector: ranks' steps, hang reports with
their in-flight collectives, stacks (Python and py-spy), exceptions and rank exits."""

from __future__ import annotations

import json
from pathlib import Path

from diag import schema
from diag.diagnose.detectors import hang
from diag.diagnose.detectors.registry import run_all
from diag.diagnose.features import Features
from diag.findings import Finding
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source

S = 1_000_000_000
STALL = T0 + 10 * S  # when the last progress was
SITE = "/venv/lib/python3.11/site-packages"
DATA_STACK = "\n".join([
    "/job/hang_job.py:41 Stuck.__getitem__",
    f"{SITE}/torch/utils/data/_utils/fetch.py:52 _MapDatasetFetcher.fetch",
    f"{SITE}/torch/utils/data/dataloader.py:789 _SingleProcessDataLoaderIter._next_data",
    "/repo/diag/hook/patches.py:120 wrapped_next",
    "/job/hang_job.py:90 main",
])  # fmt: skip
WAIT_STACK = "\n".join([
    f"{SITE}/torch/distributed/distributed_c10d.py:3252 all_reduce",
    "/job/hang_job.py:80 main",
])  # fmt: skip
SAVE_STACK = "\n".join([
    f"{SITE}/torch/serialization.py:964 _save",
    f"{SITE}/torch/serialization.py:651 save",
    "/job/train.py:12 checkpoint",
])  # fmt: skip


class Run:
    """A run of ``world`` ranks that did ``steps`` steps of [all_reduce [[1056]], barrier]."""

    def __init__(self, world: int = 2, steps: int = 6) -> None:
        self.ranks = [Source(rank=r, pid=100 + r) for r in range(world)]
        self.daemon = Source(pid=9)
        self.launcher = Source(pid=8)
        self.events: list[schema.Event] = []
        self.steps = steps
        for src in self.ranks:
            self.events.append(schema.RankInfo(**src.env(T0), pid=100 + src.rank, world_size=world))
            self.events += [src.step(s) for s in range(steps)]

    def tail(self, upto: int, *, last: tuple[str, str] | None = None) -> str:
        """The FR tail: seqs 1..upto done (odd: all_reduce, even: barrier), then ``last``."""
        out = [
            {"pg": "0", "seq": s, "op": "all_reduce" if s % 2 else "barrier",
             "sizes": [[1056]] if s % 2 else [], "dtype": "Float", "done": True,
             "enqueue_ns": T0 + s * MS}
            for s in range(1, upto + 1)
        ]  # fmt: skip
        if last is not None:
            out.append({"pg": "0", "seq": upto + 1, "op": last[0], "sizes": json.loads(last[1]),
                        "dtype": "", "done": False, "enqueue_ns": T0 + upto * MS})  # fmt: skip
        return json.dumps(out)

    def report(self, rank: int, *, done: int, in_flight: tuple[str, str] | None, at: int = 0):
        src = self.ranks[rank]
        fr = {
            "pg_status_json": json.dumps({"0": [done + (in_flight is not None), done]}),
            "fr_tail_json": self.tail(done, last=in_flight),
            "last_enqueued_seq": done + (in_flight is not None),
            "last_completed_seq": done,
        }
        if in_flight is not None:
            fr |= {"pg_name": "0", "seq_id": done + 1, "op": in_flight[0],
                   "input_sizes": in_flight[1]}  # fmt: skip
        self.events.append(schema.HangReport(
            **src.env(STALL + 5 * S + at, self.steps), pid=100 + rank, stalled_since_ns=STALL,
            stall_ns=5 * S + at, threshold_ns=5 * S, last_step=self.steps - 1, **fr,
        ))  # fmt: skip

    def stack(self, rank: int, frames: str, *, origin: str = "python", at: int = 0) -> None:
        src = self.ranks[rank] if origin == "python" else self.daemon
        env = src.env(STALL + 5 * S + at, self.steps) | {"rank": rank}
        self.events.append(schema.StackDump(**env, pid=100 + rank, reason="hang", origin=origin,
                                            is_main=True, frames=frames,
                                            num_frames=len(frames.splitlines())))  # fmt: skip

    def exception(self, rank: int, exc_type: str, message: str, *, at: int) -> None:
        self.events.append(schema.ExceptionEvent(
            **self.ranks[rank].env(at, self.steps), pid=100 + rank, exc_type=exc_type,
            message=message, frames="/job/hang_job.py:70 main",
        ))  # fmt: skip

    def exit(self, rank: int, *, observer: str, at: int, code: int | None = None,
             first: bool = False) -> None:  # fmt: skip
        src = self.launcher if observer == "launcher" else self.daemon
        self.events.append(schema.RankExit(
            **src.env(at) | {"rank": rank}, pid=100 + rank, observer=observer, exit_code=code,
            signal=-code if code is not None and code < 0 else 0, first_failure=first,
        ))  # fmt: skip

    def final_health(self, rank: int, *, at: int) -> None:
        self.events.append(schema.HookHealth(**self.ranks[rank].env(at), pid=100 + rank,
                                             final=True))  # fmt: skip

    def findings(self, tmp_path: Path) -> list[Finding]:
        store = RunStore.create(tmp_path / "run")
        store.append(self.events)
        store.flush()
        found = [f for f in run_all(Features.from_store(store)) if f.id in ("hang", "crash")]
        assert hang.detect(Features.from_store(store)) == found
        return found
