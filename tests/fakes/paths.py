"""Where the tests find the repository, their checked-in data and the shared external files."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
#: Real files from public projects (Flight Recorder dumps, Kineto traces, SuperBench logs):
#: ``DIAG_SHARED_DIR``, else the ``shared/`` folder beside the checkout.
SHARED = Path(os.environ.get("DIAG_SHARED_DIR", REPO.parent / "shared"))
