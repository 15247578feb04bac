"""What a fresh interpreter loads when it imports a part of diag: the hook stays cheap inside every
training process (none of torch, pandas, pyarrow, sklearn, grpc or rich at import), and the
daemon's side imports pynvml only when the NVML backend is opened. One new interpreter per check:
an import this process already did would hide the cost."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

pytestmark = pytest.mark.integration

#: What the hook must not pull in when a training script (or sitecustomize) imports it.
HOOK_FORBIDDEN = (
    "torch", "pandas", "pyarrow", "sklearn", "grpc", "rich", "prometheus_client", "plotly",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Closure:
    """Importing ``imports``, in order, in a new interpreter loads none of ``forbidden``."""

    imports: tuple[str, ...]
    forbidden: tuple[str, ...]


#: check name (the test id) -> the imports and what they must not load.
CLOSURES: dict[str, Closure] = {
    "diag.hook.core": Closure(("diag.hook.core",), HOOK_FORBIDDEN),
    "diag.hook": Closure(("diag.hook",), HOOK_FORBIDDEN),
    # the package root offers diag.open / diag.triage, loaded on first use only
    "diag": Closure(("diag",), HOOK_FORBIDDEN),
    "diag.gpu.nvml": Closure(
        ("diag.daemon.collectors", "diag.gpu.nvml", "diag.daemon.daemon"), ("pynvml",)
    ),
}


def loaded_after(closure: Closure) -> list[str]:
    """Which of ``closure.forbidden`` a new interpreter has in sys.modules after the imports."""
    code = (
        f"import sys, {', '.join(closure.imports)}\n"
        f"loaded = [m for m in {list(closure.forbidden)!r} if m in sys.modules]\n"
        "import json\n"
        "print(json.dumps(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


@pytest.mark.parametrize("name", list(CLOSURES))
def test_import_closure(name: str) -> None:
    assert loaded_after(CLOSURES[name]) == []
