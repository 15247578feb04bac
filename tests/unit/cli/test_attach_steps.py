"""``diag attach --steps N``: the fewest steps any attached rank has recorded decides."""

from __future__ import annotations

from diag.cli.attach_cmd import fewest_steps


def _summary(*steps: int) -> dict:
    return {"run": {}, "ranks": [{"rank": r, "steps": n} for r, n in enumerate(steps)]}


def test_the_slowest_rank_decides_and_a_silent_rank_counts_as_zero() -> None:
    assert fewest_steps(_summary(80, 75, 90, 61), 4) == 61
    assert fewest_steps(_summary(80, 75, 90), 4) == 0  # rank 3 has reported nothing yet
    assert fewest_steps(None, 2) == 0 and fewest_steps({"ranks": None}, 1) == 0
    assert fewest_steps({"ranks": [{"steps": None}, "junk"]}, 1) == 0


def test_sigterm_and_an_inherited_ignored_sigint_both_interrupt_once() -> None:
    import os
    import signal

    import pytest

    from diag.cli.attach_cmd import _detach_on_signals

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a non-interactive background job
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with pytest.raises(KeyboardInterrupt), _detach_on_signals():
                os.kill(os.getpid(), sig)
                for _ in range(1000):  # the handler runs between bytecodes
                    pass
        with _detach_on_signals():  # later signals are ignored while the hooks detach
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):
                    pass
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # restored
    finally:
        signal.signal(signal.SIGINT, before)
