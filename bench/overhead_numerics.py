"""The numerics tier of ``bench/overhead.py``: what the numerics checks add to a ~50 ms step.

Three arms, interleaved in blocks of 100 steps (rotating order): no hook, the hook with
``numerics=False``, and the hook with the numerics tier at its default intervals (a gradient
norm and batch statistics every ``numerics_every`` = 50 steps, a replica checksum every
``fingerprint_every`` = 100). The bench's DDP model was built before the hook was installed, so
it is handed to the hook (``Hook.add_replica``), as the wrapped ``DistributedDataParallel``
constructor does in a job. Printed: (a) each arm's median step, the numerics tier's overhead
against the hook without it (its own cost) and against no hook (the whole hook); (b) what each
piece costs the training thread, timed directly: the per-step work (the loss check, keeping the
batch, the forward pre-hook on the model) and the sampled work (gradient norms, a batch handed
over, a checksum), and the amortized total at the default intervals as a share of the step.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

from diag.config import HookConfig
from diag.hook import core as hook


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    fn()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n / 1e3


def numerics_tier(
    step: Callable[[], int], cfg: HookConfig, model: Any, opt: Any, batch: Any, reps: int
) -> None:
    """A/B/C of no hook, hook without numerics, hook with numerics (see the module docstring)."""
    steps_per_block, settle = 100, 20
    arms: dict[str, HookConfig | None] = {
        "off": None,
        "hook": dataclasses.replace(cfg, numerics=False),
        "numerics": dataclasses.replace(cfg, numerics=True),
    }
    orders = [("off", "hook", "numerics"), ("numerics", "hook", "off"),
              ("hook", "numerics", "off"), ("off", "numerics", "hook")]  # fmt: skip
    times: dict[str, list[int]] = {name: [] for name in arms}
    pairs: list[float] = []
    for rep in range(reps):
        medians: dict[str, float] = {}
        for name in orders[rep % len(orders)]:
            arm = arms[name]
            if arm is not None:
                hook.install(arm).add_replica(model)
            for _ in range(settle):
                step()
            block = [step() for _ in range(steps_per_block)]
            if arm is not None:
                hook.uninstall()
            times[name].extend(block)
            medians[name] = statistics.median(block)
        pairs.append(medians["numerics"] / medians["hook"] - 1)
    med = {name: statistics.median(t) for name, t in times.items()}
    n_cfg = arms["numerics"]
    assert n_cfg is not None
    print(f"numerics tier: step ~50 ms, numerics_every {n_cfg.numerics_every}, "
          f"fingerprint_every {n_cfg.fingerprint_every} ({len(times['off'])} steps per arm, "
          f"{reps} reps)")  # fmt: skip
    print(f"  (a) median  off {med['off'] / 1e6:8.3f} ms  hook {med['hook'] / 1e6:8.3f} ms  "
          f"hook+numerics {med['numerics'] / 1e6:8.3f} ms")  # fmt: skip
    print(f"      numerics vs hook {100 * (med['numerics'] / med['hook'] - 1):+.3f} % (median of "
          f"block pairs {100 * statistics.median(pairs):+.3f} %); hook+numerics vs off "
          f"{100 * (med['numerics'] / med['off'] - 1):+.3f} %")  # fmt: skip
    _direct_costs(step, n_cfg, model, opt, batch, med["off"])


def _direct_costs(
    step: Callable[[], int], cfg: HookConfig, model: Any, opt: Any, batch: Any, step_ns: float
) -> None:
    """(b): the training thread's cost of each piece, timed by calling it directly."""
    import torch

    h = hook.install(cfg)
    h.add_replica(model)
    num = h.numerics
    assert num is not None
    step()  # gradients exist now
    # The pre-hook's cost is per forward call, whatever the module: timed on a trivial one.
    probe = torch.nn.Identity()
    x = batch[0]
    plain = _per_call_us(lambda: probe(x), 20000)
    probe.register_forward_pre_hook(num._pre_hook, with_kwargs=True)
    pre_hook = max(0.0, _per_call_us(lambda: probe(x), 20000) - plain)
    loss_us = _per_call_us(lambda: num.on_loss(0.5, 1), 20000)
    batch_us = _per_call_us(lambda: num.on_batch(batch, 1), 20000)
    gnorm_us = _per_call_us(lambda: num.pre_step(opt, 0), 200)
    fp_us = _per_call_us(lambda: num.post_step(0), 200)

    def sampled_batch() -> None:
        num.batch_sent = -1  # as if it were a new sampled step
        num.on_batch(batch, 0)

    sampled_batch_us = _per_call_us(sampled_batch, 200)
    hook.uninstall()
    every, fp_every = cfg.numerics_every, cfg.fingerprint_every
    per_step = pre_hook + loss_us + batch_us
    amortized = per_step + (gnorm_us + sampled_batch_us) / every + fp_us / fp_every
    print(f"  (b) every step: forward pre-hook {pre_hook:.2f} us, loss check {loss_us:.2f} us, "
          f"batch kept {batch_us:.2f} us; every {every} steps: gradient norms {gnorm_us:.1f} us, "
          f"batch handed over {sampled_batch_us:.1f} us; every {fp_every}: checksum "
          f"{fp_us:.1f} us")  # fmt: skip
    print(f"      amortized on the training thread: {amortized:.2f} us per step = "
          f"{100 * amortized * 1e3 / step_ns:.4f} % of the step (the hook thread's batch "
          "statistics and tensor reads come on top: they are in (a))")  # fmt: skip
