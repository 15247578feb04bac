"""Which probes test a finding, with which parameters, from what the run recorded.

Cause -> probes (only from the fixed registry, :data:`probes.PROBES`, with validated parameters):

- ``node`` / ``kernel``: ``gemm`` with the heaviest matmul-like kernels' shapes from the run's
  ``kernel`` frame (``input_shapes`` of the heaviest call, up to :data:`MAX_SHAPES` shapes by total
  time, each dimension capped at :data:`MAX_DIM` so a replay stays short), float32 when none were
  recorded; plus ``numerics`` (silent data corruption);
- ``link``: ``p2p`` with the run's largest collective size and ``collective`` (all-reduce,
  all-gather) over its distinct sizes (``num_bytes`` of the ``collective`` frame, largest
  :data:`MAX_SIZES`, capped at :data:`MAX_BYTES`); these need ranks (torchrun), so in a single
  local process they come back ``unsupported``;
- anything else (data, checkpoint, program, ...): no probe applies.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from probes.collective import CollectiveParams
from probes.gemm import GemmParams
from probes.numerics import NumericsParams
from probes.p2p import P2pParams

MAX_SHAPES = 3
MAX_DIM = 4096
MAX_SIZES = 4
MAX_BYTES = 1 << 28
_GEMM_NAMES = ("mm", "matmul", "linear", "gemm", "addmm", "bmm")


@dataclass(frozen=True, slots=True)
class ProbePlan:
    """One probe to run: its registry name and typed parameters."""

    probe: str
    params: Any


def _parse_shapes(text: str) -> list[list[int]]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return []
    if not isinstance(value, list | tuple):
        return []
    return [
        list(s)
        for s in value
        if isinstance(s, list | tuple) and s and all(isinstance(d, int) for d in s)
    ]


def gemm_shape(name: str, shapes_text: str) -> tuple[int, int, int] | None:
    """``(m, k, n)`` of a matmul-like call from its input shapes: the first two inputs of rank >= 2
    whose inner dimensions meet (``A[..., m, k] @ B[k, n]``; ``linear``'s weight is ``[n, k]``);
    leading batch dimensions fold into ``m``."""
    if not any(tag in name.lower() for tag in _GEMM_NAMES):
        return None
    mats = [s for s in _parse_shapes(shapes_text) if len(s) >= 2]
    for a, b in itertools.pairwise(mats):
        m, k = math.prod(a[:-1]), a[-1]
        if "linear" in name.lower() and b[-1] == k:
            n = b[0]
        elif b[-2] == k:
            n = b[-1]
        else:
            continue
        return (min(m, MAX_DIM), min(k, MAX_DIM), min(n, MAX_DIM))
    return None


def heaviest_gemm_shapes(kernels: pd.DataFrame) -> tuple[tuple[int, int, int], ...]:
    """Up to :data:`MAX_SHAPES` distinct GEMM shapes from the kernels with the most total time."""
    if kernels.empty or "input_shapes" not in kernels:
        return ()
    by_time = kernels.sort_values("total_ns", ascending=False)
    out: list[tuple[int, int, int]] = []
    for name, text in zip(by_time["name"], by_time["input_shapes"], strict=True):
        shape = gemm_shape(str(name), str(text))
        if shape is not None and shape not in out:
            out.append(shape)
        if len(out) == MAX_SHAPES:
            break
    return tuple(out)


def collective_sizes(collectives: pd.DataFrame) -> tuple[int, ...]:
    """The largest :data:`MAX_SIZES` distinct collective sizes, capped at :data:`MAX_BYTES`."""
    if collectives.empty or "num_bytes" not in collectives:
        return ()
    sizes = sorted({int(b) for b in collectives["num_bytes"] if int(b) >= 4}, reverse=True)
    return tuple(sorted({min(s, MAX_BYTES) for s in sizes[:MAX_SIZES]}))


def plan_for(cause: str, kernels: pd.DataFrame, collectives: pd.DataFrame) -> list[ProbePlan]:
    """The probes that test a finding of ``cause`` (empty: none applies)."""
    if cause in ("node", "kernel"):
        shapes = heaviest_gemm_shapes(kernels) or ((1024, 1024, 1024),)
        return [
            ProbePlan("gemm", GemmParams(shapes=shapes, dtypes=("float32",))),
            ProbePlan("numerics", NumericsParams()),
        ]
    if cause == "link":
        sizes = collective_sizes(collectives) or (1 << 20,)
        return [
            ProbePlan("p2p", P2pParams(size_bytes=max(sizes))),
            ProbePlan("collective", CollectiveParams(sizes_bytes=sizes)),
        ]
    return []
