"""Which optimizer ``step()`` ends the training step (:class:`StepCycle`), on scripted orders of
optimizer steps: one optimizer, several per iteration, a GAN, re-created optimizers (dropped or
kept alive), a WGAN critic. The steps ended must be one per iteration, at the right call."""

from __future__ import annotations

from diag.hook.optimizers import StepCycle


class Opt:
    """Anything an optimizer step hook receives (weak-referenceable, compared by identity)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def run(cycle: StepCycle, order: list[Opt]) -> list[str]:
    """The step() calls in ``order``; returns where steps ended: "<name>" after that call,
    "^<name>" before it."""
    ends = []
    for opt in order:
        if cycle.before(opt):
            ends.append(f"^{opt.name}")
        if cycle.after(opt):
            ends.append(opt.name)
    return ends


def test_one_optimizer_ends_every_step_from_the_first() -> None:
    a = Opt("A")
    assert run(StepCycle(), [a] * 5) == ["A"] * 5


def test_several_optimizers_per_iteration_end_at_the_last() -> None:
    a, b, c = Opt("A"), Opt("B"), Opt("C")
    ends = run(StepCycle(), [a, b, c] * 4)
    # learning: step 0 ends at A's first step(), step 1 at the end of iteration 1
    assert ends == ["A", "C", "C", "C"]


def test_gan_discriminator_then_generator() -> None:
    d, g = Opt("D"), Opt("G")
    cycle = StepCycle()
    assert run(cycle, [d, g] * 5) == ["D", "G", "G", "G", "G"]
    assert cycle.is_closer(g) and not cycle.is_closer(d)


def test_recreated_optimizer_takes_over_at_once() -> None:
    cycle = StepCycle()
    a = Opt("A")
    assert run(cycle, [a] * 3) == ["A"] * 3
    del a  # the job dropped it (resume logic, a schedule change)
    a2 = Opt("A2")
    assert run(cycle, [a2] * 4) == ["A2"] * 4


def test_recreated_gan_pair_takes_over_both_roles() -> None:
    cycle = StepCycle()
    d, g = Opt("D"), Opt("G")
    run(cycle, [d, g] * 3)
    del d, g
    d2, g2 = Opt("D2"), Opt("G2")
    assert run(cycle, [d2, g2] * 3) == ["G2"] * 3


def test_new_optimizer_while_the_old_one_lives_still_ends_every_iteration() -> None:
    cycle = StepCycle()
    a = Opt("A")
    kept = [a]  # the job keeps a reference: not dropped
    run(cycle, [a] * 3)
    b = Opt("B")
    ends = run(cycle, [b] * 4)
    # B's first iteration ends just before its second step() (which shows A no longer steps),
    # then each of B's steps ends one: 4 iterations, 4 step ends
    assert ends == ["^B", "B", "B", "B"]
    assert kept


def test_second_optimizer_added_mid_run_joins_the_cycle() -> None:
    cycle = StepCycle()
    a, b = Opt("A"), Opt("B")
    run(cycle, [a] * 3)
    assert run(cycle, [a, b] * 4) == ["A", "B", "B", "B"]


def test_wgan_critic_steps_five_times_per_generator_step() -> None:
    d, g = Opt("D"), Opt("G")
    cycle = StepCycle()
    first = run(cycle, [d] * 5 + [g])  # the generator is not known yet: each critic step ends one
    later = run(cycle, ([d] * 5 + [g]) * 3)
    assert first == ["D"] * 5
    assert later == ["G"] * 3


def test_many_short_lived_optimizers_stay_bounded() -> None:
    cycle = StepCycle()
    for i in range(500):
        opt = Opt(f"O{i}")
        run(cycle, [opt])
    assert len(cycle._refs) <= 64
