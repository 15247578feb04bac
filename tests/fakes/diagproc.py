"""Helpers for integration tests that start real diag processes and torchrun jobs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from diag.selftest.workloads import TRAIN_DDP
from tests.fakes.paths import REPO

DEMO = TRAIN_DDP
LOSS_LINE = re.compile(r"rank (\d+) step (\d+) loss (\S+)")


def diag(*args: str) -> list[str]:
    return [sys.executable, "-m", "diag.cli.main", *args]


def torchrun(nproc: int, *script_args: str, script: Path = DEMO) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(nproc), str(script), *script_args,
    ]  # fmt: skip


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), e.get("PYTHONPATH", "")) if p)
    e.pop("DIAG_HOST", None)
    return e


def printed_losses(text: str) -> dict[tuple[int, int], float]:
    """(rank, step) -> loss as the training script printed it."""
    return {(int(r), int(s)): float(v) for r, s, v in LOSS_LINE.findall(text)}


class Analyzer:
    """A ``diag analyzer`` subprocess on 127.0.0.1 (port 0 the first time, then the same port)."""

    def __init__(self, run_dir: Path, log: Path) -> None:
        self.run_dir = run_dir
        self.log = log
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> Analyzer:
        port_file = self.run_dir.parent / f"{self.run_dir.name}.port"
        port_file.unlink(missing_ok=True)
        cmd = diag(
            "analyzer", "--run-dir", str(self.run_dir), "--bind", f"127.0.0.1:{self.port}",
            "--port-file", str(port_file),
        )  # fmt: skip
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text().strip())
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"analyzer exited {self.proc.returncode}: {self.log.read_text()}"
                )
            time.sleep(0.05)
        raise RuntimeError("analyzer did not start")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)
