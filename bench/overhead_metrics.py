"""The metrics endpoint's cost to the job (``bench/overhead.py --tier metrics``).

Two real node daemons (``diag daemon`` subprocesses, as ``diag run`` starts them), one with
``--metrics-port 0`` scraped over HTTP every ``scrape_s`` by a thread of this process (a
Prometheus doing its job), one without; blocks of steps alternate the hook between them (ABBA),
so the A/B is "metrics on and scraped" against "metrics off", everything else equal. Printed: the
median and p99 step with each, the training thread's CPU per step, and the scrapes (count, median
duration, bytes). The endpoint lives in the daemon: whatever it costs is CPU the node's other
processes may want, which is what this measures on a loaded 2-core VM.
"""

from __future__ import annotations

import atexit
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


class Daemon:
    """A ``diag daemon`` subprocess on its own socket (its analyzer is unreachable: it spools)."""

    def __init__(self, tmp: Path, name: str, metrics: bool) -> None:
        self.sock = str(tmp / f"{name}.sock")
        port_file = tmp / f"{name}.metrics-port"
        cmd = [sys.executable, "-m", "diag.cli.main", "daemon", "--listen", self.sock,
               "--analyzer", "127.0.0.1:1", "--spool", str(tmp / f"{name}-spool"),
               "--gpu-backend", "none"]  # fmt: skip
        if metrics:
            cmd += ["--metrics-port", "0", "--metrics-port-file", str(port_file)]
        self.log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - the daemon's lifetime
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + 30
        while not (Path(self.sock).exists() and (not metrics or port_file.exists())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {name} daemon did not start: {tmp / f'{name}.log'}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text().strip()}/metrics" if metrics else ""

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


class Scraper(threading.Thread):
    def __init__(self, url: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.every_s = url, every_s
        self.durations: list[float] = []
        self.num_bytes = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                self.num_bytes = len(resp.read())
            self.durations.append(time.perf_counter() - t0)


def metrics_tier(
    step: Callable[[], int], cpu: list[int], cfg: Any, reps: int, scrape_s: float = 1.0
) -> None:
    """ABBA blocks of ~50 ms steps: hook to the daemon with metrics (scraped) vs without."""
    import dataclasses

    from diag.hook import core as hook

    tmp = Path(tempfile.mkdtemp(prefix="diag-bench-metrics-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its sockets and store
    on_d, off_d = Daemon(tmp, "metrics", True), Daemon(tmp, "plain", False)
    scraper = Scraper(on_d.url, scrape_s)
    scraper.start()
    steps_per_block, settle = 100, 20
    times: dict[bool, list[int]] = {True: [], False: []}
    cpus: dict[bool, list[int]] = {True: [], False: []}
    pairs: list[float] = []
    try:
        for rep in range(reps):
            order = (True, False) if rep % 2 == 0 else (False, True)
            block_median: dict[bool, float] = {}
            for on in order:
                hook.install(dataclasses.replace(cfg, daemon_sock=(on_d if on else off_d).sock))
                for _ in range(settle):
                    step()
                block = []
                for _ in range(steps_per_block):
                    block.append(step())
                    cpus[on].append(cpu[0])
                hook.uninstall()
                times[on].extend(block)
                block_median[on] = statistics.median(block)
            pairs.append(block_median[True] / block_median[False] - 1)
    finally:
        scraper.stop.set()
        scraper.join(10)
        on_d.stop()
        off_d.stop()
    med_on, med_off = statistics.median(times[True]), statistics.median(times[False])
    p99 = {on: sorted(t)[int(0.99 * (len(t) - 1))] for on, t in times.items()}
    n = len(times[True])
    print(f"metrics tier: step ~50 ms, hook to a real daemon with /metrics scraped every "
          f"{scrape_s:g} s vs one without ({n} steps per arm, {reps} ABBA reps)")  # fmt: skip
    print(f"  median  without {med_off / 1e6:8.3f} ms  with {med_on / 1e6:8.3f} ms  "
          f"overhead {100 * (med_on / med_off - 1):+.3f} %  (median of block pairs "
          f"{100 * statistics.median(pairs):+.3f} %)")  # fmt: skip
    print(f"  p99     without {p99[False] / 1e6:8.3f} ms  with {p99[True] / 1e6:8.3f} ms")
    c_on, c_off = statistics.median(cpus[True]), statistics.median(cpus[False])
    print(f"  training-thread CPU per step  without {c_off / 1e6:8.3f} ms  with "
          f"{c_on / 1e6:8.3f} ms  ({(c_on - c_off) / 1e3:+.1f} us)")  # fmt: skip
    if scraper.durations:
        took = 1e3 * statistics.median(scraper.durations)
        print(f"  scrapes: {len(scraper.durations)}, median {took:.2f} ms, "
              f"{scraper.num_bytes} bytes")  # fmt: skip
