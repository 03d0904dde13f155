"""The split bound: a lower bound on the makespan from two smaller problems, each proven by CP-SAT.

Name the microbatches by the start of F(0, .): they are interchangeable, so this loses nothing.
Every op of microbatch j or later depends on its own F(0, .), so it starts no sooner than F(0, j)
does. And the ops of any subset of the microbatches form a valid schedule of the same problem with
that many microbatches (fewer ops leave every device, lane and memory cap less loaded). So, with
the ops of microbatches j and later shifted to start at F(0, j)'s start, for every 0 < j < m:

    makespan >= A(j + 1) + OPT(m - j)

where A(n) is the least start of the last F(0) with n microbatches and OPT(n) the least makespan
with n microbatches. Any lower bound of each side will do: CP-SAT's proven bound on a model of the
smaller problem (its optimum when it proves one), and ``makespan_lower_bound`` for OPT.

It binds where the per-device figures cannot: on a linear problem whose first device's cap and
last device's load are both near their limit, the small problems' optima see the collisions of
F and B on the middle devices that lengthen every round trip (docs/solver.md, "The lower bound").

Valid only where the model is a relaxation of the problem: its times scaled exactly, and no
offload (the model moves whole shares only, a restriction). A's model has the trivial horizon:
re-timed as the runtime would, a schedule with the least A keeps it, and its makespan is then at
most every op and latency one after another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from ppsolve.bounds import capacity_shortfalls, makespan_lower_bound
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem
from ppsolve.solvers.cpsat import constraints
from ppsolve.solvers.cpsat.backend import add_cuts, add_order_constraints
from ppsolve.solvers.cpsat.variables import build_variables
from ppsolve.solvers.scaling import build_scaling

UNPROVEN_STOP = 2  # stop growing the prefix after this many sizes whose A was not proven in time
REST_TRIES = 3  # splits whose rest is then proven by CP-SAT as well
PREFIX_SHARE = 0.5  # of the time, at most, for the first round (prefixes)


@dataclass(frozen=True)
class Split:
    """makespan >= entry + rest: the least start of the last F(0) with ``head`` microbatches, and a
    lower bound on the makespan of the other ``m - head + 1``."""

    value: float
    head: int
    entry: float
    rest: float
    proven: bool  # both sides are the smaller problems' proven optima (else proven bounds)


@dataclass(frozen=True)
class SplitBound:
    """The best split found, every split tried, and why none could be tried (``reason``)."""

    best: Split | None
    tried: tuple[Split, ...] = ()
    reason: str | None = None
    seconds: float = 0.0


def why_not(problem: Problem) -> str | None:
    """Why the split bound does not apply to ``problem`` (None: it does)."""
    if problem.microbatches < 3:
        return "fewer than 3 microbatches"
    if capacity_shortfalls(problem):
        return "no schedule fits the memory cap"
    if problem.can_offload:
        return "the problem may offload (the model moves whole shares only, so it is no relaxation)"
    if not build_scaling(problem).exact:
        return "its times cannot be scaled to integers exactly"
    return None


def _least(problem: Problem, n: int, entry: bool, seconds: float, threads: int | None) -> tuple[float, bool]:
    """(a proven lower bound, whether it is the optimum) of A(n) (``entry``) or OPT(n)."""
    sub = replace(problem, microbatches=n)
    scaling = build_scaling(sub)
    cut = 0 if entry else scaling.time(makespan_lower_bound(sub).value)
    model = cp_model.CpModel()
    v = build_variables(model, sub, scaling, offload=False)
    add_order_constraints(v)
    constraints.memory(v, scaling.capacity)
    add_cuts(v, symmetry=True, capped=True, lower_bound=cut)
    model.minimize(v.start[Op(OpKind.F, 0, n - 1)] if entry else v.makespan)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, seconds)
    solver.parameters.num_workers = threads or 0
    code = solver.solve(model)  # never infeasible: the cap fits the whole problem (why_not), so fewer too
    # the proven bound holds whether or not a solution was found in time
    bound = max(cut, solver.best_objective_bound) if code != cp_model.MODEL_INVALID else cut
    return bound / scaling.time_scale, code == cp_model.OPTIMAL


def split_bound(problem: Problem, seconds: float, threads: int | None = None) -> SplitBound:
    """The best split within ``seconds``, in two rounds. First, for at most ``PREFIX_SHARE`` of the
    time, prefixes of growing size, A proven by CP-SAT (each with half the round's time left) and
    the rest bounded by ``makespan_lower_bound``, until ``UNPROVEN_STOP`` of them are not proven
    in time. Then the rest of the best ``REST_TRIES`` splits proven by CP-SAT as well, where it is
    no larger than the largest prefix proven (so about as quick to prove), sharing the time left."""
    began = time.monotonic()
    reason = why_not(problem)
    if reason is not None:
        return SplitBound(None, (), reason)
    m = problem.microbatches

    def left(share: float = 1.0) -> float:
        return share * seconds - (time.monotonic() - began)

    tried: dict[int, Split] = {}
    entry_proven: dict[int, bool] = {}
    unproven, largest = 0, 0
    for head in range(2, m, max(1, m // 16)):
        if left(PREFIX_SHARE) <= 0 or unproven >= UNPROVEN_STOP:
            break
        entry, proven = _least(problem, head, True, left(PREFIX_SHARE) / 2, threads)
        rest = makespan_lower_bound(replace(problem, microbatches=m - head + 1)).value
        tried[head] = Split(entry + rest, head, entry, rest, False)
        entry_proven[head] = proven
        unproven += not proven
        largest = head if proven else largest
    candidates = sorted((s for s in tried.values() if m - s.head + 1 <= largest), key=lambda s: -s.value)
    for index, split in enumerate(candidates[:REST_TRIES]):
        if left() <= 0:
            break
        found, proven = _least(problem, m - split.head + 1, False, left() / (min(REST_TRIES, len(candidates)) - index),
                               threads)
        if found > split.rest:
            tried[split.head] = Split(split.entry + found, split.head, split.entry, found,
                                      proven and entry_proven[split.head])
    best = max(tried.values(), key=lambda s: s.value, default=None)
    return SplitBound(best, tuple(tried[h] for h in sorted(tried)), None if tried else "no time to try a split",
                      time.monotonic() - began)
