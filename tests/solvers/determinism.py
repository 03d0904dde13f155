"""Options under which a ``--threads 1`` solve is decided by its deterministic limits alone.

The determinism promise holds while the deterministic limits end each step; the wall clock (the
time limit) is only a guard. These options give each step a small deterministic budget (a few
seconds of work on the bench machine) under a wall clock a hundred times longer, so no machine the
tests run on, however loaded, lets the clock decide a step: a determinism test never has to skip.
"""

from __future__ import annotations

from ppsolve.solvers import SolveOptions
from ppsolve.solvers.settings import BudgetSettings, PhaseSettings, Settings

WALL_GUARD = 600.0  # seconds: the time limit, never reached
SHED_TRIES = 100  # a fixed count too (the default, 2000, takes seconds)
DETERMINISTIC_SHARE = 0.001  # of it: e.g. 0.5 deterministic seconds for the makespan phase


def deterministic_options(solver: str, seed: int = 0, **overrides) -> SolveOptions:
    settings = Settings(budget=BudgetSettings(deterministic_share=DETERMINISTIC_SHARE),
                        phases=PhaseSettings(shed_tries=SHED_TRIES))
    return SolveOptions(solver=solver, time_limit=WALL_GUARD, threads=1, seed=seed, settings=settings, **overrides)


def decided_by_the_clock(result) -> bool:
    return any("not be reproducible" in note for note in result.notes)
