"""What a Flight Recorder harvest costs the training thread: torch's in-process dump, the same dump
made by diag's native library without the GIL (``HookConfig.fr_dump_native``, the default where the
library is built: :mod:`diag.hook.fr_dump`), the library's read of the half of the ring a harvest
needs (``HookConfig.fr_read_native``, the default where it can) and torch's control-plane server
(``HookConfig.fr_dump_server``, :mod:`diag.hook.fr_server`).

One gloo process (world size 1) fills the recorder's ring (``--ring`` entries), then, for each way
of dumping, a second thread harvests every ``--every-ms`` the way the hook thread does
(``_dump_fr_trace`` or the native dump + the paced unpickling, the native read of the newest half of
the ring, or the server's JSON + the paced decoding, with the same 1 ms slices and pauses of
:class:`~diag.hook.gil_share.GilShare`, the cyclic collector off) while the main thread stands in
for a training thread in two ways, one after the other, ``--seconds`` each:

- *GIL*: a pure-Python loop timing each pass (a few microseconds): a pass that took more than a
  millisecond waited for the GIL that long (the forward pass of a real job is such Python between
  operators);
- *collectives*: back-to-back ``all_reduce`` calls of one float (each one a Flight Recorder
  record, gloo's worker thread and the GIL): their median, p99 and maximum latency.

The first line says which torch, how many cores and how big the ring and a dump are. Measured
numbers only, no asserts; the machine's core count decides much of it (the server's dump runs on
another core, which a 2-core VM barely has).

    .venv/bin/python bench/fr_dump.py [--ring 512] [--every-ms 20] [--seconds 3]
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import shutil
import statistics
import tempfile
import threading
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ring", type=int, default=512, help="TORCH_FR_BUFFER_SIZE")
    p.add_argument("--every-ms", type=float, default=20.0, help="one harvest per this many ms")
    p.add_argument("--seconds", type=float, default=3.0, help="per way of dumping and load")
    args = p.parse_args()
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(args.ring)

    import torch
    import torch.distributed as dist

    from diag.flight_recorder import load_fr_dump, load_fr_json
    from diag.hook.fr_server import FrServer
    from diag.hook.gil_share import GilShare
    from diag.hook.opstats import load as load_native

    tmp = tempfile.mkdtemp(prefix="diag-bench-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its sockets and store
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(tmp, "s"), 1),
                            rank=0, world_size=1)  # fmt: skip
    token = torch.zeros(1)
    for _ in range(args.ring + 10):
        dist.all_reduce(token)
    dump = torch._C._distributed_c10d._dump_fr_trace
    server = FrServer.start(torch)
    pickled = dump(includeStackTraces=False)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores; ring {args.ring} entries: pickle "
          f"{len(pickled):,} bytes" + (f", JSON {len(server.fetch(10.0)):,} bytes" if server
                                       else "; no control-plane server in this torch"))  # fmt: skip

    def in_process(gil: GilShare) -> None:
        raw = dump(includeStackTraces=False)
        gil.tick()
        load_fr_dump(raw, validate=False, tick=gil.tick)

    def through_server(gil: GilShare) -> None:
        assert server is not None
        body = server.fetch(10.0)
        gil.tick()
        load_fr_json(body, tick=gil.tick)

    library, why = load_native()
    native = library.dump_fn("fr") if library is not None else None

    def without_gil(gil: GilShare) -> None:
        assert native is not None
        raw = native(True)
        gil.tick()
        load_fr_dump(raw, validate=False, tick=gil.tick)

    reader = library.since_fn() if library is not None else None
    next_id = library.next_id_fn() if library is not None else None

    def read_half(gil: GilShare) -> None:
        assert reader is not None and next_id is not None
        top, _ = next_id()  # the pacer's probe, then the half of the ring a harvest reads
        reader(max(0, top - args.ring // 2), True)

    ways = {"none": None, "in-process dump": in_process}
    if native is not None:
        ways["native, no GIL"] = without_gil
    else:
        print(f"no native dump: {why}")
    if reader is not None and next_id is not None and reader(0, False) is not None:
        ways["native read, half"] = read_half
    elif library is not None:
        print(f"no native reader: {library.since_why()}")
    if server is not None:
        ways["control-plane server"] = through_server
    for load in ("GIL", "collectives"):
        print(f"main thread: {load}")
        for name, harvest in ways.items():
            stop = threading.Event()
            times: list[float] = []

            def harvester(work=harvest, stop=stop, times=times) -> None:  # type: ignore[no-untyped-def]
                gil = GilShare(0.25, 0.001)
                while not stop.wait(args.every_ms / 1e3):
                    if work is not None:
                        gil.burst(0.05)
                        t0 = time.perf_counter()
                        gc.disable()  # as the hook's harvest does (its garbage dies by refcount)
                        try:
                            work(gil)
                        finally:
                            gc.enable()
                        times.append(time.perf_counter() - t0)

            thread = threading.Thread(target=harvester, daemon=True)
            thread.start()
            lat = _gil_gaps(args.seconds) if load == "GIL" else _collectives(token, args.seconds)
            stop.set()
            thread.join()
            lat.sort()
            slow = sum(x > 1e-3 for x in lat)
            wall = f", a harvest {statistics.median(times) * 1e3:.2f} ms wall" if times else ""
            print(f"  {name:21s} {len(times):4d} harvests{wall}; {len(lat):,} samples: median "
                  f"{lat[len(lat) // 2] * 1e6:6.1f} us, p99 {lat[int(0.99 * len(lat))] * 1e6:6.1f} "
                  f"us, max {lat[-1] * 1e3:6.2f} ms, {slow} over 1 ms")  # fmt: skip
    if server is not None:
        server.close()
    dist.destroy_process_group()


def _gil_gaps(seconds: float) -> list[float]:
    """The time of each pass of a small pure-Python loop (s)."""
    gaps = []
    end = time.perf_counter() + seconds
    prev = time.perf_counter()
    while prev < end:
        x = 0
        for i in range(200):
            x += i
        now = time.perf_counter()
        gaps.append(now - prev)
        prev = now
    return gaps


def _collectives(token: object, seconds: float) -> list[float]:
    """The latency of each of back-to-back one-float all-reduces (s)."""
    import torch.distributed as dist

    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        dist.all_reduce(token)  # type: ignore[arg-type]
        lat.append(time.perf_counter() - t0)
    return lat


if __name__ == "__main__":
    main()
