"""Fuzz every reader of untrusted input for as long as asked (:mod:`diag.selftest.fuzz`).

Each target gets its edge inputs, then mutations of its valid seeds and random bytes, until its
share of ``--seconds`` is spent. An input that raises anything but the target's documented
one-line errors is a crash; one that runs past ``--per-input-s`` (SIGALRM) is a hang. Distinct
crashes (by exception type and innermost diag frame) are kept under ``--crashes DIR`` as
``<target>-<n>.bin`` to replay: ``python bench/fuzz.py --replay FILE --target NAME``.

Prints, per target: inputs tried, crashes, hangs, and the slowest input's time. Measured
numbers only, no asserts.

    python bench/fuzz.py --seconds 600 [--targets wal,event_batch] [--crashes /tmp/fuzz]
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.selftest.fuzz import EDGE_INPUTS, TARGETS, Target, mutate


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/diag/" in f.filename]
    last = frames[-1] if frames else None
    at = f"{Path(last.filename).name}:{last.lineno}" if last else "?"
    return f"{type(exc).__name__} at {at}"


def _one(target: Target, data: bytes, per_input_s: float) -> tuple[str | None, float]:
    """(crash signature or None, seconds)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        signal.setitimer(signal.ITIMER_REAL, per_input_s)  # 0: no deadline
        try:
            target.run(data, Path(d))
        except _Hang:
            return "hang", time.perf_counter() - t0
        except target.allowed:
            pass
        except BaseException as exc:  # what the fuzzer is looking for
            return _where(exc), time.perf_counter() - t0
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return None, time.perf_counter() - t0


def fuzz(target: Target, seconds: float, per_input_s: float, rng: random.Random,
         crashes: Path | None) -> dict[str, object]:  # fmt: skip
    tried = hangs = 0
    found: dict[str, bytes] = {}
    slowest = 0.0
    # The seeds once, untimed: the first call imports what the target needs, and an alarm that
    # fell inside an import left a half-made module behind (a slow first import on a busy host
    # was a "hang", then every later input an AttributeError at an import line)
    for seed in target.seeds:
        _one(target, seed, per_input_s=0.0)
    end = time.monotonic() + seconds
    inputs = iter(EDGE_INPUTS)
    while time.monotonic() < end:
        data = next(inputs, None)
        if data is None:
            if rng.random() < 0.8:
                data = mutate(rng.choice(target.seeds), rng)
            else:
                data = rng.randbytes(rng.randrange(1, 4096))
        sig, took = _one(target, data, per_input_s)
        tried += 1
        slowest = max(slowest, took)
        if sig == "hang":
            hangs += 1
        if sig is not None and sig not in found:
            found[sig] = data
            if crashes is not None:
                crashes.mkdir(parents=True, exist_ok=True)
                (crashes / f"{target.name}-{len(found)}.bin").write_bytes(data)
    return {"tried": tried, "crashes": found, "hangs": hangs, "slowest_s": slowest}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0, help="total, shared by the targets")
    p.add_argument("--per-input-s", type=float, default=10.0, help="an input past this: a hang")
    p.add_argument("--targets", default=",".join(sorted(TARGETS)))
    p.add_argument("--crashes", type=Path, default=None, help="keep crashing inputs here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replay", type=Path, help="run one kept input (with --target)")
    p.add_argument("--target", help="the target of --replay")
    args = p.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    if args.replay:
        target = TARGETS[args.target]()
        sig, took = _one(target, args.replay.read_bytes(), args.per_input_s)
        print(f"{args.target}: {sig or 'no crash'} ({took:.3f} s)")
        return 0
    names = [n for n in args.targets.split(",") if n]
    unknown = sorted(set(names) - set(TARGETS))
    if unknown:
        p.error(f"no target named {', '.join(unknown)} (known: {', '.join(sorted(TARGETS))})")
    rng = random.Random(args.seed)
    print(f"{'target':<22} {'inputs':>8} {'crashes':>8} {'hangs':>6} {'slowest':>9}")
    total_crashes = 0
    for name in names:
        r = fuzz(TARGETS[name](), args.seconds / len(names), args.per_input_s, rng, args.crashes)
        found = r["crashes"]
        assert isinstance(found, dict)
        total_crashes += len(found)
        print(f"{name:<22} {r['tried']:>8} {len(found):>8} {r['hangs']:>6} "
              f"{r['slowest_s']:>8.3f}s")  # fmt: skip
        for sig in found:
            print(f"    {sig}")
    print(f"distinct crashes: {total_crashes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
