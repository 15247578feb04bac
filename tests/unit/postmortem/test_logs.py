"""Worker logs and torchelastic error files, in the formats torch and torchrun print them: which
rank failed first and why, and what a hang says when only logs are left."""

# ruff: noqa: E501 (log lines are kept verbatim, as long as torch prints them)

from __future__ import annotations

from pathlib import Path

import pytest

from diag.postmortem.analyze import analyze
from diag.postmortem.causes import classify
from diag.postmortem.discover import collect
from diag.postmortem.logs import parse_log
from diag.postmortem.records import Clue
from tests.fakes.torchrun_logs import prefixed, write_crash


def test_error_file_and_log_name_the_crashed_rank_and_exception(tmp_path: Path) -> None:
    write_crash(tmp_path)
    report = analyze(collect(tmp_path))
    assert report.remains.num_error_files == 1 and report.remains.num_logs == 1
    assert report.remains.world_size == 4
    top = report.findings[0]
    assert top.ranks == (2,) and top.symptom == "crash" and top.cause == "program"
    assert "ValueError" in top.summary and "data.py:40" in top.summary
    assert top.hosts == ("node7",)
    # the others' timeouts, aborts and SIGTERM are echoes: nobody else is blamed
    assert all(set(f.ranks) <= {2} for f in report.findings)
    error = next(e for e in top.evidence if e.metric == "error")
    assert "corrupt sample 1234" in error.note and "/job/data.py:40 in __next__" in error.note
    assert report.stacks[2][-1].func == "__next__"


def test_error_file_alone_gets_its_rank_from_the_path(tmp_path: Path) -> None:
    write_crash(tmp_path)
    (tmp_path / "job.log").unlink()
    report = analyze(collect(tmp_path))
    (top,) = report.findings
    assert top.ranks == (2,) and "ValueError" in top.summary
    assert any(m.startswith("no Flight Recorder dumps") for m in report.missing)


def test_log_only_timeouts_name_the_rank_that_never_timed_out(tmp_path: Path) -> None:
    lines = ["[rank2]: step 41 loss 0.4302"]
    for r in (0, 1, 3):
        lines += [
            f"[rank{r}]: Traceback (most recent call last):",
            f'[rank{r}]:   File "/job/train.py", line 70, in main',
            f"[rank{r}]:     dist.all_reduce(t)",
            f'[rank{r}]:   File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 2806, in all_reduce',
            f"[rank{r}]:     work.wait()",
            f"[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
        ]
    (tmp_path / "worker.log").write_text("\n".join(lines) + "\n")
    report = analyze(collect(tmp_path))
    (top,) = report.findings
    assert top.ranks == (2,) and top.symptom == "hang" and top.cause == "unknown"
    assert "never timed out" in top.summary and "no Flight Recorder dumps" in top.summary
    assert any(
        e.metric == "missing_evidence" and "no Flight Recorder dumps" in e.note
        for e in top.evidence
    )
    assert report.missing[0].startswith(
        "no Flight Recorder dumps: cannot tell which collective hung"
    )


def test_watchdog_pg_status_lines_find_the_absent_rank(tmp_path: Path) -> None:
    lines = []
    for r in (0, 1, 3):
        tag = f"[rank{r}]:[E1121 10:12:11.51 ProcessGroupNCCL.cpp:2395] [PG ID 0 PG GUID 0(default_pg) Rank {r}]"
        lines += [
            f"{tag} Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600004 milliseconds before timing out.",
            f"{tag}  failure detected by watchdog at work sequence id: 77 PG status: last enqueued work: 77, last completed work: 76",
        ]
    lines.append(
        "[rank2]:[E1121 10:12:11.52 ProcessGroupNCCL.cpp:2395] [PG ID 0 PG GUID 0(default_pg) Rank 2]  failure detected by watchdog at work sequence id: 76 PG status: last enqueued work: 76, last completed work: 76"
    )
    (tmp_path / "job.log").write_text("\n".join(lines) + "\n")
    (top,) = analyze(collect(tmp_path)).findings
    assert top.ranks == (2,) and "never issued allreduce seq 77" in top.summary


def test_sigkill_in_torchrun_summary_is_a_crash_of_unknown_cause() -> None:
    text = """Root Cause (first observed failure):
[0]:
  time      : 2025-11-21_10:02:09
  host      : node3
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 777)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 777
============================================================
"""
    res = parse_log(text.splitlines(keepends=True), "job.log")
    (clue,) = res.clues
    assert (clue.kind, clue.rank, clue.local_rank, clue.exitcode, clue.root) == (
        "exit",
        5,
        1,
        -9,
        True,
    )
    verdict = classify(clue)
    assert verdict is not None and verdict.primary and verdict.label == "SIGKILL"
    assert verdict.cause == "unknown"


def _oom(others_gib: float) -> Clue:
    used = 79.0 - others_gib
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        f"capacity of 79.10 GiB of which 0.10 GiB is free. Including non-PyTorch memory, this "
        f"process has {used:.2f} GiB memory in use. Of the allocated memory 70.00 GiB is allocated "
        "by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated."
    )
    return Clue(kind="exception", source="x", rank=0, text=text, exc_type="torch.OutOfMemoryError")


def test_oom_is_the_program_unless_other_processes_held_the_gpu() -> None:
    mine = classify(_oom(others_gib=0.5))
    theirs = classify(_oom(others_gib=30.0))
    assert mine is not None and mine.cause == "program" and "own process" in mine.why
    assert theirs is not None and theirs.cause == "node" and "other processes" in theirs.why


def test_cuda_errors_split_device_from_program() -> None:
    log = """[rank3]:[E1121 10:00:00.1 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered
[rank1]: RuntimeError: CUDA error: device-side assert triggered
"""
    res = parse_log(log.splitlines(keepends=True), "job.log")
    by_rank = {c.rank: classify(c) for c in res.clues}
    assert by_rank[3] is not None and by_rank[3].cause == "node"
    assert by_rank[1] is not None and by_rank[1].cause == "program"


def test_prefixes_tee_nccl_and_rendezvous_mapping() -> None:
    log = """  local_ranks=[0, 1]
  global_ranks=[4, 5]
[default1]:node2:9911:9950 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.1.1.2<33662> with error 12, opcode 0, len 0, vendor err 129 (Recv)
Jan 21 10:00:00 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=9911, name=python3, GPU has fallen off the bus.
"""
    res = parse_log(log.splitlines(keepends=True), "node2.log")
    assert res.rendezvous.local_to_global == {0: 4, 1: 5}
    warn, xid = res.clues
    assert warn.local_rank == 1 and warn.text.startswith("NCCL WARN NET/IB")
    verdict = classify(warn)
    assert verdict is not None and verdict.cause == "link"
    assert xid.kind == "xid" and xid.host == "node2" and xid.op == "79"


GLOO_HANG = """[default1]:step 2 loss 108.000
{tb0}{tb2}W1129 12:48:40.239000 13104 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 13146 closing signal SIGTERM
E1129 12:48:40.415000 13104 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 13145) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/job/train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-29_12:48:40
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 13146)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 13146
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_12:48:39
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 13145)
  error_file: /tmp/tl/run/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/job/train.py", line 18, in main
      dist.all_reduce(t)
  RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 6000ms for recv operation to complete
============================================================
"""


def _gloo_tb(rank: int, op: str) -> str:
    tb = f"""Traceback (most recent call last):
  File "/job/train.py", line 18, in main
    dist.all_reduce(t)
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
    work.wait()
RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 6000ms for {op} operation to complete
"""
    return prefixed(tb, f"[default{rank}]:[rank{rank}]:")


def test_torchrun_root_cause_that_timed_out_is_an_echo(tmp_path: Path) -> None:
    # As a real 3-rank gloo job prints it when rank 1 stops before a collective: torchrun's
    # "root cause" is rank 0, whose all_reduce timed out; rank 1 never timed out.
    text = GLOO_HANG.replace("{tb0}", _gloo_tb(0, "recv")).replace("{tb2}", _gloo_tb(2, "send"))
    (tmp_path / "job.log").write_text(text)
    report = analyze(collect(tmp_path))
    (top,) = report.findings
    assert top.ranks == (1,) and top.symptom == "hang"
    assert "ranks 0, 2 timed out waiting (recv, send)" in top.summary
    assert top.hosts == ("localhost",)


def _timed_out_at(rank: int, line: int, func: str, code: str) -> list[str]:
    """A gloo timeout's traceback on ``rank``, raised from the job's ``code`` at ``line``."""
    return [
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "/job/train.py", line 120, in <module>',
        f"[rank{rank}]:     main()",
        f'[rank{rank}]:   File "/job/train.py", line {line}, in {func}',
        f"[rank{rank}]:     {code}",
        f'[rank{rank}]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 5356, in barrier',
        f"[rank{rank}]:     work.wait()",
        f"[rank{rank}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 12000ms for recv operation to complete",
    ]  # fmt: skip


def test_when_every_rank_timed_out_the_one_at_another_call_site_is_named(tmp_path: Path) -> None:
    # As a 3-rank gloo job on a busy host left it (rank 1 skipped a barrier): rank 1 timed out
    # too, in the next step's backward, before torchrun stopped it; nobody stayed silent.
    lines = ["[rank1]: FAULT rank 1 skip-collective step 5"]
    lines += _timed_out_at(0, 104, "main", "dist.barrier()")
    lines += _timed_out_at(1, 86, "train_step", "loss.backward()")
    lines += _timed_out_at(2, 104, "main", "dist.barrier()")
    (tmp_path / "worker.log").write_text("\n".join(lines) + "\n")
    report = analyze(collect(tmp_path))
    (top,) = report.findings
    assert (top.symptom, top.cause, top.ranks) == ("hang", "program", (1,)), top.summary
    assert "train.py:86 in train_step (loss.backward())" in top.summary
    assert "against train.py:104 in main (dist.barrier())" in top.summary
    sites = {e.subject: e.value for e in top.evidence if e.metric == "timeout_site"}
    assert sites == {"rank 0": 104, "rank 1": 86, "rank 2": 104}


@pytest.mark.parametrize(
    "where",
    [
        [(0, 104), (1, 86)],  # two ranks apart: either could be the odd one
        [(0, 104), (1, 104), (2, 86), (3, 86)],  # two against two
        [(0, 104), (1, 104), (2, 104)],  # all in the same call
    ],
)
def test_no_majority_call_site_names_no_culprit(
    tmp_path: Path, where: list[tuple[int, int]]
) -> None:
    lines: list[str] = []
    for rank, line in where:
        lines += _timed_out_at(rank, line, "main", "dist.barrier()")
    (tmp_path / "worker.log").write_text("\n".join(lines) + "\n")
    report = analyze(collect(tmp_path))
    (top,) = report.findings
    assert top.id == "hang-unknown" and top.ranks == (), top.summary
