"""Faults that are not the link's, on a job spread over two emulated hosts: what diag names.

The link faults run on emulated nodes (:mod:`diag.selftest.link`); every other cause runs on one
host. A two-host job carries its collectives over TCP between the hosts, so a rank's stall there
(a data stall, a pause, a slow rank) is seen by the link detectors too: they must leave it to the
node and data detectors. This bench runs the tuning injectors of ``node`` and ``data`` (and a
clean job), or the ``--mechanisms`` named (those the job applies itself: no actor from outside,
no pipeline job), through the link runner on two nodes with the link left alone (4 ranks, 2 a
node, the culprit rank on node B: rank 2 or 3 by seed; a checkpoint's is rank 0, which saves),
judges the findings as the accuracy bench does (:func:`diag.selftest.score.judge`), and prints
each case's top finding and whether any link finding appeared. Needs root, ``ip netns`` and
``tc``. Measured outcomes only, no asserts.

    .venv/bin/python bench/two_host_faults.py [--seeds 0 1 2] [--severity 0.3]
        [--causes node data clean] [--mechanisms NAME ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.selftest import link as link_runner
from diag.selftest.cases import CLEAN, Case
from diag.selftest.live import job_args
from diag.selftest.live import prepare as prepare_local
from diag.selftest.mechanisms import MECHANISMS
from diag.selftest.score import judge


class _NoLimit:
    """The link runner's limiter, left off: the link carries the job as it is."""

    def __init__(self, case: Case, node: object, steps: object) -> None:
        assert case.onset_step is not None
        self.onset = case.onset_step
        self.node = node

    @classmethod
    def start(cls, case: Case, node: object, steps: object) -> _NoLimit:
        return cls(case, node, steps)

    def maybe_correct(self, steps: object) -> None:
        pass

    def stop(self) -> None:
        pass

    def result(self, steps: object) -> link_runner.Shaping:
        return link_runner.Shaping(
            veth=self.node.veth, node=self.node.hostname, onset_step=self.onset,  # type: ignore[attr-defined]
            base_step_s=0.0, bytes_per_step=0.0, rates_bytes_per_s=(), rate_steps=(self.onset,),
            burst_bytes=0, latency_ms=0, shaper="none",
        )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--severity", type=float, default=0.3)
    ap.add_argument("--causes", nargs="+", default=["node", "data", CLEAN])
    ap.add_argument("--mechanisms", nargs="*", default=[], help="these instead of --causes")
    ap.add_argument("--keep", default="", help="keep the runs here (default: removed)")
    args = ap.parse_args()
    link_runner._Limiter = _NoLimit  # type: ignore[misc,assignment]
    fault: dict[str, Case] = {}

    def the_fault_args(case: Case, ckpt_dir: Path) -> list[str]:
        real = fault["case"]
        out = job_args(real, ckpt_dir)
        out[out.index("--print-every") + 1] = "1"
        return out

    link_runner.link_job_args = the_fault_args
    root = Path(args.keep or tempfile.mkdtemp(prefix="diag-two-host-"))
    rows = []
    runs = [(c, "") for c in args.causes]
    if args.mechanisms:
        runs = []
        for name in args.mechanisms:
            mech = MECHANISMS.get(name)
            if mech is None or mech.actor is not None or mech.workload != "train_ddp":
                ap.error(f"{name}: not a mechanism the job applies itself")
            runs.append((mech.cause, name))
    for cause, mechanism in runs:
        for seed in args.seeds:
            culprit = 2 + seed % 2
            clean = cause == CLEAN
            ranks = () if clean else (0,) if cause == "checkpoint" else (culprit,)  # 0 saves
            real = Case(cause=cause, seed=seed, onset_step=None if clean else 30,
                        severity=0.0 if clean else args.severity, ranks=ranks,
                        mechanism=mechanism)  # fmt: skip
            if cause != CLEAN:
                real = prepare_local(real)
            fault["case"] = real
            carrier = Case(cause="link", seed=seed, onset_step=30, severity=0.3)
            try:
                _, findings = link_runner.run_link_case(
                    carrier, root / f"{mechanism or cause}-s{seed}"
                )
            except Exception as exc:  # one line per failed run, the bench goes on
                print(f"{mechanism or cause} seed {seed}: failed: {type(exc).__name__}: {exc}",
                      flush=True)  # fmt: skip
                continue
            out = judge(real, findings)
            links = [f.id for f in findings if f.cause == "link"]
            ok = out.culprit_ok and out.cause_ok
            rows.append((cause, ok, bool(links)))
            print(f"{mechanism or cause:26s} seed {seed} ranks {list(real.ranks) or '-'}: "
                  f"{'ok  ' if ok else 'MISS'} top: {out.top}; link findings: {links or 'none'}",
                  flush=True)  # fmt: skip
    right = sum(ok for _, ok, _ in rows)
    with_link = sum(lk for _, _, lk in rows)
    print(f"{right} of {len(rows)} judged right; {with_link} with a link finding")


if __name__ == "__main__":
    main()
