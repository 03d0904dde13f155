"""The split bound: a lower bound on the makespan from smaller problems, each proven by CP-SAT.

Name the microbatches by the start of F(0, .): they are interchangeable, so this loses nothing.
Every op of microbatch j or later depends on its own F(0, .), so it starts no sooner than F(0, j)
does. And the ops of any subset of the microbatches form a valid schedule of the same problem with
that many microbatches (fewer ops leave every device, lane and memory cap less loaded), shifted to
start at the subset's first F(0). So, for consecutive microbatches i..i+n-1,

    start of F(0, i + n - 1) - start of F(0, i) >= A(n)     and     makespan - start of F(0, i) >= OPT(m - i)

where A(n) is the least start of the last F(0) with n microbatches and OPT(k) the least makespan
with k microbatches. Chained over groups that share their boundary microbatch, this is a
recursion: LB(k) = max(a bound of OPT(k), max over n of A(n) + LB(k - n + 1)). Any lower bound of
each side will do: CP-SAT's proven bound on a model of the smaller problem (its optimum when it
proves one), and ``makespan_lower_bound`` for OPT.

It binds where the per-device figures cannot: on a linear problem whose first device's cap and
last device's load are both near their limit, the small problems' optima see the collisions of
F and B on the middle devices that lengthen every round trip (docs/solver.md, "The lower bound").

Valid only where the model is a relaxation of the problem: its times scaled exactly, no
offload (the model moves whole shares only, a restriction) and no recompute (the model built here
keeps every activation whole, a restriction too). A's model has the trivial horizon:
re-timed as the runtime would, a schedule with the least A keeps it, and its makespan is then at
most every op and latency one after another.

Per-microbatch costs (contract version 4): the microbatches are no longer interchangeable, so the
split is made on the least-cost relaxation (``ppsolve.bounds.relaxation.least_costs``: every cost of
a stage at its least over the microbatches), whose optimum is at most the problem's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import groupby
from typing import Callable

from ortools.sat.python import cp_model

from ppsolve.bounds import capacity_shortfalls, makespan_lower_bound
from ppsolve.bounds.relaxation import least_costs
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.solvers.api import search_in_thread
from ppsolve.solvers.cpsat import constraints
from ppsolve.solvers.cpsat.backend import add_cuts, add_order_constraints
from ppsolve.solvers.cpsat.variables import build_variables
from ppsolve.solvers.scaling import build_scaling

UNPROVEN_STOP = 2  # stop growing a side's size after this many sizes not proven in time
PREFIX_SHARE = 0.5  # of the time, at most, for the first round (the prefixes' A)

Report = Callable[[str, int, float, bool], None]
"""Told of each size as it is done: ("A" or "OPT", the size, its bound, whether it is the optimum)."""


@dataclass(frozen=True)
class Split:
    """makespan >= sum(entries) + rest: consecutive groups of microbatches, group i of ``heads[i]``
    (each sharing its first microbatch with the group before), whose last F(0) starts no sooner than
    ``entries[i]`` after its first's; then the last ``rest_size`` microbatches take at least ``rest``."""

    value: float
    heads: tuple[int, ...]
    entries: tuple[float, ...]
    rest_size: int
    rest: float
    proven: bool  # every side is a smaller problem's proven optimum (else some are proven bounds)

    def describe(self) -> str:
        """E.g. "2 x A(14) + OPT(6) = 2 x 637.4 + 434.4" (OPT: a proven bound, the optimum if ``proven``)."""
        groups = [(h, len(list(g))) for h, g in groupby(sorted(self.heads, reverse=True))]  # any order is valid
        entry = dict(zip(self.heads, self.entries))
        terms = [(f"{k} x " if k > 1 else "", f"A({h})", f"{entry[h]:g}") for h, k in groups]
        if not terms:
            return f"OPT({self.rest_size}) >= {self.rest:g} (no chain above it)"
        names = " + ".join(f"{k}{name}" for k, name, _ in terms)
        values = " + ".join(f"{k}{value}" for k, _, value in terms)
        return f"{names} + OPT({self.rest_size}) = {values} + {self.rest:g}"


@dataclass(frozen=True)
class SplitBound:
    """The best split found, the smaller problems' bounds it was built from, and why none could
    be tried (``reason``)."""

    best: Split | None
    entries: dict[int, tuple[float, bool]] = field(default_factory=dict)  # n: (bound on A(n), proven)
    rests: dict[int, tuple[float, bool]] = field(default_factory=dict)  # k: (bound on OPT(k), proven) from CP-SAT
    reason: str | None = None
    seconds: float = 0.0
    interrupted: bool = False  # Ctrl-C ended it: the sizes done before it


def why_not(problem: Problem) -> str | None:
    """Why the split bound does not apply to ``problem`` (None: it does)."""
    if problem.microbatches < 3:
        return "fewer than 3 microbatches"
    if capacity_shortfalls(problem):
        return "no schedule fits the memory cap"
    if problem.can_offload:
        return "the problem may offload (the model moves whole shares only, so it is no relaxation)"
    if problem.can_recompute:
        return "the problem may recompute (the model keeps every activation, so it is no relaxation)"
    if not build_scaling(_interchangeable(problem)).exact:
        return "its times cannot be scaled to integers exactly"
    return None


def _interchangeable(problem: Problem) -> Problem:
    """The problem the split is made on: itself, or its least-cost relaxation (module docstring)."""
    return least_costs(problem) if problem.per_microbatch else problem


def least_time(problem: Problem, n: int, entry: bool, seconds: float, threads: int | None,
               entries: dict[int, tuple[float, bool]], rests: dict[int, tuple[float, bool]]) -> tuple[float, bool]:
    """(a proven lower bound, whether it is the optimum) of A(n) (``entry``) or OPT(n), the smaller
    sizes' bounds found so far (``entries``, ``rests``) added as cuts (``_known_cuts``)."""
    sub = problem.with_microbatches(range(n))
    scaling = build_scaling(sub)
    cut = 0 if entry else scaling.time(makespan_lower_bound(sub).value)
    model = cp_model.CpModel()
    v = build_variables(model, sub, scaling, offload=False)
    add_order_constraints(v)
    constraints.memory(v, scaling.capacity)
    add_cuts(v, symmetry=True, capped=True, lower_bound=cut)
    _known_cuts(v, entries, rests if not entry else {})
    model.minimize(v.start[Op(OpKind.F, 0, n - 1)] if entry else v.makespan)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, seconds)
    solver.parameters.num_workers = threads or 0
    solver.parameters.catch_sigint_signal = False  # Ctrl-C reaches Python (search_in_thread), which stops it
    code, interrupted, _ = search_in_thread(lambda: solver.solve(model), solver.stop_search)
    if interrupted:
        raise KeyboardInterrupt  # split_bound keeps the sizes done before it
    # never infeasible: the cap fits the whole problem (why_not), so fewer too; the proven bound holds
    # whether or not a solution was found in time
    bound = max(cut, solver.best_objective_bound) if code not in (None, cp_model.MODEL_INVALID) else cut
    return bound / scaling.time_scale, code == cp_model.OPTIMAL


def _known_cuts(v, entries: dict[int, tuple[float, bool]], rests: dict[int, tuple[float, bool]]) -> None:
    """The smaller sizes' bounds as cuts (the microbatches are in F(0) order, ``add_cuts``'s symmetry):
    F(0, j) - F(0, i) >= A(j - i + 1) for i < j, and makespan >= F(0, i) + OPT(n - i) (the module
    docstring's two facts, on the model's own microbatches)."""
    n, sc, model = v.problem.microbatches, v.scaling, v.model
    first = [v.start[Op(OpKind.F, 0, j)] for j in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            if j - i + 1 in entries:
                model.add(first[j] - first[i] >= sc.time(entries[j - i + 1][0]))
        if i > 0 and n - i in rests:
            model.add(v.makespan >= first[i] + sc.time(rests[n - i][0]))


def _grow(problem: Problem, entry: bool, sizes: range, left, threads: int | None,
          found: dict[int, tuple[float, bool]], entries: dict[int, tuple[float, bool]],
          report: Report | None) -> None:
    """A(n) (``entry``) or OPT(n) into ``found`` for the growing ``sizes``, each with half the time
    ``left()``, until ``UNPROVEN_STOP`` of them are not proven in time or no time is left; each with
    the bounds on A (``entries``, those of the first round, or the ones this round finds) and OPT
    found before it."""
    unproven = 0
    for n in sizes:
        if left() <= 0 or unproven >= UNPROVEN_STOP:
            break
        found[n] = least_time(problem, n, entry, left() / 2, threads, found if entry else entries, found)
        unproven += not found[n][1]
        if report is not None:
            report("A" if entry else "OPT", n, *found[n])


def best_chain(problem: Problem, entries: dict[int, tuple[float, bool]],
               rests: dict[int, tuple[float, bool]]) -> Split | None:
    """The best split of all ``m`` microbatches: LB(k) = max(a bound of OPT(k), max over n of
    A(n) + LB(k - n + 1)), longest path over k. OPT(k) is bounded by CP-SAT where ``rests`` has k
    (``least_time`` already cuts it at ``makespan_lower_bound``), and by ``makespan_lower_bound`` for
    all m and for the rest of one group (up to 0.15 s a call at d = 32, so not for every k)."""
    m = problem.microbatches
    bases = dict(rests)
    for k in {m, *(m - n + 1 for n in entries)} - set(rests):
        analytic = makespan_lower_bound(problem.with_microbatches(range(k))).value
        if analytic > bases.get(k, (0.0, False))[0]:
            bases[k] = (analytic, False)
    best: dict[int, Split] = {}
    for k in range(1, m + 1):
        options = [Split(bases[k][0], (), (), k, bases[k][0], bases[k][1])] if k in bases else []
        for n, (a, proven) in entries.items():
            rest = best.get(k - n + 1)
            if n <= k and rest is not None:
                options.append(Split(a + rest.value, (n, *rest.heads), (a, *rest.entries), rest.rest_size,
                                     rest.rest, proven and rest.proven))
        if options:
            best[k] = max(options, key=lambda s: (s.value, s.proven))
    return best.get(m)


def split_bound(problem: Problem, seconds: float, threads: int | None = None,
                report: Report | None = None) -> SplitBound:
    """The best split within ``seconds``, in two rounds: first, for at most ``PREFIX_SHARE`` of the
    time, A(n) for n = 2, 3, ...; then OPT(k) for k = 1, 2, ... with the time left; each size with
    half the round's time left, a round ending after ``UNPROVEN_STOP`` sizes not proven in time.
    The best chain of them (``best_chain``) is the bound; ``report`` hears of each size when it is done.
    Ctrl-C ends it with the chain of the sizes done (``interrupted``)."""
    began = time.monotonic()
    reason = why_not(problem)
    if reason is not None:
        return SplitBound(None, reason=reason)
    problem = _interchangeable(problem)
    m = problem.microbatches

    def left(share: float = 1.0):
        return lambda: share * seconds - (time.monotonic() - began)

    entries: dict[int, tuple[float, bool]] = {}
    rests: dict[int, tuple[float, bool]] = {}
    interrupted = False
    try:
        _grow(problem, True, range(2, m), left(PREFIX_SHARE), threads, entries, entries, report)
        _grow(problem, False, range(1, m), left(), threads, rests, entries, report)
    except KeyboardInterrupt:  # Ctrl-C: the chain of the sizes done so far
        interrupted = True
    best = best_chain(problem, entries, rests) if entries else None
    reason = None if best else "interrupted before a split was tried" if interrupted else "no time to try a split"
    return SplitBound(best, entries, rests, reason, time.monotonic() - began, interrupted)
