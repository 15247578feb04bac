"""Synthetic numerics of a DDP job for the drift detector, written into a real RunStore.

Every rank's loss follows a slowly decaying curve with per-batch noise (each rank has its own
batches); gradient norms are sampled every ``numerics_every`` steps and equal on every rank (the
all-reduce); replica checksums every ``fingerprint_every`` steps are equal on every rank until a
fault changes one; batch statistics are sampled every ``numerics_every`` steps. Faults follow
what the hook reports on a real job (a NaN on one rank spreads to the others at the next step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from diag import schema
from diag.store.run_store import RunStore
from tests.fakes.events import MS, T0, Source


@dataclass(frozen=True, kw_only=True)
class NumericsRun:
    ranks: int = 4
    steps: int = 200
    seed: int = 0
    loss_noise: float = 0.15  # relative std of a batch's loss
    numerics_every: int = 10
    fingerprint_every: int = 10
    # a NaN first on nan_rank at nan_step: where the hook found it
    nan_rank: int = -1
    nan_step: int = -1
    nan_where: str = "module_output"
    nan_module: str = "body.2"
    nan_reproduced: bool = True
    # one replica's parameters differ from bitflip_step on (seen from the next fingerprint)
    bitflip_ranks: tuple[int, ...] = ()
    bitflip_step: int = -1
    # loss multiplied by spike_factor at spike_step on spike_ranks
    spike_ranks: tuple[int, ...] = ()
    spike_step: int = -1
    spike_factor: float = 5.0
    batch_outlier: bool = False  # the spiking ranks' batch at spike_step has huge values
    grad_spike_step: int = -1  # the sampled gradient norm x10 there
    scale_drops_from: int = -1  # AMP loss scale halves every step from here
    load_step: int | None = None  # a checkpoint load at this step (-1: before the first)

    def events(self) -> list[schema.Event]:
        rng = np.random.default_rng(self.seed)
        src = [Source(f"node{r // 2}", r, pid=2000 + r) for r in range(self.ranks)]
        out: list[schema.Event] = []
        checksum = 1234567
        scale = 65536.0
        for step in range(self.steps):
            t = T0 + step * 100 * MS
            if self.load_step is not None and step == max(self.load_step, 0):
                out.append(self._load(src[0], t - MS))
            for r, s in enumerate(src):
                loss = (0.5 + 0.5 * math.exp(-step / 80)) * (
                    1 + self.loss_noise * rng.standard_normal()
                )
                if r in self.spike_ranks and step == self.spike_step:
                    loss *= self.spike_factor
                nan = self.nan_step >= 0 and (
                    (r == self.nan_rank and step >= self.nan_step) or step > self.nan_step
                )
                out.append(_step(s, step, t, math.nan if nan else loss))
                if self.nan_step == step and r == self.nan_rank:
                    out.append(self._nonfinite(s, step, t))
                    bad_input = int(self.nan_where == "input")
                    out.append(
                        schema.BatchStats(
                            **s.env(t, step),
                            reason="nonfinite",
                            num_tensors=2,
                            num_elements=2048,
                            num_nonfinite=bad_input,
                            min_value=-3.0,
                            max_value=3.0,
                            mean_abs=0.8,
                        )
                    )
                if step % self.numerics_every == 0:
                    out.append(self._batch(s, step, t, r))
                    norm = 2.0 * (1 + 0.1 * math.sin(step))
                    norm *= 10.0 if step == self.grad_spike_step else 1.0
                    norm = math.nan if self.nan_step >= 0 and step >= self.nan_step else norm
                    out.append(
                        schema.NumericsSample(
                            **s.env(t + 2 * MS, step),
                            loss=loss,
                            grad_norm=norm,
                            num_grads=6,
                            num_nonfinite_grads=0 if math.isfinite(norm) else 6,
                        )
                    )
                if 0 <= self.scale_drops_from <= step:
                    out.append(
                        schema.NumericsSample(**s.env(t + 3 * MS, step), loss_scale=scale / 2)
                    )
                if step % self.fingerprint_every == 0:
                    bad = r in self.bitflip_ranks and 0 <= self.bitflip_step <= step
                    out.append(
                        schema.ParamFingerprint(
                            **s.env(t + 4 * MS, step),
                            checksum=checksum + step + (1 << 20 if bad else 0),
                            dp_group="0",
                            dp_size=self.ranks,
                            num_tensors=6,
                            num_params_sampled=433,
                            num_params_total=433,
                        )
                    )
            if 0 <= self.scale_drops_from <= step:
                scale /= 2
        return out

    def _nonfinite(self, s: Source, step: int, t: int) -> schema.NonFinite:
        where = self.nan_where
        return schema.NonFinite(
            **s.env(t + MS, step),
            where=where,
            module=self.nan_module if where.startswith("module") else "",
            tensor="batch[0]" if where == "input" else "output",
            num_nonfinite=1,
            num_elements=2048,
            method="batch" if where == "input" else "replay",
            reproduced=self.nan_reproduced,
            loss=math.nan,
        )

    def _batch(self, s: Source, step: int, t: int, rank: int) -> schema.BatchStats:
        big = self.batch_outlier and rank in self.spike_ranks and step == self.spike_step
        return schema.BatchStats(
            **s.env(t, step),
            num_tensors=2,
            num_elements=2048,
            min_value=-3.5,
            max_value=4000.0 if big else 3.7,
            mean_abs=0.8,
        )

    def _load(self, s: Source, t: int) -> schema.CheckpointEvent:
        return schema.CheckpointEvent(
            **s.env(t, self.load_step or -1),
            op="load",
            api="load",
            path="/ckpt/step100.pt",
            start_ns=t,
            duration_ns=MS,
        )

    def write(self, run_dir: Path) -> RunStore:
        store = RunStore.create(run_dir)
        store.append(self.events())
        store.flush()
        return RunStore.open(run_dir)


def _step(src: Source, step: int, t: int, loss: float) -> schema.StepEvent:
    dur = 90 * MS
    return schema.StepEvent(
        **src.env(t + dur, step),
        start_ns=t,
        end_ns=t + dur,
        duration_ns=dur,
        compute_ns=70 * MS,
        collective_wait_ns=20 * MS,
        loss=loss,
    )
