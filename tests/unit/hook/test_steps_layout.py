"""The hook on a real world-size-1 gloo job in this process: steps across re-created optimizers
and with several optimizers per iteration, the process groups it reports (groups created after
install included), and ``Work.wait()`` on asynchronous collectives counted as collective wait."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist
from torch import nn

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook import patches as hook_patches
from tests.fakes.hook_sink import FrameSink, of_kind

FAST = {"flush_interval_s": 0.05, "fr_poll_interval_s": 0.1, "reconnect_interval_s": 0.05}


def data(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    return torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)


def steps_of(events: list[schema.Event]) -> list[schema.StepEvent]:
    return sorted(of_kind(events, schema.StepEvent), key=lambda s: s.step)


def test_steps_continue_across_a_recreated_optimizer(world: None, sink: FrameSink) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for i in range(8):
        if i == 3:  # resume logic: a new optimizer object with the old one's state
            new = torch.optim.Adam(model.parameters(), lr=0.01)
            new.load_state_dict(opt.state_dict())
            opt = new
        x, y = data(i)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    hook.uninstall()
    steps = steps_of(sink.close())
    assert h.num_errors == 0, h.last_error
    assert [s.step for s in steps] == list(range(8))
    assert [s.loss for s in steps] == losses


def test_a_gan_iteration_is_one_step_ending_at_the_generator(world: None, sink: FrameSink) -> None:
    torch.manual_seed(0)
    disc = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    gen = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8))
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST))
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.01)
    g_losses = []
    iterations = 8
    for i in range(iterations):
        real, _ = data(i)
        noise = torch.randn(4, 4, generator=torch.Generator().manual_seed(100 + i))
        opt_d.zero_grad()
        d_loss = disc(real).mean() - disc(gen(noise).detach()).mean()
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = disc(gen(noise)).mean()
        g_loss.backward()
        opt_g.step()
        g_losses.append(g_loss.item())
    hook.uninstall()
    steps = steps_of(sink.close())
    assert h.num_errors == 0, h.last_error
    assert [s.step for s in steps] == list(range(iterations))  # one step per iteration
    # From step 2 on (the generator is learned as the closer during iteration 1), a step is one
    # iteration: it ends at the generator's step(), so its last backward is the generator's.
    assert [s.loss for s in steps[2:]] == g_losses[2:]
    assert all(s.num_backward == 2 for s in steps[2:])


def test_several_optimizers_per_iteration_are_one_step(world: None, sink: FrameSink) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST))
    params = list(model.parameters())
    opts = [torch.optim.SGD(params[i::3], lr=0.01) for i in range(3)]  # per-group optimizers
    for i in range(6):
        x, y = data(i)
        for opt in opts:
            opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        for opt in opts:
            opt.step()
    hook.uninstall()
    steps = steps_of(sink.close())
    assert h.num_errors == 0, h.last_error
    assert [s.step for s in steps] == list(range(6))
    assert all(s.num_backward == 1 for s in steps[2:])


def test_process_groups_are_reported_once_with_their_members(world: None, sink: FrameSink) -> None:
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST))
    group = dist.new_group([0], group_desc="dp")  # created after install
    dist.all_reduce(torch.ones(2), group=group)
    hook.uninstall()
    infos = of_kind(sink.close(), schema.ProcessGroupInfo)
    assert h.num_errors == 0, h.last_error
    by_name = {g.pg_name: g for g in infos}
    assert len(by_name) == len(infos)  # once per group
    default = by_name["0"]
    assert (default.pg_desc, default.ranks_json, default.size, default.backend) == (
        "default_pg", "[0]", 1, "gloo")  # fmt: skip
    mine = [g for g in infos if g.pg_desc == "dp"]
    assert len(mine) == 1 and json.loads(mine[0].ranks_json) == [0] and mine[0].size == 1
    assert all(g.rank == 0 for g in infos)


def test_the_collective_wrapper_finds_the_group_by_position_or_keyword(world: None) -> None:
    """The group among the positional arguments is found by type (cached per argument type,
    since ``isinstance`` against ``ProcessGroup`` is a Python call), a tensor never taken for
    one; the keyword wins; none given is the default group (None)."""
    group = dist.new_group([0], group_desc="tp")
    pg_type, kinds = dist.ProcessGroup, {}
    t = torch.ones(2)
    for _ in range(2):  # the second time from the cache
        assert hook_patches._group((t, dist.ReduceOp.SUM, group), {}, pg_type, kinds) is group
        assert hook_patches._group((t,), {"group": group}, pg_type, kinds) is group
        assert hook_patches._group((t, dist.ReduceOp.SUM), {}, pg_type, kinds) is None
    assert kinds[torch.Tensor] is False and kinds[type(group)] is True


def test_waits_on_async_collectives_count_as_collective_wait(world: None, sink: FrameSink) -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST))
    counted = {}  # step -> wait the hook counted inside the test's own wait() calls
    for i in range(4):
        x, y = data(i)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if i >= 2:  # async all-reduces of the gradients, waited on before the step
            works = [dist.all_reduce(p.grad, async_op=True) for p in model.parameters()]
            before = h.tracker.py_coll_ns
            for work in works:
                assert work is not None
                work.wait()
            counted[i] = h.tracker.py_coll_ns - before
        dist.all_reduce(torch.ones(1))  # a blocking one, timed by its own wrapper
        opt.step()
    hook.uninstall()
    steps = steps_of(sink.close())
    assert h.num_errors == 0, h.last_error
    assert counted[2] > 0 and counted[3] > 0
    for i, ns in counted.items():
        assert steps[i].collective_wait_ns >= ns
    assert all(s.compute_ns == s.duration_ns - s.collective_wait_ns - s.data_wait_ns for s in steps)
