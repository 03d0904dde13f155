"""Which microbatch runs first: any schedule in another microbatch order (per-microbatch costs).

A published schedule numbers the microbatches 0..m-1 and runs them in that (data) order.
When microbatches differ (contract version 4) their order is a decision. A *permutation*
``p`` says that position k of the schedule runs microbatch ``p[k]``: :func:`in_order` builds
a method on the problem with its microbatches renumbered that way
(:meth:`~ppsolve.problem.Problem.with_microbatches`) and renames them back, so every order
generator stays as it is and the simulator times each op on its own microbatch's costs.

The orders, by name (method ``NAME@ORDER``, e.g. ``1f1b@longest-first``; :func:`ordered_method`):

* ``longest-first``, ``shortest-first``: by the microbatch's critical cost, the sum over
  stages of its F, B and W (:func:`critical_costs`); ties in data order.
* ``search`` (DynaPipe-like): data order, both sorts, the microbatches clustered by cost
  and interleaved (long, short, long, ...), reversed, data order sorted within windows of
  d and 2d microbatches (which keeps near data order's memory), then random draws seeded by
  ``RunOptions.seed``: a swap of two microbatches of the best order so far (a ``SWAPS`` share
  of the draws) or any order (a random restart); at most ``SEARCH_BUDGET`` builds (fewer on
  large problems: :func:`search_budget`) or the time limit. The shortest makespan within
  the caps wins, data order on ties: it is never slower than data order when that fits.

On a problem whose microbatches all cost the same every order gives the same schedule: the
search then builds data order only, and the sorts are data order.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ppsolve.errors import InfeasibleError, NotApplicableError
from ppsolve.method_types import Method, RunOptions
from ppsolve.problem import Problem
from ppsolve.schedule import MethodInfo, Schedule

SEPARATOR = "@"
# builds the search makes at most (each one runs the method once), fewer on large problems: at most
# SEARCH_OPS compute ops built in all, at least SEARCH_LEAST builds
SEARCH_BUDGET = 96
SEARCH_OPS = 200_000
SEARCH_LEAST = 8
# clusters of microbatches by cost that the search interleaves
CLUSTERS = (2, 3, 4)
# the share of the random draws that swap two microbatches of the best order (the rest: any order)
SWAPS = 0.9

Permutation = list[int]


def critical_costs(problem: Problem) -> np.ndarray:
    """Per microbatch, the sum over stages of its compute time (F, B and W; fused B includes W):
    :attr:`Problem.microbatch_work` as an array."""
    return np.asarray(problem.microbatch_work)


def longest_first(problem: Problem) -> Permutation:
    costs = critical_costs(problem)
    return sorted(range(problem.microbatches), key=lambda j: (-costs[j], j))


def shortest_first(problem: Problem) -> Permutation:
    costs = critical_costs(problem)
    return sorted(range(problem.microbatches), key=lambda j: (costs[j], j))


def interleaved(problem: Problem, clusters: int) -> Permutation:
    """The microbatches sorted by cost (longest first) in ``clusters`` groups, taken one from each group in
    turn: long, middle, short, long, ... (two groups: long and short alternate)."""
    ranked = longest_first(problem)
    size = -(-len(ranked) // clusters)
    groups = [ranked[k * size:(k + 1) * size] for k in range(clusters)]
    return [group[i] for i in range(size) for group in groups if i < len(group)]


def windowed(problem: Problem, size: int, longest: bool) -> Permutation:
    """Data order with each window of ``size`` consecutive microbatches sorted by cost: close to data
    order in which microbatches are in flight together (so in memory), shorter bubbles within."""
    costs = critical_costs(problem)
    data = list(range(problem.microbatches))
    return [j for k in range(0, len(data), size)
            for j in sorted(data[k:k + size], key=lambda j: ((-costs[j]) if longest else costs[j], j))]


def renamed(schedule: Schedule, problem: Problem, permutation: Sequence[int], name: str) -> Schedule:
    """A schedule of the renumbered problem as a schedule of ``problem``: position k is microbatch
    ``permutation[k]``. The bound carries over (the two problems are the same up to names)."""
    ops = tuple(op._replace(microbatch=permutation[op.microbatch]) for op in schedule.ops)
    info = schedule.method
    params = dict(info.params, microbatch_order=list(permutation))
    return Schedule(problem, MethodInfo(name, params, info.status, info.lower_bound, info.seconds, dict(info.extra)),
                    ops)


def in_order(method: Method, problem: Problem, permutation: Sequence[int], options: RunOptions,
             name: str | None = None) -> Schedule:
    """``method``'s schedule with its position k running microbatch ``permutation[k]``."""
    name = name or method.name
    renumbered = problem if list(permutation) == list(range(problem.microbatches)) else \
        problem.with_microbatches(list(permutation))
    try:
        schedule = method.build(renumbered, options)
    except InfeasibleError as exc:  # "1f1b needs ...": "1f1b@longest-first needs ..."
        text = str(exc)
        raise InfeasibleError(name + text[len(method.name):] if text.startswith(method.name) else text) from None
    return renamed(schedule, problem, permutation, name)


def search_budget(problem: Problem) -> int:
    """How many orders the search builds at most on ``problem`` (a count fixed by its size)."""
    ops = problem.num_stages * problem.microbatches * len(problem.kinds)
    return max(SEARCH_LEAST, min(SEARCH_BUDGET, SEARCH_OPS // max(1, ops)))


def _fits(schedule: Schedule) -> bool:
    return not schedule.method.extra.get("capacity_broken")


def search(method: Method, problem: Problem, options: RunOptions, name: str) -> Schedule:
    """The best order of ``method`` found (see the module docstring); InfeasibleError when no order
    tried fits the caps (with ``ignore_capacity``, the fastest of those that break them)."""
    started = time.perf_counter()
    m = problem.microbatches
    data = list(range(m))
    if not problem.per_microbatch:
        return in_order(method, problem, data, options, name)
    deadline = None if options.time_limit is None else started + options.time_limit
    seen: set[tuple[int, ...]] = set()
    best: tuple[tuple, Schedule] | None = None
    refusal: InfeasibleError | None = None
    builds, budget = 0, search_budget(problem)

    def trial(permutation: Permutation) -> None:
        """Build one order (unless built before) and keep it if it is the best so far."""
        nonlocal best, refusal, builds
        key = tuple(permutation)
        if key in seen or builds >= budget:
            return
        seen.add(key)
        builds += 1
        try:
            schedule = in_order(method, problem, permutation, options, name)
        except InfeasibleError as exc:
            refusal = refusal or exc
            return
        rank = (not _fits(schedule), schedule.makespan)
        if best is None or rank < best[0]:
            best = (rank, schedule)

    for permutation in (data, longest_first(problem), shortest_first(problem),
                        *(interleaved(problem, c) for c in CLUSTERS if c < m), data[::-1],
                        *(windowed(problem, w, longest) for w in (problem.devices, 2 * problem.devices)
                          for longest in (True, False) if w < m)):
        trial(permutation)
    rng = random.Random(options.seed)
    for _ in range(4 * budget):  # a repeated order costs no build: a few more draws than builds
        if builds >= budget or (deadline is not None and time.perf_counter() > deadline):
            break
        if best is not None and rng.random() < SWAPS:  # a swap of two microbatches of the best order
            permutation = list(best[1].method.params["microbatch_order"])
            a, b = rng.sample(range(m), 2)
            permutation[a], permutation[b] = permutation[b], permutation[a]
        else:
            permutation = rng.sample(data, m)
        trial(permutation)
    if best is None:
        raise refusal or InfeasibleError(f"{name}: no microbatch order was built")
    schedule = best[1]
    params = dict(schedule.method.params, orders_tried=builds)
    return Schedule(problem, replace(schedule.method, params=params, seconds=time.perf_counter() - started),
                    schedule.ops)


ORDERS: dict[str, Callable[[Problem], Permutation] | None] = {
    "longest-first": longest_first, "shortest-first": shortest_first, "search": None}
ORDER_TEXT = {"longest-first": "microbatches with the longest critical cost (sum of F, B, W over stages) first",
              "shortest-first": "microbatches with the shortest critical cost first",
              "search": "the best microbatch order found by a DynaPipe-like search (sorted, clustered and "
                        "interleaved, random, swaps; shortest makespan within the caps)"}


def split_name(name: str) -> tuple[str, str] | None:
    """("1f1b", "longest-first") for "1f1b@longest-first"; None for a name without an order."""
    base, sep, order = name.rpartition(SEPARATOR)
    return (base, order.lower()) if sep else None


def base_name(name: str) -> str:
    """The method a name runs: "1f1b" for "1f1b@longest-first" and for "1f1b"."""
    parts = split_name(name)
    return name if parts is None else parts[0]


def ordered_method(base: Method, order: str) -> Method:
    """``base`` run in microbatch order ``order`` (a name of ``ORDERS``), registered as ``BASE@ORDER``."""
    if order not in ORDERS:
        raise NotApplicableError(f"unknown microbatch order {order!r}; orders: {', '.join(ORDERS)}")
    name = f"{base.name}{SEPARATOR}{order}"
    make = ORDERS[order]

    def build(problem: Problem, options: RunOptions) -> Schedule:
        if make is None:
            return search(base, problem, options, name)
        return in_order(base, problem, make(problem), options, name)

    return Method(name=name, family=base.family, description=f"{base.name}, {ORDER_TEXT[order]}",
                  requirements=base.requirements, why_not=base.why_not, build=build, published=False)
