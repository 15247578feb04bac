# ruff: noqa: E501 (log lines are kept verbatim, as long as torch prints them)
"""A rank that dies of a native abort or fatal signal: glibc's message, faulthandler's report,
torchrun's SIGABRT. Such a run once triaged as "no problem found" (rank 1 aborted with
``malloc(): unsorted double linked list corrupted``; its peer's echo and torchrun's SIGABRT were
all it left)."""

from __future__ import annotations

from pathlib import Path

from diag.postmortem.analyze import analyze
from diag.postmortem.causes import classify
from diag.postmortem.discover import collect
from diag.postmortem.logs import parse_log

#: What a 2-rank torchrun job printed when rank 1 aborted on a failed heap check (the job's
#: output without --tee: the glibc line carries no rank prefix).
HEAP_JOB_LOG = """rank 1 step 19 loss 1.02
rank 0 step 19 loss 0.78
malloc(): unsorted double linked list corrupted
[rank0]: Traceback (most recent call last):
[rank0]:   File "/job/train.py", line 549, in main
[rank0]:     loss.backward()
[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:12718
E1205 08:45:34.860000 21206 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) local_rank: 1 (pid: 21215) of binary: /venv/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/job/train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-05_08:45:34
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 21214)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 21214
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_08:45:34
  host      : localhost
  rank      : {root} (local_rank: {root})
  exitcode  : -6 (pid: 21215)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 21215
============================================================
"""

#: faulthandler's report (Python 3.11) of the same abort, from the hook's file for rank 1.
FATAL_REPORT = """Fatal Python error: Aborted

Thread 0x00007f25b63296c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/venv/diag/hook/thread.py", line 232 in _wait
  File "/venv/diag/hook/thread.py", line 209 in _serve
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f25d5e62b80 (most recent call first):
  File "/venv/torch/autograd/graph.py", line 979 in _engine_run_backward
  File "/job/train.py", line 549 in main
  File "/job/train.py", line 618 in <module>

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def test_faulthandler_report_is_a_fatal_clue_with_the_crashing_threads_stack() -> None:
    (clue,) = parse_log(FATAL_REPORT.splitlines(keepends=True), "rank1.pid7.log", rank=1).clues
    assert (clue.kind, clue.rank, clue.text) == ("fatal", 1, "Fatal Python error: Aborted")
    # traceback order: the innermost frame last
    assert [f.func for f in clue.stack] == ["<module>", "main", "_engine_run_backward"]
    assert "thread 0x00007f25b63296c0: /usr/lib/python3.11/threading.py:331 in wait" in clue.detail
    verdict = classify(clue)
    assert verdict is not None and not verdict.primary  # an abort's reason is another line


def test_a_thread_caught_in_a_helper_is_named_by_the_code_it_runs() -> None:
    """A thread whose innermost frame is its own helper (the hook thread pausing between two
    slices of work) is still told by the code it runs, its outermost frame of its own."""
    pausing = FATAL_REPORT.replace(
        '  File "/usr/lib/python3.11/threading.py", line 331 in wait\n'
        '  File "/venv/diag/hook/thread.py", line 232 in _wait\n',
        '  File "/venv/diag/hook/gil_share.py", line 74 in tick\n'
        '  File "/venv/diag/hook/fr_state.py", line 190 in process\n',
    )
    assert "gil_share.py" in pausing
    (clue,) = parse_log(pausing.splitlines(keepends=True), "rank1.pid7.log", rank=1).clues
    assert (
        "thread 0x00007f25b63296c0: /venv/diag/hook/gil_share.py:74 in tick, "
        "running /venv/diag/hook/thread.py:209 in _serve"
    ) in clue.detail


def test_a_segfault_report_is_the_programs_failure_and_a_report_cut_short_still_counts() -> None:
    cut = FATAL_REPORT.replace("Aborted", "Segmentation fault").split("\n\nExtension")[0]
    (clue,) = parse_log(cut.splitlines(keepends=True), "x.log", rank=2).clues
    assert clue.stack[-1].func == "_engine_run_backward"
    verdict = classify(clue)
    assert verdict is not None and verdict.primary and verdict.cause == "program"


def test_heap_corruption_names_the_rank_that_aborted(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(HEAP_JOB_LOG.replace("{root}", "1"))
    report = analyze(collect(tmp_path))
    (top,) = report.findings
    assert (top.symptom, top.cause, top.ranks) == ("crash", "program", (1,)), top.summary
    assert "heap corruption" in top.summary
    assert any("malloc(): unsorted double linked list" in e.note for e in top.evidence)


def test_the_fatal_report_gives_the_crash_its_stacks(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "job.log").write_text(HEAP_JOB_LOG.replace("{root}", "1"))
    (tmp_path / "crash").mkdir()
    (tmp_path / "crash" / "rank1.pid21215.log").write_text(FATAL_REPORT)
    (top,) = analyze(collect(tmp_path)).findings
    assert top.ranks == (1,) and "at /job/train.py" not in top.summary  # innermost: torch's
    assert top.summary.endswith("graph.py:979 in _engine_run_backward"), top.summary
    (stack,) = [e for e in top.evidence if e.metric == "stack"]
    assert (
        "threading.py:331 in wait, from /venv/diag/hook/thread.py:232 in _wait, "
        "running /venv/diag/hook/thread.py:209 in _serve"
    ) in stack.note
    assert "threading.py:331 in wait" in stack.note and "/job/train.py:549 in main" in stack.note


def test_a_bare_sigabrt_that_torchrun_saw_first_is_a_crash_of_unknown_cause(tmp_path: Path) -> None:
    text = HEAP_JOB_LOG.replace("{root}", "1").replace(
        "malloc(): unsorted double linked list corrupted\n", ""
    )
    (tmp_path / "job.log").write_text(text)
    (top,) = analyze(collect(tmp_path)).findings
    assert (top.symptom, top.cause, top.ranks) == ("crash", "unknown", (1,)), top.summary
    assert "SIGABRT" in top.summary


def test_a_sigabrt_after_a_collective_timed_out_stays_an_echo(tmp_path: Path) -> None:
    text = HEAP_JOB_LOG.replace("{root}", "1").replace(
        "malloc(): unsorted double linked list corrupted\n",
        "[rank0]: RuntimeError: Timed out waiting 6000ms for recv operation to complete\n",
    )
    (tmp_path / "job.log").write_text(text)
    report = analyze(collect(tmp_path))
    assert not any(f.symptom == "crash" and f.ranks == (1,) for f in report.findings), [
        f.summary for f in report.findings
    ]


def test_an_unprefixed_abort_line_is_not_given_to_one_of_two_aborted_ranks(tmp_path: Path) -> None:
    sigterm, sigabrt = "-15 (pid: 21214)  (SIGTERM)", "-6 (pid: 21214)  (SIGABRT)"
    two = HEAP_JOB_LOG.replace("{root}", "1").replace(sigterm, sigabrt)
    (tmp_path / "job.log").write_text(two)
    remains = collect(tmp_path)
    (abort,) = [c for c in remains.clues if c.kind == "abort"]
    assert abort.rank is None


#: faulthandler's report when the signal came on a native thread (session 9's second heap
#: corruption, abbreviated): no "Current thread" block, only the Python threads.
NATIVE_REPORT = """Fatal Python error: Aborted

Thread 0x00007f7318b296c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/venv/diag/hook/thread.py", line 232 in _wait

Thread 0x00007f7338696b80 (most recent call first):
  File "/venv/torch/nn/modules/linear.py", line 134 in forward
  File "/job/train_ddp.py", line 548 in main

Extension modules: torch._C (total: 1)
"""


def test_an_abort_on_a_native_thread_says_so_and_where_the_python_threads_were(
    tmp_path: Path,
) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "job.log").write_text(HEAP_JOB_LOG.replace("{root}", "1"))
    (tmp_path / "crash").mkdir()
    (tmp_path / "crash" / "rank1.pid22222.log").write_text(NATIVE_REPORT)
    (top,) = analyze(collect(tmp_path)).findings
    assert (top.cause, top.ranks) == ("program", (1,)) and "heap corruption" in top.summary
    (stack,) = [e for e in top.evidence if e.metric == "stack"]
    assert stack.note.startswith("the signal came on a thread with no Python frames"), stack.note
    assert (
        "thread 0x00007f7338696b80: /venv/torch/nn/modules/linear.py:134 in forward" in stack.note
    )
    assert "diag/hook/thread.py:232 in _wait" in stack.note
