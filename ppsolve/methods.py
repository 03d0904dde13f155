"""One registry of every scheduling method (baselines and solvers).

The CLI, the benchmark and the tests all read it. Families register their
methods when their package is imported; :func:`all_methods` imports them.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Callable

from ppsolve.errors import NotApplicableError
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

# Packages that register methods on import, in the order methods are listed.
PROVIDERS = ("ppsolve.baselines", "ppsolve.solvers")


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
    PpsolveError (NotApplicableError, InfeasibleError, ...).
    """

    name: str
    family: str
    description: str
    requirements: str
    why_not: Callable[[Problem], str | None]
    build: Callable[[Problem, RunOptions], Schedule]

    def run(self, problem: Problem, options: RunOptions | None = None) -> Schedule:
        reason = self.why_not(problem)
        if reason is not None:
            raise NotApplicableError(f"{self.name} does not apply: {reason}")
        return self.build(problem, options or RunOptions())


_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    key = method.name.lower()
    if key in _REGISTRY and _REGISTRY[key] is not method:
        raise ValueError(f"method {method.name!r} is registered twice")
    _REGISTRY[key] = method
    return method


def _load_providers() -> None:
    for module in PROVIDERS:
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)


def all_methods(family: str | None = None) -> list[Method]:
    """Every registered method (of one family if given), in registration order."""
    _load_providers()
    return [m for m in _REGISTRY.values() if family is None or m.family == family]


def get_method(name: str) -> Method:
    """Look a method up by name, case-insensitively; a miss lists the valid names."""
    _load_providers()
    try:
        return _REGISTRY[name.lower()]
    except KeyError:
        names = ", ".join(m.name for m in _REGISTRY.values()) or "(none registered)"
        raise NotApplicableError(f"unknown method {name!r}; known methods: {names}") from None


def run_method(name: str, problem: Problem, options: RunOptions | None = None) -> Schedule:
    return get_method(name).run(problem, options)
