"""Operator totals for periodic CPU windows: diag's RecordFunction observer (``opstats.cpp``).

torch's profiler keeps every operator call of a window and builds the whole trace when it stops,
on the training thread: ~2-3 us per call, so a window step of a CPU job of small operators costs
+40-50 % (``bench/overhead.py --tier kernel``), and no torch option keeps less (tried on torch
2.13: ``trace_only`` -25 % of the stop, record scopes and external correlation nothing). What the
kernel detector reads of a periodic window is per-operator totals; this observer keeps only
those (calls, summed / median / longest duration per name): ~0.3 us per call while on, ~0.1 ms
to stop. A periodic window that records CPU operators (a rank that does not compute on CUDA, no
shapes asked) uses it when it is built for this torch, and is then ``ProfileWindow.aggregated``
(no raw trace); on-demand windows (someone asked for evidence: shapes, the raw trace) and device
windows stay with Kineto.

It is C++ compiled against the installed torch, once: ``python -m diag.hook.opstats build``
(``diag run`` and ``diag attach`` start it in the background; ~10 s with g++, then cached).
The library lands, atomically, at ``<cache>/opstats/diag_opstats_<key>.so`` where the key hashes
the source, torch's version and build, Python's and the machine's; the cache is
``$DIAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/diag``, else ``~/.cache/diag``. The hook only loads a
library of its own key from a directory it owns that nobody else can write (a library planted
there would run inside the job). Where none is built (no compiler, another torch), windows use
Kineto as before. A build removes the libraries it makes stale (:func:`prune`): those built for
the same torch installation (an older diag source or torch there) or for a torch since removed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("opstats.cpp")
#: beside each library, the torch directory it was built for (what :func:`prune` reads)
OWNER_SUFFIX = ".torch"
#: Operator calls counted per window at most (8 bytes each kept for the median): beyond it the
#: calls are counted as dropped.
MAX_CALLS = 1 << 21


@dataclass(frozen=True, slots=True)
class OpRow:
    """One operator name over a window: ``scope`` "function" (an operator), "backward" (an
    autograd node) or "user" (a ``record_function`` annotation)."""

    name: str
    scope: str
    calls: int
    total_ns: int
    median_ns: int
    max_ns: int


@dataclass(frozen=True, slots=True)
class OpTotals:
    """What one window counted; ``dropped``: calls beyond :data:`MAX_CALLS`, not counted."""

    rows: tuple[OpRow, ...]
    dropped: int = 0


def cache_root(env: dict[str, str] | os._Environ[str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("DIAG_CACHE_DIR"):
        return Path(env["DIAG_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "diag"


def torch_identity() -> str:
    """The installed torch's version and commit, read from its ``version.py`` without importing
    it (the launcher looks for a built observer before the job imports torch); "" when torch is
    not installed."""
    origin = _torch_origin()
    if not origin:
        return ""
    try:
        text = (Path(origin).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return ""
    found = dict(_VERSION_LINE.findall(text))
    return f"{found.get('__version__', '')} {found.get('git_version', '')} {origin}"


def _torch_origin() -> str:
    """Where the installed torch's package is imported from ("" without one); not imported."""
    spec = importlib.util.find_spec("torch")
    return spec.origin if spec is not None and spec.origin else ""


_VERSION_LINE = re.compile(
    r"^(__version__|git_version)\s*(?::\s*\w+\s*)?=\s*['\"]([^'\"]*)['\"]", re.M
)


def build_key() -> str:
    """What a built library must match: the source, torch's version, commit and place, Python
    and the machine."""
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in (
        torch_identity(),
        sys.version,
        sys.implementation.cache_tag or "",
        platform.machine(),
    ):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


def module_name(key: str) -> str:
    return f"diag_opstats_{key}"


def library_path(root: Path | None = None) -> Path:
    key = build_key()
    return (cache_root() if root is None else root) / "opstats" / f"{module_name(key)}.so"


def _private(path: Path) -> str:
    """Why ``path`` (a directory or file) may not be trusted: "" when it is ours and nobody else
    may write it."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by others"
    return ""


@dataclass(frozen=True, slots=True)
class GradsMark:
    """The backward's "local gradients done" mark in C++ (``opstats.cpp``, ``grads``): a pre-hook
    on the root's autograd node that queues an engine final callback recording the monotonic
    clock and the training thread's run-queue delay, without calling into Python.

    ``arm(tensor) -> bool`` on the training thread before its backward (False: the tensor has no
    autograd node, no mark will come); ``done() -> (perf_counter ns, run-queue ns or -1) | None``
    after it (None: the backward ended before the mark, e.g. it raised); ``runq_fd(fd)`` the
    descriptor of the training thread's ``schedstat`` (:func:`diag.hook.sched.clock_fd`), -1 for
    none."""

    arm: Any
    done: Any
    runq_fd: Any


class OpStats:
    """A loaded observer library: :meth:`start` / :meth:`stop` on the training thread."""

    def __init__(self, module: Any, path: Path) -> None:
        self._m = module
        self.path = path
        self._scopes = {
            int(module.SCOPE_FUNCTION): "function",
            int(module.SCOPE_BACKWARD): "backward",
            int(module.SCOPE_USER): "user",
        }

    def start(self, max_calls: int = MAX_CALLS) -> bool:
        return bool(self._m.start(max_calls))

    def running(self) -> bool:
        return bool(self._m.running())

    def dump_fn(self, ring: str) -> Any:
        """``fn(include_collectives) -> bytes | None``: the Flight Recorder ring's pickled dump
        without stack traces, built with the GIL released (:mod:`diag.hook.fr_dump`; ``ring``
        "fr" or "nccl"); None where this library has no such dump (an older build)."""
        return getattr(self._m, f"{ring}_dump", None)

    def since_fn(self) -> Any:
        """``fn(since, entries=True) -> dict | None``: the generic Flight Recorder ring read from
        record id ``since`` on (:mod:`diag.hook.fr_dump`); None where this library has no reader
        (the build found no symbol table in ``libtorch_cpu.so``, or an older build)."""
        return getattr(self._m, "fr_since", None)

    def next_id_fn(self) -> Any:
        """``fn() -> (next record id, reset epoch) | None``: the reader's probe (None where
        this library has no reader)."""
        return getattr(self._m, "fr_next_id", None)

    def since_why(self) -> str:
        """Why :meth:`since_fn` reads nothing in this process ("" when it reads)."""
        fn = getattr(self._m, "fr_since_why", None)
        if fn is None:
            return "this build of diag's native library has no Flight Recorder reader"
        return str(fn())

    def grads_mark(self) -> GradsMark | None:
        """The backward's native "local gradients done" mark (:class:`GradsMark`); None where
        this library has none (built from an older source, or torch's autograd headers
        missing)."""
        arm = getattr(self._m, "grads_arm", None)
        done = getattr(self._m, "grads_done", None)
        fd = getattr(self._m, "grads_runq_fd", None)
        if arm is None or done is None or fd is None:
            return None
        return GradsMark(arm=arm, done=done, runq_fd=fd)

    def stop(self) -> OpTotals:
        rows, dropped = self._m.stop()
        return OpTotals(
            tuple(
                OpRow(str(n), self._scopes.get(int(s), "function"), int(c), int(t), int(m), int(x))
                for n, s, c, t, m, x in rows
            ),
            int(dropped),
        )


def load(path: str = "") -> tuple[OpStats | None, str]:
    """The observer built for this process's torch (``path``: that library; "" = the cache's),
    or (None, why not) in one line. Never compiles; never raises."""
    try:
        key = build_key()
        lib = Path(path) if path else library_path()
        name = module_name(key)
        if lib.name != f"{name}.so":
            return None, f"{lib} is not the observer built for this torch ({name}.so)"
        if not lib.exists():
            return None, f"not built for this torch: {lib} (python -m diag.hook.opstats build)"
        why = _private(lib.parent) or _private(lib)
        if why:
            return None, f"not loaded: {why}"
        module = sys.modules.get(name)
        if module is None:
            import torch  # noqa: F401  (the library needs torch's own loaded first)

            loader = importlib.machinery.ExtensionFileLoader(name, str(lib))
            spec = importlib.util.spec_from_file_location(name, str(lib), loader=loader)
            if spec is None:
                return None, f"cannot load {lib}"
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            sys.modules[name] = module
        if module.key() != key:
            return None, f"{lib} was built for another torch (key {module.key()}, not {key})"
        return OpStats(module, lib), ""
    except Exception as exc:  # an ImportError of a broken library, an OSError
        return None, f"cannot load the observer: {type(exc).__name__}: {exc}".splitlines()[0]


def build(root: Path | None = None, *, verbose: bool = False) -> Path | None:
    """Compile the observer for the installed torch into the cache (atomically) and return its
    path; an existing one is reused; None when another build holds the lock (it will land
    there). Raises on failure (no compiler, no headers)."""
    final = library_path(root)
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    why = _private(final.parent)
    if why:
        raise PermissionError(why)
    with open(final.parent / ".build.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if final.exists():
            return final
        from torch.utils import cpp_extension

        key = build_key()
        name = module_name(key)
        scratch = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=final.parent))
        try:
            cpp_extension.load(
                name,
                [str(SOURCE)],
                build_directory=str(scratch),
                extra_cflags=["-O2", f"-DDIAG_OPSTATS_KEY={key}", *_fr_defines()],
                verbose=verbose,
            )
            built = scratch / f"{name}.so"
            os.chmod(built, 0o700)
            owner = scratch / f"{name}{OWNER_SUFFIX}"
            owner.write_text(_torch_dir() + "\n", encoding="utf-8")
            os.replace(owner, final.with_suffix(OWNER_SUFFIX))
            os.replace(built, final)  # whole or not at all: the hooks may look at any moment
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        prune(final)
    return final


def _fr_defines() -> list[str]:
    """Where this torch's ``libtorch_cpu.so`` keeps its generic Flight Recorder (the native
    reader's flags, :func:`diag.hook.elf_symbols.fr_defines`); none where it does not say."""
    from diag.hook import elf_symbols

    torch_dir = _torch_dir()
    return elf_symbols.fr_defines(Path(torch_dir) / "lib" / "libtorch_cpu.so") if torch_dir else []


def _torch_dir() -> str:
    """The installed torch's package directory ("" without one)."""
    origin = _torch_origin()
    return str(Path(origin).parent) if origin else ""


def prune(keep: Path) -> list[Path]:
    """Remove the libraries beside ``keep`` that no process will load again: built for the
    same torch installation as ``keep`` (an older diag source or an older torch in that place)
    or for one that is gone. Each build records its torch's directory beside the library
    (``<name>.torch``); a library without that record is left alone, and one that cannot be
    removed stays (the build that called this succeeded all the same). A library a running job
    has loaded stays mapped in it; the removed paths are returned."""
    mine = _torch_dir()
    removed: list[Path] = []
    for owner in sorted(keep.parent.glob(f"diag_opstats_*{OWNER_SUFFIX}")):
        lib = owner.with_suffix(".so")
        if lib == keep:
            continue
        try:
            place = owner.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if not place or (place != mine and Path(place).is_dir()):
            continue  # its torch unknown, or another torch still installed: its jobs load it
        for path in (lib, owner):
            with contextlib.suppress(OSError):  # gone already, or not ours to remove: kept
                path.unlink()
                removed.append(path)
    return removed


def build_in_background(log_path: Path) -> subprocess.Popen[bytes] | None:
    """Start ``python -m diag.hook.opstats build`` beside a job when the observer is not built
    for this torch yet (its output to ``log_path``); None when it is built or torch is missing.
    The job's hooks pick the library up when it lands (every few seconds until then)."""
    if not torch_identity() or library_path().exists():
        return None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "diag.hook.opstats", "build", "--nice"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(Path(__file__).resolve().parents[2]),
            start_new_session=True,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m diag.hook.opstats",
        description="Build diag's operator-totals observer for the installed torch.",
    )
    p.add_argument("command", choices=("build", "path"))
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--nice", action="store_true", help="at the lowest CPU priority (beside a job)")
    args = p.parse_args(argv)
    if args.nice:
        with contextlib.suppress(OSError):
            os.nice(19)
    try:
        if args.command == "path":
            print(library_path())
            return 0
        built = build(verbose=args.verbose)
        print(built if built is not None else "diag: another build of the observer is running")
        return 0
    except Exception as exc:
        msg = f"diag: the op-stats observer was not built: {type(exc).__name__}: {exc}"
        print(msg.splitlines()[0][:400], file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
