"""``diag attach`` learns the job's Python version without running the job's code: from the
files the process has mapped or its executable's name; only then by asking the interpreter in
isolated mode without ``site`` (once, it ran ``/proc/PID/exe -c ...`` as root: the job's ``.pth``
files, the job user's code, ran as root)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from diag.attach import AttachError, inject

MAP = "7f00-7f01 r-xp 00000000 08:01 1234                       {}\n"


def _proc(root: Path, pid: int, exe: str, mapped: list[str]) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "exe").symlink_to(exe)
    lines = ["00400000-00401000 r-xp 00000000 00:00 0\n"]  # anonymous: no path
    lines += [MAP.format(m) for m in mapped]
    (d / "maps").write_text("".join(lines))


@pytest.mark.parametrize(
    ("exe", "mapped", "version"),
    [
        ("/opt/env/bin/python", ["/opt/env/lib/libpython3.12.so.1.0"], (3, 12)),
        (
            "/usr/bin/python3",
            ["/env/lib/python3.11/site-packages/torch/_C.cpython-311-x86_64-linux-gnu.so"] * 3
            + ["/usr/lib/x86_64-linux-gnu/libc.so.6"],
            (3, 11),
        ),
        ("/usr/local/bin/python3.10", ["/usr/lib/x86_64-linux-gnu/libc.so.6"], (3, 10)),
    ],
)
def test_the_version_comes_from_what_the_process_mapped_or_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exe: str, mapped: list[str],
    version: tuple[int, int],
) -> None:  # fmt: skip
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the target's interpreter was run")

    monkeypatch.setattr(inject.subprocess, "run", refuse)
    _proc(tmp_path, 42, exe, mapped)
    assert inject.target_version(42, proc_root=str(tmp_path)) == version


def test_otherwise_the_interpreter_is_asked_isolated_without_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.update(argv=argv, **kwargs)
        return subprocess.CompletedProcess(argv, 0, stdout="3.13\n", stderr="")

    monkeypatch.setattr(inject.subprocess, "run", run)
    _proc(tmp_path, 7, "/opt/bin/python", ["/usr/lib/libc.so.6"])
    assert inject.target_version(7, proc_root=str(tmp_path)) == (3, 13)
    assert seen["argv"][:4] == ["/opt/bin/python", "-I", "-S", "-c"]
    assert seen["env"] == {} and seen["cwd"] == "/"
    if os.geteuid() == 0 and (tmp_path / "7").stat().st_uid != 0:
        assert seen["user"] == (tmp_path / "7").stat().st_uid


def test_a_vanished_process_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(AttachError, match="vanished"):
        inject.target_version(99, proc_root=str(tmp_path))
