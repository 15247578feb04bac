"""A torchrun worker pinned to CPUs by its rank, then the demo job (``train_ddp``) as usual.

``DIAG_TEST_PIN="0:0,1:0,2:1,3:0"`` maps ranks to CPUs (``+`` joins several: ``2:1+2``); a rank
not in the map keeps its affinity. The pin is set before the job starts its threads (gloo's,
the data loader's), so they inherit it. Run it under torchrun in place of the job's script::

    torchrun --nproc_per_node 4 tests/fakes/pinned_worker.py --steps 100
"""

from __future__ import annotations

import os
import runpy
import sys

from diag.selftest.workloads import TRAIN_DDP


def main() -> None:
    pins = dict(p.split(":") for p in os.environ.get("DIAG_TEST_PIN", "").split(",") if p)
    cpus = pins.get(os.environ.get("RANK", ""))
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split("+")})
    sys.argv[0] = str(TRAIN_DDP)
    runpy.run_path(str(TRAIN_DDP), run_name="__main__")


if __name__ == "__main__":
    main()
