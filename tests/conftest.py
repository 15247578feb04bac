"""Fixtures shared by the whole suite (tests/unit/hook/conftest.py adds the hook tests' sink): a
one-rank gloo world for the hook tests, the two-node network (network namespaces) for the
integration tests that need it, the guard that keeps unit tests from starting processes (those
belong in tests/integration), a terminal width that is the tests' own, and a ``TMPDIR`` that
pytest cleans up."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.netns import two_nodes

__all__ = ["no_processes_in_unit_tests", "no_terminal_width", "observer", "two_nodes", "world"]

UNIT = Path(__file__).resolve().parent / "unit"


@pytest.fixture(autouse=True)
def no_processes_in_unit_tests(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit test that starts a process fails at once, naming the call: move it to
    tests/integration (or fake the process behind the seam it goes through)."""
    if UNIT not in Path(str(request.node.path)).resolve().parents:
        return

    def refuse(what: str):  # type: ignore[no-untyped-def]
        def fail(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise AssertionError(f"a unit test started a process ({what}): move it to integration")

        return fail

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess"))
    # (os.system stays: a test pickles it as a payload the dump reader must refuse to call)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(f"os.{name}"))


@pytest.fixture(scope="session", autouse=True)
def scratch_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``TMPDIR`` for the whole session, and every process it starts, under pytest's base
    temporary directory (which pytest prunes, keeping the last few sessions): a job a test kills
    leaves its temporary files there, not in the machine's ``/tmp`` (seen: ~40 directories of
    checkpoints and torchrun rendezvous files per suite run)."""
    scratch = tmp_path_factory.mktemp("t", numbered=False)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    try:
        yield scratch
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None


@pytest.fixture(autouse=True)
def no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables are laid out for ``COLUMNS`` when output is piped: a test sees diag's default
    width, not the developer's terminal's or pytest-xdist's (its workers set ``COLUMNS=80``);
    a test of widths sets its own."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


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


@pytest.fixture(scope="session")
def observer() -> Any:
    """diag's operator observer built for this torch, loaded from the default cache where the
    jobs' hooks look for it (``make test`` builds it first; the build itself is tested in
    tests/integration/test_opstats_build.py); skipped, with why, where it is not built."""
    from diag.hook import opstats

    found, why = opstats.load()
    if found is None:
        pytest.skip(f"diag's operator observer: {why}")
    return found
