"""The numerics tier on a real world-size-1 gloo DDP job in this process, sending to a socket."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook import fingerprint as hook_fingerprint
from diag.hook.events import EventFactory
from diag.hook.nonfinite import replay
from diag.hook.numerics import Numerics
from diag.hook.numerics_events import NumericsEvents, batch_stats
from tests.fakes.hook_sink import FrameSink, of_kind

FAST = {"flush_interval_s": 0.05, "fr_poll_interval_s": 0.1, "reconnect_interval_s": 0.05}
EVERY = {"numerics_every": 4, "fingerprint_every": 3}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def poison(module: nn.Module, when: Callable[[], bool]) -> None:
    """``module`` returns a NaN in its output whenever ``when()`` holds (inside its forward)."""
    forward = module.forward

    def bad(*args: torch.Tensor) -> torch.Tensor:
        out = forward(*args)
        if when():
            out = out.clone()
            out.view(-1)[3] = math.nan
        return out

    module.forward = bad  # type: ignore[method-assign]


def train(
    steps: int,
    *,
    nan_module: str = "",
    nan_step: int = -1,
    nan_input_step: int = -1,
    transient: bool = False,
) -> tuple[nn.Module, list[float], list[torch.Tensor]]:
    """A plain DDP loop with optional faults; returns the model, the losses and the batches."""
    torch.manual_seed(0)
    net = Net()
    state = {"step": 0, "calls": 0}
    if nan_module:

        def when() -> bool:
            if state["step"] != nan_step:
                return False
            state["calls"] += 1
            return not transient or state["calls"] == 1

        poison(net.get_submodule(nan_module), when)
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(steps * 4, 8, generator=g), torch.randn(steps * 4, 1))
    losses, batches = [], []
    for i, (x, y) in enumerate(DataLoader(data, batch_size=4)):
        state["step"] = i
        if i == nan_input_step:
            x[1, 2] = math.inf
        batches.append(x.clone())
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses, batches


def run(sink: FrameSink, steps: int, **faults: object) -> tuple[list[schema.Event], nn.Module]:
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST, **EVERY))
    model, _, _ = train(steps, **faults)  # type: ignore[arg-type]
    hook.uninstall()
    assert h.num_errors == 0, h.last_error
    return sink.close(), model


def test_clean_steps_give_samples_fingerprints_and_batch_stats(
    world: None, sink: FrameSink
) -> None:
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST, **EVERY))
    norms: list[float] = []
    orig_step = torch.optim.Adam.step

    model, losses, batches = None, [], []
    try:
        # the global norm the optimizer sees, computed independently before each step
        def spy(self: torch.optim.Adam, *a: object, **k: object) -> object:
            grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
            norms.append(float(torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads]))))
            return orig_step(self, *a, **k)

        torch.optim.Adam.step = spy  # type: ignore[method-assign]
        model, losses, batches = train(10)
    finally:
        torch.optim.Adam.step = orig_step  # type: ignore[method-assign]
        hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error

    samples = of_kind(events, schema.NumericsSample)
    assert [s.step for s in samples] == [0, 4, 8]
    for s in samples:
        assert s.loss == losses[s.step] and s.num_grads == 6 and s.num_nonfinite_grads == 0
        assert s.grad_norm == pytest.approx(norms[s.step], rel=1e-5)
        assert s.loss_scale is None

    prints = of_kind(events, schema.ParamFingerprint)
    assert [p.step for p in prints] == [0, 3, 6, 9]
    last = prints[-1]  # taken after the last optimizer step: the final parameters
    params = list(model.parameters())  # type: ignore[union-attr]
    sums = [int(p.detach().view(torch.int32).sum(dtype=torch.int64)) for p in params]
    assert last.checksum == hook_fingerprint.combine(sums)
    assert last.num_tensors == 6 and last.num_params_sampled == last.num_params_total == 433
    assert (last.dp_group, last.dp_size) == ("0", 1)
    assert len({p.checksum for p in prints}) == 4  # the parameters moved

    stats = of_kind(events, schema.BatchStats)
    assert [(b.step, b.reason) for b in stats] == [(0, "sampled"), (4, "sampled"), (8, "sampled")]
    for b in stats:
        x = batches[b.step]
        assert b.num_nonfinite == 0 and b.num_tensors == 2 and not b.sampled
        assert b.min_value is not None and b.min_value <= float(x.min())
        assert b.max_value is not None and b.max_value >= float(x.max())
    assert not of_kind(events, schema.NonFinite)


def test_nan_in_a_module_is_named_at_its_step_by_replay(world: None, sink: FrameSink) -> None:
    events, _ = run(sink, 8, nan_module="body.2", nan_step=5)
    (nf,) = of_kind(events, schema.NonFinite)  # one episode: every later loss is NaN too
    assert (nf.step, nf.where, nf.module, nf.tensor) == (5, "module_output", "body.2", "output")
    assert nf.method == "replay" and nf.reproduced and math.isnan(nf.loss or 0.0)
    assert (nf.num_nonfinite, nf.num_elements) == (1, 64)
    (checked,) = [b for b in of_kind(events, schema.BatchStats) if b.reason == "nonfinite"]
    assert checked.step == 5 and checked.num_nonfinite == 0 and not checked.sampled


def test_nan_in_the_input_batch_is_blamed_on_the_input(world: None, sink: FrameSink) -> None:
    events, _ = run(sink, 6, nan_input_step=2)
    (nf,) = of_kind(events, schema.NonFinite)
    assert (nf.step, nf.where, nf.tensor, nf.num_nonfinite) == (2, "input", "batch[0]", 1)
    (checked,) = [b for b in of_kind(events, schema.BatchStats) if b.reason == "nonfinite"]
    assert checked.step == 2 and checked.num_nonfinite == 1


def test_a_transient_nan_is_not_reproduced(world: None, sink: FrameSink) -> None:
    events, _ = run(sink, 6, nan_module="body.0", nan_step=3, transient=True)
    (nf,) = of_kind(events, schema.NonFinite)
    assert (nf.step, nf.where, nf.module, nf.reproduced) == (3, "loss", "", False)


def test_replay_leaves_rng_and_buffers_as_they_were() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 1))
    model.get_submodule("3").bias.data.fill_(math.nan)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(5, 4)
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    found, again = replay(torch, model, (x,), {}, lambda m: type(m).__name__)
    assert torch.equal(torch.rand(3), expected)
    after = model.state_dict()
    assert all(torch.allclose(before[k], after[k], equal_nan=True, rtol=0, atol=0) for k in before)
    assert found is not None and again
    assert (found.module, found.where, found.params_finite) == ("Linear", "module_output", False)


def test_nonfinite_gradient_with_a_finite_loss(world: None, sink: FrameSink) -> None:
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST, **EVERY))
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(6):
        opt.zero_grad()
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        if i == 4:
            model.module.head.weight.grad[0, 1] = math.inf  # type: ignore[index]
        opt.step()
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error
    sample = next(s for s in of_kind(events, schema.NumericsSample) if s.step == 4)
    assert sample.grad_norm == math.inf and sample.num_nonfinite_grads == 1
    grad, loss = of_kind(events, schema.NonFinite)
    assert (grad.step, grad.where, grad.tensor, grad.method) == (
        4,
        "grad",
        "head.weight",
        "grad_sample",
    )
    # SGD applied the Inf: the next loss is non-finite, and the replay says whose parameters are
    assert (loss.step, loss.where, loss.module) == (5, "module_output", "head")
    assert loss.tensor == "output (parameters non-finite)"


def test_amp_loss_scale_changes_are_sent(world: None, sink: FrameSink) -> None:
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST, **EVERY))
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1000)
    for i in range(5):
        opt.zero_grad()
        loss = model(torch.randn(2, 4)).square().mean()
        scaler.scale(loss).backward()
        if i in (1, 2):
            model.weight.grad[0, 0] = math.inf  # type: ignore[index]
        scaler.step(opt)
        scaler.update()
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error
    scales = [(s.step, s.loss_scale) for s in of_kind(events, schema.NumericsSample)]
    changes = [(step, v) for step, v in scales if v is not None]
    assert [v for _, v in changes] == [1024.0, 512.0, 256.0]
    assert [step for step, _ in changes] == [0, 1, 1]  # skipped steps end no step


def test_fingerprint_plan_samples_within_the_budget() -> None:
    slices = hook_fingerprint.plan([1000, 10, 90], budget=110)
    assert [s.count for s in slices] == [100, 1, 9]
    assert all(s.start < s.stride for s in slices)
    assert [s.count for s in hook_fingerprint.plan([5, 5], budget=10)] == [5, 5]
    assert hook_fingerprint.combine([1, -1]) == (1 << 63) - 2  # 1 x 1 + 3 x -1, mod 2**63


def test_batch_stats_sample_large_tensors() -> None:
    x = torch.arange(1000, dtype=torch.float32)
    x[7] = math.nan
    full = batch_stats(torch, (x, torch.ones(3, dtype=torch.long)), 100, full=True)
    assert full["num_nonfinite"] == 1 and full["num_elements"] == 1000 and full["num_tensors"] == 1
    assert (full["min_value"], full["max_value"], full["sampled"]) == (0.0, 999.0, False)
    part = batch_stats(torch, {"x": x}, 100, full=False)
    assert part["sampled"] and part["num_elements"] == 100 and part["num_nonfinite"] == 0


class Replica:
    """What the numerics tier reads of a DistributedDataParallel module."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.process_group = None


def test_a_device_loss_read_late_arms_module_checks_for_the_next_forward() -> None:
    """The path of a loss on a GPU, driven by hand: the hook thread reads a non-finite loss
    (here a tensor standing in for a device one) and the next forward names the module."""
    records: list[tuple[object, ...]] = []

    def fail(exc: BaseException) -> None:
        raise exc

    num = Numerics(HookConfig(), torch, emit=records.append, error=fail, pg_info=lambda g: ("0", 2))
    net = Net()
    poison(net.body.get_submodule("2"), lambda: True)
    num.add_replica(Replica(net))
    side = NumericsEvents(num, EventFactory(host="h", rank=0, local_rank=0, job_id="j"), torch)
    rec = ("step", 7, 0, 1, *([0] * 7), torch.tensor(math.nan), 1, 0, 0)
    built: list[schema.Event] = []
    rec = side.step_record(rec, built)
    assert isinstance(rec[11], float) and math.isnan(rec[11]) and num.window_for is not None
    num.on_batch(torch.randn(4, 8), 8)  # the next step begins: the checks are armed
    net(torch.randn(4, 8))
    num.post_step(8)
    (found,) = [r for r in records if r[0] == "nonfinite"]
    assert found[1:9] == (7, "module_output", "body.2", "output", 1, 64, "window", True)
    assert num.window_for is None and not torch.nn.modules.module._global_forward_hooks
