"""The hook on a real world-size-1 gloo DDP job in this process, sending to a real socket."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook import thread
from tests.fakes.hook_sink import FrameSink, of_kind

FAST = {"flush_interval_s": 0.05, "fr_poll_interval_s": 0.1, "reconnect_interval_s": 0.05}


class Sleepy(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A dataset whose every item costs ``sleep_s`` (a slow input pipeline)."""

    def __init__(self, n: int, sleep_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.sleep_s)
        return self.data[i]


def train(steps: int, *, sleep_s: float = 0.0, save_to: Path | None = None) -> list[float]:
    """A plain DDP loop; returns the losses it saw (``loss.item()``)."""
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Sleepy(steps * 2, sleep_s), batch_size=2)
    losses = []
    for i, (x, y) in enumerate(loader):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        dist.all_reduce(torch.ones(3))
        opt.step()
        losses.append(loss.item())
        if save_to is not None and i == 1:
            torch.save(model.state_dict(), save_to)
    return losses


def test_steps_phases_losses_checkpoint_and_collectives(world: None, sink: FrameSink) -> None:
    ckpt = Path(sink.path).parent / "ck.pt"
    installed_ns = time.time_ns()
    h = hook.install(HookConfig(daemon_sock=sink.path, **FAST))
    losses = train(5, sleep_s=0.004, save_to=ckpt)
    hook.uninstall()
    events = sink.close()
    assert h.num_errors == 0, h.last_error

    steps = of_kind(events, schema.StepEvent)
    assert [s.step for s in steps] == [0, 1, 2, 3, 4]
    assert [s.loss for s in steps] == losses  # exactly the floats the loop saw
    for s in steps:
        phases = (s.data_wait_ns, s.forward_ns, s.backward_ns, s.optimizer_ns, s.checkpoint_ns)
        assert sum(phases) + s.other_ns == s.duration_ns == s.end_ns - s.start_ns
        assert min(phases) >= 0
        assert s.data_wait_ns >= 8_000_000  # two items of 4 ms
        assert s.compute_ns == (
            s.duration_ns - s.collective_wait_ns - s.data_wait_ns - s.checkpoint_ns
        )
        assert s.num_backward == 1 and s.num_collectives >= 2  # DDP's and ours
    assert steps[2].checkpoint_ns > 0  # saved after step 1's optimizer step

    (saved,) = of_kind(events, schema.CheckpointEvent)
    assert (saved.op, saved.api, saved.path, saved.ok) == ("save", "save", str(ckpt), True)
    assert saved.num_bytes == ckpt.stat().st_size and saved.step == 2

    # this job's (DDP's set-up broadcasts included): the Flight Recorder ring is the process's
    # and keeps what another test module's job of the same worker enqueued, shipped at install
    # as its history
    colls = [c for c in of_kind(events, schema.CollectiveEvent) if c.enqueue_ns >= installed_ns]
    assert all(c.origin == "fr" and c.pg_size == 1 and c.pg_name == "0" for c in colls)
    seq_ids = [c.seq_id for c in colls]
    assert seq_ids == list(range(1, len(colls) + 1))
    reduces = [c for c in colls if c.op == "all_reduce"]
    ddp = [c for c in reduces if c.num_bytes == (8 * 16 + 16 + 16 + 1) * 4]  # the grad bucket
    assert [c.step for c in ddp] == [0, 1, 2, 3, 4] and all(c.dtype == "Float" for c in ddp)
    ours = [c for c in reduces if c.num_bytes == 12]
    assert len(ours) == 5 and all(c.duration_ns and c.duration_ns > 0 for c in ours)
    assert [c.step for c in ours] == [0, 1, 2, 3, 4]

    (info, *_) = of_kind(events, schema.RankInfo)
    assert info.pid == os.getpid() and info.torch_version == torch.__version__
    full = [i for i in of_kind(events, schema.RankInfo) if i.backend]  # once the group exists
    assert full and (full[-1].device, full[-1].device_uuid) == ("cpu", "")  # no GPU here
    assert full[-1].nccl_timing == thread.nccl_timing_on(os.environ)
    health = of_kind(events, schema.HookHealth)
    assert health[-1].final and health[-1].num_errors == 0 and health[-1].num_dropped == 0
    # every seq once, none missing (a harvest's collectives come as a column block after the
    # frame's row events: the daemon puts them back in seq order, diag.daemon.daemon)
    seqs = sorted(e.seq for e in events)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert all(e.source == f"{info.host}/rank0/{os.getpid()}" for e in events)


def test_unreachable_daemon_and_own_errors_never_reach_training(world: None) -> None:
    missing = os.path.join(tempfile.gettempdir(), "diag-no-such-daemon.sock")
    h = hook.install(HookConfig(daemon_sock=missing, queue_max_events=3, **FAST))
    original_enter = h.tracker.enter

    def broken(phase: int, now: int) -> bool:
        raise RuntimeError("diag bug")

    h.tracker.enter = broken  # type: ignore[method-assign]
    losses = train(4)
    h.tracker.enter = original_enter  # type: ignore[method-assign]
    hook.uninstall()
    assert len(losses) == 4
    assert h.num_errors > 0 and "diag bug" in h.last_error
    assert h.thread.sender.num_dropped > 0 and h.thread.sender.num_sent == 0


def test_uninstall_restores_everything_and_install_is_idempotent(world: None) -> None:
    c10d = dist.distributed_c10d
    loader_iter = torch.utils.data.dataloader._BaseDataLoaderIter
    optim = sys.modules["torch.optim.optimizer"]

    def state() -> list[object]:
        return [
            torch.autograd.backward,
            torch.save,
            torch.load,
            dist.all_reduce,
            c10d.all_reduce,
            dist.barrier,
            loader_iter.__next__,
            len(optim._global_optimizer_pre_hooks),
            len(optim._global_optimizer_post_hooks),
        ]

    before = state()
    h = hook.install(HookConfig(**FAST))
    assert hook.install() is h
    during = state()
    assert all(a is not b for a, b in zip(before[:7], during[:7], strict=True))
    assert dist.all_reduce is c10d.all_reduce
    hook.uninstall()
    assert state() == before


def test_user_exceptions_propagate_unchanged(world: None) -> None:
    def bad_call() -> type[BaseException]:
        try:
            dist.broadcast(torch.ones(2), src=7)
        except Exception as exc:
            return type(exc)
        raise AssertionError("expected the real call to fail")

    plain = bad_call()
    h = hook.install(HookConfig(**FAST))
    try:
        assert bad_call() is plain
        with pytest.raises(FileNotFoundError):
            torch.load("/nonexistent/diag.pt")
    finally:
        hook.uninstall()
    assert h.num_errors == 0, h.last_error


def test_nccl_timing_and_the_device_uuid_as_torch_gives_them() -> None:
    assert all(thread.nccl_timing_on({"TORCH_NCCL_ENABLE_TIMING": v}) for v in ("1", "True", " on"))
    assert not any(thread.nccl_timing_on({"TORCH_NCCL_ENABLE_TIMING": v}) for v in ("0", "", "x"))
    assert not thread.nccl_timing_on({})

    class Props:
        uuid = "58d9e7d9-1b2c-3d4e-5f60-718293a4b5c6"  # torch's str of the CUDA UUID: bare

    cuda = types.SimpleNamespace(current_device=lambda: 3, get_device_properties=lambda i: Props)
    fake = types.SimpleNamespace(cuda=cuda)
    assert thread._device_uuid(fake) == "GPU-58d9e7d9-1b2c-3d4e-5f60-718293a4b5c6"  # as NVML
    Props.uuid = "MIG-0a1b"  # already prefixed: kept
    assert thread._device_uuid(fake) == "MIG-0a1b"
    cuda.get_device_properties = lambda i: 1 / 0  # torch cannot say: "", never raises
    assert thread._device_uuid(fake) == ""
