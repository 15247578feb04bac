"""Regenerate torch_cpu_rank0.json.gz and marks.json (run from this folder with torch installed).

A tiny real torch.profiler run (CPU): two steps of a Linear layer inside ProfilerStep spans, and a
``record_function("mark")`` bracketed by ``time.time_ns()`` before and inside it, so tests can check
that ``baseTimeNanoseconds + ts * 1000`` is wall-clock time.
"""

import gzip
import json
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

model = torch.nn.Linear(32, 16)
x = torch.randn(8, 32)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(2):
        model(x).relu().sum().backward()
        prof.step()
    before_ns = time.time_ns()
    with record_function("mark"):
        inside_ns = time.time_ns()
prof.export_chrome_trace("trace.json")
raw = Path("trace.json").read_bytes()
Path("torch_cpu_rank0.json.gz").write_bytes(gzip.compress(raw, 9))
Path("trace.json").unlink()
marks = {"torch": torch.__version__, "before_ns": before_ns, "inside_ns": inside_ns}
Path("marks.json").write_text(json.dumps(marks, indent=1) + "\n")
