"""What a scheduling method is (the options it accepts, the record it registers) and how one is run.

Baselines and solvers declare their :class:`Method` entries (their package's
``METHODS``); :mod:`ppsolve.methods` gathers them into the one registry. This
module sits below both (beside the checker it calls), so neither imports the
registry; :func:`run_and_check` is the one way every loop runs a method.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ppsolve.checker import CheckReport, check
from ppsolve.errors import InfeasibleError, NotApplicableError, PpsolveError
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule


@dataclass(frozen=True)
class RunOptions:
    """Options every method accepts; each uses those that concern it."""

    time_limit: float | None = None
    threads: int | None = None
    seed: int = 0
    ignore_capacity: bool = False
    quiet: bool = True
    warm_start: str = "auto"
    also_start_from: tuple = ()  # solvers: schedules (of this pipeline) tried beside the warm start


@dataclass(frozen=True)
class Method:
    """A named way of producing a schedule.

    ``why_not(problem)`` returns None when the method applies, else the reason in
    one line; ``build(problem, options)`` returns the schedule or raises a
    PpsolveError (NotApplicableError, InfeasibleError, ...). ``published``: a
    schedule from the literature (what a solve is compared with), not one of ours.
    """

    name: str
    family: str
    description: str
    requirements: str
    why_not: Callable[[Problem], str | None]
    build: Callable[[Problem, RunOptions], Schedule]
    published: bool = False

    def run(self, problem: Problem, options: RunOptions | None = None) -> Schedule:
        reason = self.why_not(problem)
        if reason is not None:
            raise NotApplicableError(f"{self.name} does not apply: {reason}")
        return self.build(problem, options or RunOptions())


# the status of a run that gave no schedule; else the run has its schedule's status
SKIPPED, INFEASIBLE, ERROR = "skipped", "infeasible", "error"


@dataclass
class Outcome:
    """What running one method on one problem gave."""

    method: Method
    status: str  # SKIPPED (does not apply), INFEASIBLE, ERROR, or the schedule's own status
    schedule: Schedule | None = None
    report: CheckReport | None = None  # the checker's verdict (None: not checked, or no schedule)
    seconds: float | None = None  # how long the method ran (None: it did not run)
    note: str = ""  # why there is no schedule, or the checker's first violation

    @property
    def valid(self) -> bool | None:
        return None if self.report is None else self.report.ok


def run_and_check(method: Method, problem: Problem, options: RunOptions | None = None, *,
                  checked: bool = True, record_bugs: bool = False) -> Outcome:
    """Run ``method`` on ``problem`` and check its schedule; a refusal is an outcome, never raised.

    ``checked=False`` skips the checker (callers that only compare makespans).
    ``record_bugs``: an exception that is no PpsolveError (a bug) is recorded as ERROR
    instead of raised, so one failing method does not stop a sweep.
    """
    outcome = Outcome(method, SKIPPED)
    reason = method.why_not(problem)
    if reason is not None:
        outcome.note = reason
        return outcome
    began = time.perf_counter()
    try:
        schedule = method.build(problem, options or RunOptions())
    except NotApplicableError as exc:
        outcome.note = str(exc)
        return outcome
    except InfeasibleError as exc:
        outcome.status, outcome.note = INFEASIBLE, str(exc)
    except PpsolveError as exc:
        outcome.status, outcome.note = ERROR, str(exc)
    except Exception as exc:
        if not record_bugs:
            raise
        outcome.status, outcome.note = ERROR, f"{type(exc).__name__}: {exc}"
    else:
        outcome.status, outcome.schedule = schedule.method.status, schedule
    outcome.seconds = time.perf_counter() - began
    if outcome.schedule is not None and checked:
        outcome.report = report = check(outcome.schedule)
        if not report.ok:
            first = report.violations[0] if report.violations else None
            outcome.note = f"checker: {len(report.violations)} violation(s)" + (
                f", first: {first.message}" if first else "")
    return outcome
