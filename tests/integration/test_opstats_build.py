"""Building diag's operator observer (:mod:`diag.hook.opstats`) as ``diag run`` does: the real
compiler, started beside the job into a fresh cache, only where none is built; the library lands
whole, private, under its torch's key, is reused, and a second build while one holds the lock
leaves it to that one. One compile for all of it (~30 s on this VM)."""

from __future__ import annotations

import fcntl
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from diag.hook import opstats
from tests.fakes.diagproc import env

pytestmark = pytest.mark.integration

LOAD = """
import sys, torch
from diag.hook import opstats
found, why = opstats.load()
assert found is not None, why
assert found.start()
a = torch.ones(3)
for _ in range(5):
    a = a * 2
rows = {r.name: r.calls for r in found.stop().rows}
print(rows.get("aten::mul", 0))
"""


def test_the_launcher_builds_once_into_a_private_cache_then_a_job_loads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One compile (tens of seconds here) serves the whole module: built as ``diag run``
    starts it beside a job (:func:`opstats.build_in_background`), then everything else."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DIAG_CACHE_DIR", str(cache))
    e = env()
    e["DIAG_CACHE_DIR"] = str(cache)
    where = subprocess.run(
        [sys.executable, "-m", "diag.hook.opstats", "path"], env=e, capture_output=True,
        text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    log = tmp_path / "logs" / "opstats-build.log"
    proc = opstats.build_in_background(log)
    assert proc is not None
    assert proc.wait(timeout=600) in (0, 1)
    out = log.read_text()
    if proc.returncode == 1 and "not built" in out:
        pytest.skip(out.strip())  # no compiler here: the windows use Kineto
    assert proc.returncode == 0, out[-2000:]
    lib = Path(out.strip().splitlines()[-1])
    assert opstats.build_in_background(log) is None  # built: nothing to start
    assert str(lib) == where and lib.parent == cache / "opstats"
    assert lib.name.startswith("diag_opstats_") and lib.suffix == ".so"
    assert stat.S_IMODE(lib.parent.stat().st_mode) & 0o077 == 0  # nobody else writes there
    assert sorted(p.name for p in lib.parent.iterdir() if not p.name.startswith(".build.lock")) == [
        lib.name,
        lib.with_suffix(opstats.OWNER_SUFFIX).name,
    ]  # no build directory left behind; the record of its torch (what a later build prunes by)
    assert (lib.with_suffix(opstats.OWNER_SUFFIX)).read_text().strip() == opstats._torch_dir()
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD], env=e, capture_output=True, text=True, timeout=120
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.strip() == "5"
    again = subprocess.run(
        [sys.executable, "-m", "diag.hook.opstats", "build"], env=e, capture_output=True,
        text=True, timeout=120, check=True,
    )  # fmt: skip
    assert again.stdout.strip() == str(lib)  # reused, not rebuilt

    lib.unlink()
    with open(lib.parent / ".build.lock", "a") as held:  # another build is running
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = subprocess.run(
            [sys.executable, "-m", "diag.hook.opstats", "build"], env=e, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
    assert waiting.returncode == 0 and "another build" in waiting.stdout
    assert not lib.exists()
