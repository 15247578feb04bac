"""Numerics faults for the demo job (:mod:`diag.selftest.workloads.train_ddp`): a NaN and a
flipped bit.

- ``--nan-rank R --nan-step S --nan-module NAME``: on rank R at step S, a NaN in one element of
  the output of the model's submodule NAME (``body.0``, ``body.2``, ``head.1``...; written inside
  its forward, as a layer that overflows would produce it), or, with ``--nan-module input``, in
  the input batch. The step index is the job's own (a resumed run counts from its checkpoint).
  The fault holds for every forward of that step, so a re-run of the step shows it again.
- ``--bitflip-rank R --bitflip-step S``: on rank R, right after the optimizer step of step S,
  one bit (``--bitflip-bit``, default 20: a mantissa bit, so the loss barely moves) of one
  element (the middle one) of the parameter ``--bitflip-param`` (default ``body.2.weight``) is
  flipped in place, on that replica only: silent data corruption of a DDP replica.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import torch
from torch import nn


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nan-rank", type=int, default=-1)
    p.add_argument("--nan-step", type=int, default=-1)
    p.add_argument("--nan-module", default="input", help="a submodule's name, or 'input'")
    p.add_argument("--bitflip-rank", type=int, default=-1)
    p.add_argument("--bitflip-step", type=int, default=-1)
    p.add_argument("--bitflip-param", default="body.2.weight")
    p.add_argument("--bitflip-bit", type=int, default=20)


class NumericsFaults:
    """The faults of one rank: call :meth:`batch` before the forward, :meth:`after_step` after
    the optimizer step (with the job's step index)."""

    def __init__(self, args: argparse.Namespace, rank: int, model: nn.Module) -> None:
        self.args = args
        self.rank = rank
        self.model = model
        self.step = -1
        self.nan_here = rank == args.nan_rank and args.nan_step >= 0
        if self.nan_here and args.nan_module != "input":
            self._poison(model.get_submodule(args.nan_module))

    def _poison(self, module: nn.Module) -> None:
        forward = module.forward
        faults = self

        def poisoned(*inputs: Any, **kwargs: Any) -> Any:
            out = forward(*inputs, **kwargs)
            if faults.step == faults.args.nan_step:
                out = out.clone()
                out.view(-1)[0] = math.nan
            return out

        module.forward = poisoned

    def batch(self, step: int, x: torch.Tensor) -> torch.Tensor:
        """The input of ``step`` (with a NaN if the input fault is due now)."""
        self.step = step
        if self.nan_here and self.args.nan_module == "input" and step == self.args.nan_step:
            x = x.clone()
            x.view(-1)[0] = math.nan
            self._say(f"NaN in the input batch at step {step}")
        elif self.nan_here and step == self.args.nan_step:
            self._say(f"NaN in {self.args.nan_module}'s output at step {step}")
        return x

    def after_step(self, step: int) -> None:
        a = self.args
        if self.rank != a.bitflip_rank or step != a.bitflip_step:
            return
        param = self.model.get_parameter(a.bitflip_param)
        ints = param.data.view(-1).view(torch.int32)  # float32 parameters
        index = ints.numel() // 2
        ints[index] ^= 1 << a.bitflip_bit
        self._say(f"flipped bit {a.bitflip_bit} of {a.bitflip_param}[{index}] after step {step}")

    def _say(self, text: str) -> None:
        sys.stdout.write(f"rank {self.rank} fault: {text}\n")
        sys.stdout.flush()
