"""``python -m probes NAME [--params JSON]``: run one registered probe in this process on the CPU
(or ``cuda:0``) and print its results as a JSON list. Used to run a probe in a confined child
process (:mod:`diag.selftest.cpuquota`) and by ``diag replay``; ``--params`` is a JSON object of the
probe's parameter fields, validated by its dataclass (unknown fields are an error)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from probes import PROBES
from probes.base import ProbeContext, run_guarded


def parse_params(name: str, text: str | None) -> object:
    """``PROBES[name].Params`` from a JSON object; lists become tuples; ``ValueError`` if bad."""
    cls = PROBES[name].Params
    raw = json.loads(text) if text else {}
    if not isinstance(raw, dict):
        raise ValueError("params must be a JSON object")

    def tup(v: object) -> object:
        return tuple(tup(x) for x in v) if isinstance(v, list) else v

    try:
        return cls(**{k: tup(v) for k, v in raw.items()})
    except TypeError as exc:
        raise ValueError(f"{name} params: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m probes")
    parser.add_argument("name", choices=sorted(PROBES))
    parser.add_argument("--params", help="JSON object of parameter fields")
    parser.add_argument("--device-id", default="cpu")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda:0"))
    parser.add_argument("--nice", type=int, default=0, help="lower this process's priority first")
    args = parser.parse_args(argv)
    if args.nice > 0:
        os.nice(args.nice)
    try:
        params = parse_params(args.name, args.params)
    except ValueError as exc:
        print(f"python -m probes: error: {exc}", file=sys.stderr)
        return 2
    ctx = ProbeContext(device=args.device, device_id=args.device_id)
    results = run_guarded(PROBES[args.name](), params, ctx, float(params.timeout_s))  # type: ignore[attr-defined]
    print(json.dumps([r.to_json() | {"lower_is_better": r.lower_is_better} for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
