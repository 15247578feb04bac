"""Fault cases: what is injected (cause, culprit, onset step, severity) and what diag must say.

A case's ``severity`` is the fraction of the job's step time the fault costs: at 0.2 the culprit
adds ``base x 0.2 / 0.8`` per step (a data stall, extra compute, a slower kernel, a slower
transfer), so the job step goes from ``base`` to ``base / 0.8``. Checkpoint faults spread that cost
over the saves (each save stalls ``every x base x s / (1 - s)``). ``structural`` is an imbalance
present from the first step (``onset_step`` is None: there is no onset to find). ``clean`` cases
inject nothing and must produce no finding of severity warning or above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from diag.errors import DiagError


class Unsupported(DiagError):
    """This case cannot be run as a live job here (a link fault without network namespaces,
    a cause the runner cannot inject)."""


#: the causes the suite injects, in the order reports list them.
FAULT_CAUSES: tuple[str, ...] = ("node", "data", "checkpoint", "kernel", "link", "structural")
#: what a clean case expects.
CLEAN = "clean"
SEVERITIES: tuple[float, ...] = (0.1, 0.2, 0.5)


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One injected fault (or none) and the diagnosis it must produce."""

    cause: str  # one of FAULT_CAUSES, or CLEAN
    severity: float = 0.0  # fraction of the job step lost to the fault
    ranks: tuple[int, ...] = ()  # the culprit ranks (empty: every rank, or a clean run)
    onset_step: int | None = None  # None: from the start (structural) or no fault (clean)
    seed: int = 0
    world_size: int = 4
    steps: int = 80
    kernel: str | None = None  # kernel cases: the kernel made slow
    hosts: tuple[str, ...] = ()  # link cases: the hosts the slow link joins
    #: how the fault is injected (:mod:`diag.selftest.mechanisms`); "" = the cause's tuning one
    mechanism: str = ""

    def __post_init__(self) -> None:
        if self.cause not in (*FAULT_CAUSES, CLEAN):
            raise ValueError(f"unknown fault cause {self.cause!r}")
        if not 0.0 <= self.severity < 1.0:
            raise ValueError(f"severity {self.severity} is not in [0, 1)")
        if self.cause == CLEAN and self.severity:
            raise ValueError("a clean case has severity 0")

    @property
    def name(self) -> str:
        if self.cause == CLEAN:
            return f"clean/seed{self.seed}"
        how = f"{self.mechanism}/" if self.mechanism else f"{self.cause}/"
        return f"{how}{round(self.severity * 100)}%/seed{self.seed}"

    @property
    def expected_cause(self) -> str | None:
        return None if self.cause == CLEAN else self.cause

    def extra_ms(self, base_step_ms: float) -> float:
        """The culprit's extra time per step that makes the job lose ``severity`` of its step."""
        return base_step_ms * self.severity / (1.0 - self.severity)

    def with_seed(self, seed: int) -> Case:
        return replace(self, seed=seed)


def suite(
    severities: tuple[float, ...] = SEVERITIES,
    seeds: tuple[int, ...] = (0, 1),
    causes: tuple[str, ...] = FAULT_CAUSES,
    *,
    world_size: int = 4,
    steps: int = 80,
    onset_step: int = 30,
    clean_runs: int | None = None,
    mechanisms: Mapping[str, str] | None = None,
) -> list[Case]:
    """Every cause at every severity and seed, plus ``clean_runs`` clean cases (default: one per
    seed and severity, so clean runs weigh as much as one cause). Culprits rotate with the seed
    (never rank 0, the rank that saves checkpoints). ``mechanisms`` (name -> its cause, see
    :mod:`diag.selftest.mechanisms`) replaces ``causes``: every mechanism at every severity and
    seed."""
    cases: list[Case] = []
    plan = list(mechanisms.items()) if mechanisms is not None else [("", c) for c in causes]
    for seed in seeds:
        culprit = 1 + seed % (world_size - 1)
        for mechanism, cause in plan:
            for sev in severities:
                ranks: tuple[int, ...] = (culprit,)
                if cause == "checkpoint":
                    ranks = (0,)  # rank 0 saves
                elif cause == "link":
                    ranks = ()  # the culprit is a link: the runner names its hosts
                onset = None if cause == "structural" else onset_step
                cases.append(
                    Case(
                        cause=cause,
                        severity=sev,
                        ranks=ranks,
                        onset_step=onset,
                        seed=seed,
                        world_size=world_size,
                        steps=steps,
                        mechanism=mechanism,
                    )
                )
    n_clean = len(seeds) * len(severities) if clean_runs is None else clean_runs
    cases.extend(
        Case(cause=CLEAN, seed=seed, world_size=world_size, steps=steps) for seed in range(n_clean)
    )
    return cases
