"""Shared fixtures of the hook tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.hook_sink import FrameSink


@pytest.fixture
def sink() -> Iterator[FrameSink]:
    """A daemon stand-in on a short Unix socket path, decoding every frame the hook sends."""
    short = tempfile.mkdtemp(prefix="dh")
    s = FrameSink(Path(short) / "d.sock")
    s.start()
    yield s
    s.close()
    shutil.rmtree(short, ignore_errors=True)
