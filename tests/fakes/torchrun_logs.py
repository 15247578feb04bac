"""A failed torchrun job's remains, as torch and torchrun print them: a worker log with the
rendezvous result, a traceback, NCCL watchdog timeouts and torchrun's failure summary, plus the
torchelastic error file of the rank that raised (:func:`write_crash`)."""

# ruff: noqa: E501 (log lines are kept verbatim, as long as torch prints them)

from __future__ import annotations

import json
from pathlib import Path

ERROR_FILE = "torchelastic_abc/none_x1/attempt_0/2/error.json"
TRACEBACK = """Traceback (most recent call last):
  File "/job/train.py", line 88, in <module>
    main()
  File "/job/train.py", line 61, in main
    batch = next(loader)
  File "/job/data.py", line 40, in __next__
    raise ValueError(f"corrupt sample {idx}")
ValueError: corrupt sample 1234
"""

JOB_LOG = """I1121 10:00:01.000000 4242 torch/distributed/elastic/agent/server/api.py:553] [default] Rendezvous complete for workers. Result:
  restart_count=0
  master_addr=node7
  master_port=29500
  group_rank=0
  group_world_size=1
  local_ranks=[0, 1, 2, 3]
  role_ranks=[0, 1, 2, 3]
  global_ranks=[0, 1, 2, 3]
  role_world_sizes=[4, 4, 4, 4]
  global_world_sizes=[4, 4, 4, 4]
  event_log_handler=null

[default0]:step 40 loss 0.4412
[default2]:step 40 loss 0.4520
{tb2}[rank0]:[E1121 10:12:11.512847125 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=512, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.
[rank1]:[E1121 10:12:11.513000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=512, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600022 milliseconds before timing out.
[rank1]: Traceback (most recent call last):
[rank1]:   File "/job/train.py", line 70, in main
[rank1]:     loss.backward()
[rank1]: torch.distributed.DistBackendError: [PG ID 0 PG GUID 0(default_pg) Rank 1] NCCL communicator was aborted on rank 1.
W1121 10:12:12.001000 4242 torch/distributed/elastic/multiprocessing/api.py:1029] Sending process 5101 closing signal SIGTERM
E1121 10:12:12.345000 4242 torch/distributed/elastic/multiprocessing/api.py:1003] failed (exitcode: 1) local_rank: 2 (pid: 5103) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-11-21_10:12:12
  host      : node7
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 5101)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 5101
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-11-21_10:02:09
  host      : node7
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 5103)
  error_file: /tmp/{error_file}
  traceback : Traceback (most recent call last):
    File "/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 357, in wrapper
      return f(*args, **kwargs)
  ValueError: corrupt sample 1234

============================================================
"""


def prefixed(text: str, prefix: str) -> str:
    return "".join(f"{prefix} {line}\n" for line in text.splitlines())


def write_crash(root: Path) -> None:
    log = JOB_LOG.replace("{tb2}", prefixed(TRACEBACK, "[rank2]:"))
    (root / "job.log").write_text(log.replace("{error_file}", ERROR_FILE))
    err = root / ERROR_FILE
    err.parent.mkdir(parents=True)
    err.write_text(
        json.dumps(
            {
                "message": {
                    "message": "ValueError: corrupt sample 1234",
                    "extraInfo": {"py_callstack": TRACEBACK, "timestamp": "1763719329"},
                }
            }
        )
    )
