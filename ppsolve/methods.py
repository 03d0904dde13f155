"""One registry of every scheduling method (baselines and solvers), and the one way to run one.

The CLI, the studies and the tests all read it. Each family lists its methods in
its package's ``METHODS`` (see :mod:`ppsolve.method_types`); the registry gathers
them on first use. :func:`run_and_check` (defined with the method contract, so the
baselines' portfolio can call it too) runs a method, catches its refusals and
checks its schedule: every loop that runs methods calls it.
"""

from __future__ import annotations

from ppsolve.errors import NotApplicableError
from ppsolve.method_types import ERROR, INFEASIBLE, SKIPPED, Method, Outcome, RunOptions, run_and_check
from ppsolve.problem import Problem
from ppsolve.schedule import Schedule

__all__ = ["ERROR", "INFEASIBLE", "SKIPPED", "Method", "Outcome", "RunOptions", "all_methods", "get_method",
           "published_methods", "run_and_check", "run_method"]

_REGISTRY: dict[str, Method] = {}
_LOADED: list[bool] = []


def _load() -> dict[str, Method]:
    """The registry, gathered from the families' ``METHODS`` on first use (baselines first)."""
    if not _LOADED:
        from ppsolve import baselines, solvers

        methods = (*baselines.METHODS, *solvers.METHODS)
        names = [m.name.lower() for m in methods]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"methods registered twice: {', '.join(twice)}")
        for name, method in zip(names, methods):
            _REGISTRY.setdefault(name, method)
        _LOADED.append(True)
    return _REGISTRY


def all_methods(family: str | None = None) -> list[Method]:
    """Every registered method (of one family if given), in registration order."""
    return [m for m in _load().values() if family is None or m.family == family]


def published_methods() -> list[Method]:
    """The published schedules (baselines from the literature), in registration order."""
    return [m for m in _load().values() if m.published]


def get_method(name: str) -> Method:
    """Look a method up by name, case-insensitively, or a baseline in a microbatch order
    (``1f1b@longest-first``: :func:`ppsolve.baselines.get_baseline`); a miss lists the valid names."""
    registry = _load()
    try:
        return registry[name.lower()]
    except KeyError:
        pass
    from ppsolve import baselines
    from ppsolve.baselines.microbatch_order import ORDERS, split_name

    parts = split_name(name)
    base = registry.get(parts[0].lower()) if parts is not None else None
    if base is not None and base.family == "baseline":
        return baselines.get_baseline(name)
    names = ", ".join(m.name for m in registry.values()) or "(none registered)"
    raise NotApplicableError(f"unknown method {name!r}; known methods: {names} "
                             f"(a baseline also as NAME@ORDER, orders: {', '.join(ORDERS)})")


def run_method(name: str, problem: Problem, options: RunOptions | None = None) -> Schedule:
    return get_method(name).run(problem, options)
