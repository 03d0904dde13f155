"""Every applicable baseline's schedule: candidates for the solvers' warm start.

:func:`built_baselines` runs each baseline that applies to a problem and skips
those that refuse (not applicable, or over the memory cap); :func:`ordered_baselines`
the same in other microbatch orders (:mod:`ppsolve.baselines.microbatch_order`).
"""

from __future__ import annotations

from typing import Iterator

from ppsolve.method_types import RunOptions, run_and_check
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule


def built_baselines(problem: Problem, options: RunOptions, names: list[str] | None = None) -> Iterator[Schedule]:
    """The schedule of every baseline (of ``names``, if given) that applies and builds; those that
    refuse (not applicable, over the cap, ...) are skipped."""
    from ppsolve.baselines import METHODS

    for method in METHODS:
        if names is not None and method.name not in names:
            continue
        outcome = run_and_check(method, problem, options, checked=False)
        if outcome.schedule is not None:
            yield outcome.schedule


def ordered_baselines(problem: Problem, options: RunOptions, orders: tuple[str, ...],
                      names: list[str] | None = None) -> Iterator[Schedule]:
    """Like :func:`built_baselines`, each baseline (of ``names``) in each microbatch order of ``orders``
    (``NAME@ORDER``); schedules that break a cap are skipped."""
    from ppsolve.baselines import METHODS, get_baseline

    for method in METHODS:
        if (names is not None and method.name not in names) or method.why_not(problem) is not None:
            continue
        for order in orders:
            outcome = run_and_check(get_baseline(f"{method.name}@{order}"), problem, options, checked=False)
            if outcome.schedule is not None and not outcome.schedule.method.extra.get("capacity_broken"):
                yield outcome.schedule


def applicable_baselines(problem: Problem, options: RunOptions | None = None,
                         names: list[str] | None = None) -> list[Schedule]:
    """The schedule of every baseline that applies and fits the caps (refusals are skipped)."""
    options = RunOptions(ignore_capacity=False) if options is None else options
    return [schedule for schedule in built_baselines(problem, options, names)
            if not schedule.method.extra.get("capacity_broken")]
