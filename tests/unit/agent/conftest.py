"""Fixtures shared by the hook tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
import torch.distributed as dist

from diag.config import HookConfig
from diag.hook import core as hook


@pytest.fixture(scope="module")
def world() -> Iterator[None]:
    """A world-size-1 gloo process group; the hook is installed once first to size the FR."""
    short = tempfile.mkdtemp(prefix="dh")
    hook.install(HookConfig(flush_interval_s=0.05, fr_poll_interval_s=0.1))
    hook.uninstall()
    dist.init_process_group(
        "gloo", store=dist.FileStore(os.path.join(short, "store"), 1), rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()
    shutil.rmtree(short, ignore_errors=True)
