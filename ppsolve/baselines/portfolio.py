"""The best of every applicable baseline: a warm start for the solvers.

:func:`best_baseline` runs each registered baseline that applies to a problem,
skips those that refuse (not applicable, or over the memory cap), and returns
the schedule with the least makespan (ties: the lower highest peak memory).
"""

from __future__ import annotations

from typing import Iterator

from ppsolve.errors import PpsolveError
from ppsolve.methods import RunOptions, all_methods
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule


def built_baselines(problem: Problem, options: RunOptions, names: list[str] | None = None) -> Iterator[Schedule]:
    """The schedule of every baseline (of ``names``, if given) that applies and builds; those that
    refuse (not applicable, over the cap, ...) are skipped."""
    for method in all_methods("baseline"):
        if names is not None and method.name not in names:
            continue
        if method.why_not(problem) is not None:
            continue
        try:
            yield method.build(problem, options)
        except PpsolveError:
            continue


def applicable_baselines(problem: Problem, options: RunOptions | None = None,
                         names: list[str] | None = None) -> list[Schedule]:
    """The schedule of every baseline that applies and fits the caps (refusals are skipped)."""
    options = RunOptions(ignore_capacity=False) if options is None else options
    return [schedule for schedule in built_baselines(problem, options, names)
            if not schedule.method.extra.get("capacity_broken")]


def best_baseline(problem: Problem, options: RunOptions | None = None,
                  names: list[str] | None = None) -> Schedule | None:
    """The fastest schedule any applicable baseline builds within the caps, or None."""
    schedules = applicable_baselines(problem, options, names)
    return min(schedules, key=lambda s: (s.makespan, max(s.peak_memory)), default=None)
