"""Live triage: the analyzer runs the detectors while events arrive and writes findings.jsonl."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from diag.analyzer.service import serve
from diag.config import AnalyzerConfig
from tests.fakes.ingest import ingest
from tests.fakes.scenarios import Scenario


def test_a_finding_appears_within_seconds_of_the_events(tmp_path: Path) -> None:
    cfg = AnalyzerConfig(run_dir=str(tmp_path / "run"), flush_interval_s=0.1, triage_interval_s=0.2)
    server, port, core = serve(cfg)
    try:
        ingest(port, Scenario(slow_ranks=(2,), onset_step=50, severity=0.3).events())
        path = tmp_path / "run" / "findings.jsonl"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not path.exists():
            time.sleep(0.05)
        findings = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(f["cause"], f["ranks"]) for f in findings] == [("node", [2])]
        # The live view gets them through the summary.
        assert [f["id"] for f in core.summary_json()["findings"]] == [findings[0]["id"]]
    finally:
        server.stop(None).wait()
        core.close()


def test_an_exception_is_triaged_at_once_not_at_the_next_interval(tmp_path: Path) -> None:
    from tests.fakes.hang_runs import STALL, Run

    cfg = AnalyzerConfig(run_dir=str(tmp_path / "run"), flush_interval_s=0.1, triage_interval_s=600)
    server, port, core = serve(cfg)
    try:
        run = Run()
        run.exception(1, "RuntimeError", "injected failure at step 6", at=STALL)
        ingest(port, run.events, batch=len(run.events))
        path = tmp_path / "run" / "findings.jsonl"
        deadline = time.monotonic() + 10  # the interval is 10 minutes: only the urgency helps
        while time.monotonic() < deadline and not path.exists():
            time.sleep(0.05)
        findings = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(f["symptom"], f["ranks"]) for f in findings] == [("crash", [1])]
    finally:
        server.stop(None).wait()
        core.close()


def test_a_live_pass_in_flight_gives_up_when_the_analyzer_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI under load: a live pass at nice 19 outlasted the close's 30 s join, and a thread left
    # inside pandas at interpreter exit can abort the process. It now stops at its next detector.
    import threading

    from diag.analyzer.service import join_background
    from diag.diagnose.detectors import registry

    entered, release, later = threading.Event(), threading.Event(), threading.Event()

    def slow(features: object, cfg: object) -> list:
        entered.set()
        release.wait(10)
        return []

    def never(features: object, cfg: object) -> list:
        later.set()  # a pass that went on after the close would get here
        return []

    for name, fn in (("zz_slow", slow), ("zz_never", never)):
        monkeypatch.setitem(registry.DETECTORS, name, fn)
        monkeypatch.setitem(registry.DEFAULT_CONFIGS, name, None)
    cfg = AnalyzerConfig(run_dir=str(tmp_path / "run"), flush_interval_s=0.1, triage_interval_s=0.1)
    server, port, core = serve(cfg)
    try:
        ingest(port, Scenario(slow_ranks=(2,), onset_step=50, severity=0.3).events()[:500])
        assert entered.wait(20)
    finally:
        server.stop(None).wait()
        core.close()
        release.set()
    assert join_background(core, timeout_s=20)
    assert not later.is_set()


def test_the_close_gives_the_niced_live_triage_its_priority_back() -> None:
    # A live pass at nice 19 preempted while holding the GIL stalls every other thread of the
    # process on a saturated host (diag attach took minutes to detach beside a CPU hog).
    import os
    import threading

    from diag.analyzer import service

    lowered, done = threading.Event(), threading.Event()

    def niced() -> None:
        service._lower_priority(service.TRIAGE_NICE)
        lowered.set()
        done.wait(10)

    thread = threading.Thread(target=niced, name=service.TRIAGE_THREAD, daemon=True)
    thread.start()
    try:
        assert lowered.wait(10)
        tid = thread.native_id
        assert tid is not None
        mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        if mine >= service.TRIAGE_NICE:
            pytest.skip("this process already runs at nice 19")
        assert os.getpriority(os.PRIO_PROCESS, tid) == service.TRIAGE_NICE
        service._restore_priority(thread)
        if os.geteuid() == 0:  # else CAP_SYS_NICE or RLIMIT_NICE decide; it never raises
            assert os.getpriority(os.PRIO_PROCESS, tid) == mine
    finally:
        done.set()
        thread.join(10)


def test_a_live_pass_never_overwrites_the_final_findings(tmp_path: Path) -> None:
    from diag.analyzer.core import AnalyzerCore
    from diag.findings import Finding
    from diag.store.run_store import RunStore

    core = AnalyzerCore(RunStore.create(tmp_path / "run"))
    final = Finding(id="final", symptom="slowdown", cause="node", severity="warning", ranks=(1,),
                    onset_step=3, detected_step=5, confidence=0.9, summary="final")  # fmt: skip
    stale = Finding(id="stale", symptom="slowdown", cause="data", severity="warning", ranks=(2,),
                    onset_step=3, detected_step=5, confidence=0.9, summary="stale")  # fmt: skip
    assert core.publish_findings((stale,), live=True)
    core.close()
    assert core.publish_findings((final,), live=False)
    assert not core.publish_findings((stale,), live=True)
    lines = (tmp_path / "run" / "findings.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["final"]


def test_a_starved_live_triage_gets_more_priority_within_a_cpu_budget() -> None:
    """nice 19 while a pass gets its CPU; after a starved pass (minutes of wall time for a second
    of CPU on a host the job saturates) nice 10, then 5, never the job's own; while raised the
    pause before the next pass keeps the passes to a fifth of one core; a pass that got its CPU
    steps back down."""
    from diag.analyzer.service import PassPriority

    p = PassPriority()
    assert p.nice == 19 and p.after(cpu_s=0.3, wall_s=0.4, interval_s=1.0) == 1.0
    assert p.nice == 19
    assert p.after(cpu_s=1.0, wall_s=90.0, interval_s=1.0) == 4.0  # 1 s of CPU: 4 s pause
    assert p.nice == 10
    p.after(cpu_s=1.0, wall_s=20.0, interval_s=1.0)
    assert p.nice == 5
    p.after(cpu_s=1.0, wall_s=20.0, interval_s=1.0)
    assert p.nice == 5  # the highest it goes
    assert p.after(cpu_s=0.1, wall_s=0.1, interval_s=5.0) == 5.0  # the interval when longer
    assert p.nice == 10  # a pass that got its CPU: a level back down
    p.after(cpu_s=2.5, wall_s=3.0, interval_s=1.0)
    assert p.nice == 19
    p.after(cpu_s=1.0, wall_s=3.0, interval_s=1.0)  # a third of a core: neither way
    assert p.nice == 19


def test_each_live_pass_runs_in_its_own_niced_thread(tmp_path: Path) -> None:
    """The pass thread lowers only itself (an unprivileged thread cannot raise its priority
    again, so each pass starts from the analyzer's own and lowers to its level)."""
    import os
    import threading

    from diag.analyzer import service
    from diag.analyzer.core import AnalyzerCore
    from diag.store.run_store import RunStore

    seen: list[tuple[str, int]] = []
    core = AnalyzerCore(RunStore.create(tmp_path / "run"))

    def triage(cancelled: object = None) -> object:
        me = threading.current_thread()
        seen.append((me.name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        raise RuntimeError("stop here")

    core.triage = triage  # type: ignore[method-assign]
    out = service._run_pass(core, threading.Event(), 10)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert isinstance(out.result, RuntimeError) and out.wall_s >= 0 and out.cpu_s >= 0
    assert seen == [(service.TRIAGE_PASS_THREAD, max(mine, 10))]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine
    core.close()


def test_a_pass_starved_while_it_runs_is_raised_where_allowed(tmp_path: Path) -> None:
    """A pass getting under a quarter of a core is raised a level per check (10, then 5) while
    it runs, where the process may raise a thread's priority (root here); a sleeping pass reads
    as starved, which is harmless: only CPU time is scheduled by it."""
    import os
    import threading

    from diag.analyzer import service
    from diag.analyzer.core import AnalyzerCore
    from diag.store.run_store import RunStore

    core = AnalyzerCore(RunStore.create(tmp_path / "run"))
    seen: list[int] = []

    def triage(cancelled: object = None) -> object:
        tid = threading.get_native_id()
        seen.append(os.getpriority(os.PRIO_PROCESS, tid))
        time.sleep(1.0)
        seen.append(os.getpriority(os.PRIO_PROCESS, tid))
        return "done"

    core.triage = triage  # type: ignore[method-assign]
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    if mine >= 10 or os.geteuid() != 0:
        core.close()
        pytest.skip("raising a thread's priority needs root here (or CAP_SYS_NICE)")
    out = service._run_pass(core, threading.Event(), 19, check_s=0.2)
    assert out.result == "done" and out.cpu_s < out.wall_s
    assert seen == [19, 5]  # raised twice within the second (19 -> 10 -> 5)
    core.close()


def test_the_loop_thread_keeps_its_priority_and_each_pass_lowers_only_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread starts at its creator's nice value: were the loop thread niced, no pass it starts
    could run above nice 19 without privileges."""
    import os
    import threading

    from diag.analyzer import service
    from diag.analyzer.core import AnalyzerCore

    seen: list[tuple[str, int, int]] = []
    real = AnalyzerCore.triage

    def triage(self: AnalyzerCore, cancelled: object = None) -> object:
        loop = next(t for t in threading.enumerate() if t.name == service.TRIAGE_THREAD)
        me = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        seen.append(
            (threading.current_thread().name, me, os.getpriority(os.PRIO_PROCESS, loop.native_id))
        )
        return real(self, cancelled=cancelled)  # type: ignore[arg-type]

    monkeypatch.setattr(AnalyzerCore, "triage", triage)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    cfg = AnalyzerConfig(run_dir=str(tmp_path / "run"), flush_interval_s=0.1, triage_interval_s=0.1)
    server, _, core = serve(cfg)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not seen:
            time.sleep(0.05)
    finally:
        server.stop(None).wait()
        core.close()
        service.join_background(core)
    name, nice, loop_nice = seen[0]
    assert name == service.TRIAGE_PASS_THREAD and nice == max(mine, service.TRIAGE_NICE)
    assert loop_nice == mine
