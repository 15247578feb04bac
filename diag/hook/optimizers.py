"""Which optimizer ``step()`` ends the training step, learned from the order optimizers step in.

A training iteration steps one optimizer (the common case), several in a row (per-group or
per-expert optimizers), or several between backward passes (a GAN's discriminator, then its
generator). The job may also replace an optimizer by a new object (a resume, a schedule change)
or start stepping another one. The step the hook records is the iteration, so it ends after the
iteration's *last* optimizer step. Two roles are learned:

- the **opener**, the optimizer whose ``step()`` comes first in an iteration: the first optimizer
  that ever steps;
- the **closer**, whose ``step()`` ends the training step: the optimizer that steps right before
  the opener steps again, when that is another optimizer (``D, G, D``: G closes; ``A, B, C, A``:
  C closes). Until another optimizer is seen the opener also closes, so a one-optimizer job's
  step ends at its optimizer's ``step()`` from the first iteration on, as it always did.

Learning costs nothing in the step count: in a GAN, step 0 ends at the discriminator's first
``step()`` (the generator is not known yet) and step 1 runs to the end of iteration 1; from step 2
on the boundaries are exact. An optimizer stepped several times per iteration (a WGAN critic
stepped five times per generator step) closes steps until the other one is seen, then the cycle
is the generator's iteration.

**Re-created optimizers.** An optimizer seen for the first time takes over the role of an opener
or closer that no longer exists (the job dropped it; only weak references are kept), so a
replacement opens and closes steps at once, as its predecessor did.

**Stale roles.** If an optimizer steps again while neither the opener nor the closer stepped
since its previous ``step()`` (the job keeps its old optimizer alive but steps a new one), it
becomes the opener, and the one that stepped just before it the closer. Whenever learning finds
that the iteration that just finished was not closed (no step ended since the opener's previous
``step()``), the step ends there, before the ``step()`` that revealed it: every iteration ends
exactly one step, so step numbers stay the job's iteration count.

Runs on the training thread inside the optimizer step hooks: a few dict lookups per ``step()``;
a weak reference is made only for an optimizer seen for the first time.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

_MAX_TRACKED = 64  # beyond this many optimizers seen, the dead ones are forgotten


class _Strong:
    """A reference to an object that does not support weak references (kept alive)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


def _dead_ref() -> None:
    return None


def _ref(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return _Strong(obj)


class StepCycle:
    """The optimizer roles of one process (see the module docstring). ``before``/``after`` are
    called around every optimizer ``step()`` on the training thread."""

    def __init__(self) -> None:
        self._refs: dict[int, Callable[[], Any]] = {}  # id -> reference, every optimizer seen
        self._last: dict[int, int] = {}  # id -> sequence number of its latest step()
        self._seq = 0  # sequence number of the next step() call
        self._end_seq = -1  # the last training step ended after the step() with this number
        self.opener: int | None = None
        self.closer: int | None = None
        self._prev: int | None = None  # the optimizer that stepped last
        self._dead = 0  # keys given to dead optimizers whose id a new one reuses: -1, -2, ...

    def is_closer(self, opt: Any) -> bool:
        return id(opt) == self.closer

    def before(self, opt: Any) -> bool:
        """``opt.step()`` begins; True if the training step ended before it (see the module
        docstring: learning found the iteration that just finished unclosed)."""
        key = id(opt)
        ref = self._refs.get(key)
        if ref is None or ref() is not opt:  # not an optimizer seen before (or its id reused)
            self._learn(opt, key, ref)
        if self.opener is None:
            self.opener = self.closer = key
        start = -1  # the step() that began the iteration just learned (-1: nothing learned)
        prev = self._prev
        if key == self.opener:
            if prev is not None and prev != self.opener and prev != self.closer:
                self.closer = prev
                start = self._last.get(key, -1)
        else:
            mine = self._last.get(key)
            if (
                mine is not None
                and self._last.get(self.opener, -1) < mine
                and self._last.get(self.closer if self.closer is not None else key, -1) < mine
            ):
                self.opener = key
                self.closer = prev if prev is not None else key
                start = mine
        ended = start >= 0 and self._end_seq < start
        if ended:
            self._end_seq = self._seq - 1
        self._last[key] = self._seq
        self._prev = key
        self._seq += 1
        return ended

    def after(self, opt: Any) -> bool:
        """``opt.step()`` returned; True if that ends the training step."""
        key = id(opt)
        if key != self.closer:
            return False
        self._end_seq = self._last.get(key, self._seq - 1)
        return True

    def _learn(self, opt: Any, key: int, ref: Callable[[], Any] | None) -> None:
        """``opt`` (under ``key``, its id) was not seen before (``ref``: what ``key`` held, a dead
        optimizer's reference, or None): it may take the role of a dead opener or closer."""
        if ref is not None:  # a new object under a dead one's id: set the dead one apart first
            self._dead -= 1
            self._refs[self._dead] = _dead_ref
            self._replace(key, self._dead)
        if len(self._refs) >= _MAX_TRACKED:
            self._forget_dead()
        for role in (self.opener, self.closer):
            if role is not None and role != key and self._refs[role]() is None:
                self._replace(role, key)
                break
        self._refs[key] = _ref(opt)

    def _replace(self, old: int, new: int) -> None:
        if self.opener == old:
            self.opener = new
        if self.closer == old:
            self.closer = new
        if self._prev == old:
            self._prev = new
        if old in self._last:
            self._last[new] = self._last.pop(old)
        del self._refs[old]

    def _forget_dead(self) -> None:
        keep = {self.opener, self.closer, self._prev}
        for key in [k for k, r in self._refs.items() if r() is None and k not in keep]:
            del self._refs[key]
            self._last.pop(key, None)
