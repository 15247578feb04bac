"""Fixtures shared by the whole suite (the only conftest): a one-rank gloo world for the hook
tests, and the two-node network (network namespaces) for the integration tests that need it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.fakes.netns import two_nodes

__all__ = ["two_nodes", "world"]


@pytest.fixture(scope="module")
def world() -> Iterator[None]:
    """A world-size-1 gloo process group; the hook is installed once first to size the FR."""
    import torch.distributed as dist

    from diag import hook
    from diag.config import HookConfig

    short = tempfile.mkdtemp(prefix="dh")
    hook.install(HookConfig(flush_interval_s=0.05, fr_poll_interval_s=0.1))
    hook.uninstall()
    dist.init_process_group(
        "gloo", store=dist.FileStore(os.path.join(short, "store"), 1), rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()
    shutil.rmtree(short, ignore_errors=True)
