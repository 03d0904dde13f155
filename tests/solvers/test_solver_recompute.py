"""CP-SAT decides keep / offload / recompute: R ops, partial offload amounts, honest claims.

The property test compares the solver with an independent exact model written here: a MILP over
continuous times and continuous offloaded amounts (any amount in (0, share], as SPEC.md allows), with
pairwise order binaries for the compute ops, the link lanes and each device's memory events
(solved by CBC through PuLP). It shares nothing with the solver but the problem and the one
dependency table.
"""

from __future__ import annotations

import itertools
import random

from unittest import mock

import pytest

from ppsolve.bounds import MakespanBound
from ppsolve.checker import check
from ppsolve.dependencies import dependency_table
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem, problem_from_dict
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.api import Status
import ppsolve.solvers.milp  # noqa: F401  (PuLP imported with highspy hidden)

import pulp  # noqa: E402

_F, _B, _W, _R, _OFF, _REL = OpKind.F, OpKind.B, OpKind.W, OpKind.R, OpKind.OFFLOAD, OpKind.RELOAD


# ----- the independent exact model -----

class _Milp:
    """min C over every schedule of ``problem`` (continuous times and amounts)."""

    def __init__(self, problem):
        self.p = p = problem
        self.lp = pulp.LpProblem("independent", pulp.LpMinimize)
        self.n = itertools.count()
        self.start, self.dur, self.present = {}, {}, {}
        self.amount = {}
        self.recomputed = {}
        H = sum(p.duration(k, s) for s in range(p.num_stages) for k in p.kinds + (_R,) if k is not _R
                or p.recompute is not None) * p.microbatches
        if p.offload is not None:
            H += p.microbatches * sum(p.duration(k, s, p.max_offload(s))
                                      for s in range(p.num_stages) for k in (_OFF, _REL))
        self.M = H + 2 * p.microbatches * p.num_stages * p.p2p + 1
        self.C = self.var("C", 0, self.M)
        self._ops()
        self._precedences()
        self._no_overlap()
        self._memory()
        self.lp += self.C

    def var(self, name, lo=0, hi=None, cat="Continuous"):
        return pulp.LpVariable(f"{name}_{next(self.n)}", lo, hi, cat)

    def binary(self, name):
        return self.var(name, 0, 1, "Binary")

    def _ops(self):
        p = self.p
        for s in range(p.num_stages):
            for j in range(p.microbatches):
                for k in p.kinds:
                    self._op(Op(k, s, j), p.duration(k, s), 1)
                if p.recompute is not None and p.recompute_saving(s) > 0:
                    y = self.binary("y")
                    self.recomputed[(s, j)] = y
                    self._op(Op(_R, s, j), p.duration(_R, s) * y, y)
                if p.offload is not None and p.max_offload(s) > 0:
                    x = self.binary("x")
                    a = self.var("a", 0, p.max_offload(s))
                    self.lp += a <= p.max_offload(s) * x
                    self.amount[(s, j)] = (x, a)
                    self._op(Op(_OFF, s, j), a * (1 / p.offload.d2h), x)
                    self._op(Op(_REL, s, j), a * (1 / p.offload.h2d), x)
                y, xa = self.recomputed.get((s, j)), self.amount.get((s, j))
                if y is not None and xa is not None:
                    self.lp += y + xa[0] <= 1  # rule 10

    def _op(self, op, dur, present):
        self.start[op] = self.var("S", 0, self.M)
        self.dur[op] = dur
        self.present[op] = present
        self.lp += self.C >= self.end(op) - self.M * (1 - present)

    def end(self, op):
        return self.start[op] + self.dur[op]

    def absent(self, *ops):
        return sum(1 - self.present[o] for o in ops if not isinstance(self.present[o], int))

    def _precedences(self):
        table = dependency_table(self.p)
        for op in self.start:
            for dep in table[(op.kind, op.stage)]:
                before = dep.op(op.microbatch)
                if before in self.start:
                    self.lp += self.start[op] >= self.end(before) + dep.lag - self.M * self.absent(op, before)

    def _disjoint(self, ops):
        for a, b in itertools.combinations(ops, 2):
            first = self.binary("o")
            slack = self.M * self.absent(a, b)
            self.lp += self.end(a) <= self.start[b] + self.M * (1 - first) + slack
            self.lp += self.end(b) <= self.start[a] + self.M * first + slack

    def _no_overlap(self):
        p = self.p
        for d in range(p.devices):
            self._disjoint([op for op in self.start if op.kind.is_compute and p.placement[op.stage] == d])
        lanes = {}
        for op in self.start:
            if op.kind.is_transfer:
                lanes.setdefault(p.lane(p.placement[op.stage], op.kind), []).append(op)
        for ops in lanes.values():
            self._disjoint(ops)

    def _events(self, s, j):
        """(time, sign, size) of each memory event of one (stage, microbatch); size: a number, ("y", y, c)
        for c * y, or ("a", a, top) for an amount a <= top."""
        p = self.p
        act = p.activation[s]
        hold = p.weight_hold[s] if p.split_backward else 0.0
        y = self.recomputed.get((s, j))
        out = []
        if y is not None:
            saving = act - p.recompute.keep[s]
            out.append((self.start[Op(_F, s, j)], 1, act - saving))
            out.append((self.start[Op(_F, s, j)], 1, ("y", 1 - y, saving)))  # the rest when not recomputed
            out.append((self.start[Op(_R, s, j)], 1, ("y", y, saving)))
        else:
            out.append((self.start[Op(_F, s, j)], 1, act))
        if (s, j) in self.amount:
            x, a = self.amount[(s, j)]
            out.append((self.end(Op(_OFF, s, j)), -1, ("a", a, p.max_offload(s))))
            out.append((self.start[Op(_REL, s, j)], 1, ("a", a, p.max_offload(s))))
        out.append((self.end(Op(_B, s, j)), -1, act - hold))
        if p.split_backward:
            out.append((self.end(Op(_W, s, j)), -1, hold))
        return out

    def _size(self, size):
        return size if not isinstance(size, tuple) else (size[2] * size[1] if size[0] == "y" else size[1])

    def _counted(self, earlier, size):
        """size * earlier, linearised."""
        if not isinstance(size, tuple):
            return size * earlier
        kind, var, top = size
        w = self.var("w", 0, top)
        if kind == "y":  # top * (var * earlier), var a binary expression
            self.lp += w <= top * var
            self.lp += w <= top * earlier
            self.lp += w >= top * (var + earlier - 1)
        else:
            self.lp += w <= var
            self.lp += w <= top * earlier
            self.lp += w >= var - top * (1 - earlier)
        return w

    def _memory(self):
        """At every allocation: what is held (releases and allocations at or before it) <= the cap."""
        p = self.p
        for d in range(p.devices):
            if p.capacity[d] is None:
                continue
            events = [e for s in range(p.num_stages) if p.placement[s] == d
                      for j in range(p.microbatches) for e in self._events(s, j)]
            earlier = {}
            for e, (t_e, sign_e, size_e) in enumerate(events):
                if sign_e < 0:
                    continue
                held = self._size(size_e)
                for f, (t_f, sign_f, size_f) in enumerate(events):
                    if f == e:
                        continue
                    if t_f is t_e:  # the same instant (F's two parts): always counted
                        held = held + sign_f * self._size(size_f)
                        continue
                    b = earlier.get((e, f))
                    if b is None:
                        b = earlier[(e, f)] = self.binary("b")
                        self.lp += t_f <= t_e + self.M * (1 - b)
                        self.lp += t_e <= t_f + self.M * b
                    if sign_f > 0:  # two allocations at one instant: one check counts the other
                        other = earlier.get((f, e))
                        if other is None:
                            other = earlier[(f, e)] = self.binary("b")
                            self.lp += t_e <= t_f + self.M * (1 - other)
                            self.lp += t_f <= t_e + self.M * other
                        self.lp += b + other >= 1
                    held = held + sign_f * self._counted(b, size_f)
                self.lp += held <= p.capacity[d]

    def solve(self, seconds=30.0):
        status = self.lp.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=seconds))
        if pulp.LpStatus[status] != "Optimal" or self.lp.sol_status != pulp.LpSolutionOptimal:
            return None
        return pulp.value(self.C)


def independent_optimum(problem, seconds: float = 30.0) -> float | None:
    """The optimum with continuous amounts (the MILP above), None when not proven in time."""
    return _Milp(problem).solve(seconds)


def discrete_optimum(problem, seconds: float = 20.0, most_recomputed: int | None = None) -> float | None:
    """Without offload (every decision discrete; times on the grid of the durations' and lags' common
    denominator): CP-SAT on a formulation of its own (memory held from F to R for the checkpoint, from
    R on for the rest), no cuts, no symmetry."""
    from fractions import Fraction
    from math import lcm

    from ortools.sat.python import cp_model

    p = problem
    keep = list(p.recompute.keep) if p.recompute is not None else []
    figures = list(p.activation) + list(p.weight_hold) + keep + [c for c in p.capacity if c]
    scale = lcm(*(Fraction(x).limit_denominator(1000).denominator for x in figures))
    mem = lambda x: int(round(x * scale))  # noqa: E731
    times = [p.duration(k, s) for s in range(p.num_stages) for k in p.kinds + (_R,)] + [p.p2p]
    tscale = lcm(*(Fraction(x).limit_denominator(1000).denominator for x in times))
    tm = lambda x: int(round(x * tscale))  # noqa: E731
    H = tm(sum(times[:-1]) * p.microbatches + 2 * p.microbatches * p.num_stages * p.p2p)
    m = cp_model.CpModel()
    start, end, present, by_device = {}, {}, {}, {}
    for s in range(p.num_stages):
        for j in range(p.microbatches):
            for k in p.kinds + ((_R,) if p.recompute_saving(s) > 0 else ()):
                op, d = Op(k, s, j), tm(p.duration(k, s))
                start[op], end[op] = m.new_int_var(0, H, ""), m.new_int_var(0, H, "")
                present[op] = m.new_bool_var("") if k is _R else True
                lit = present[op]
                by_device.setdefault(p.placement[s], []).append(
                    m.new_interval_var(start[op], d, end[op], "") if lit is True
                    else m.new_optional_interval_var(start[op], d, end[op], lit, ""))
    table = dependency_table(p)
    for op in start:
        for dep in table[(op.kind, op.stage)]:
            before = dep.op(op.microbatch)
            if before in start:
                lits = [x for x in (present[op], present[before]) if x is not True]
                c = m.add(start[op] >= end[before] + tm(dep.lag))
                if lits:
                    c.only_enforce_if(lits)
    for intervals in by_device.values():
        m.add_no_overlap(intervals)
    C = m.new_int_var(0, H, "C")
    for op in start:
        m.add(C >= end[op])
    held = {}  # device -> [(interval, demand)]

    def hold_for(s, a, b, demand, lit=True):
        if demand > 0:
            size = m.new_int_var(0, H, "")
            interval = (m.new_interval_var(a, size, b, "") if lit is True
                        else m.new_optional_interval_var(a, size, b, lit, ""))
            held.setdefault(p.placement[s], []).append((interval, demand))

    for s in range(p.num_stages):
        act, hold = mem(p.activation[s]), mem(p.weight_hold[s]) if p.split_backward else 0
        last = Op(_W, s, 0).kind if p.split_backward else _B
        for j in range(p.microbatches):
            f, b_end, w_end = start[Op(_F, s, j)], end[Op(_B, s, j)], end[Op(last, s, j)]
            r = present.get(Op(_R, s, j))
            if r is None:
                hold_for(s, f, b_end, act - hold)
                hold_for(s, f, w_end, hold)
                continue
            # kept: the whole activation from F; recomputed: the checkpoint from F to R, then all of it
            hold_for(s, f, b_end, act - hold, r.Not())
            hold_for(s, f, w_end, hold, r.Not())
            hold_for(s, f, start[Op(_R, s, j)], mem(p.recompute.keep[s]), r)
            hold_for(s, start[Op(_R, s, j)], b_end, act - hold, r)
            hold_for(s, start[Op(_R, s, j)], w_end, hold, r)
    for d, items in held.items():
        if p.capacity[d] is not None:
            m.add_cumulative([i for i, _ in items], [x for _, x in items], int(p.capacity[d] * scale + 1e-9))
    if most_recomputed is not None:
        m.add(sum(x for op, x in present.items() if op.kind is _R) <= most_recomputed)
    m.minimize(C)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = 1
    return solver.value(C) / tscale if solver.solve(m) == cp_model.OPTIMAL else None


# ----- problems -----

def tiny(seed: int, lever: str, microbatches=(2, 2, 3)) -> Problem:
    """2 devices, 2-3 microbatches, a cap that binds; ``lever``: "recompute", "offload" or "both"."""
    rng = random.Random(seed)
    m = rng.choice(microbatches)
    split = rng.random() < 0.5
    act = [rng.choice([1, 2]) for _ in range(2)]
    data = {"format": "ppsolve/problem@1", "devices": 2, "microbatches": m,
            "backward": "split" if split else "fused",
            "time": {"forward": [rng.randint(1, 3) for _ in range(2)],
                     "backward_input": [rng.randint(1, 3) for _ in range(2)],
                     "backward_weight": [rng.randint(0, 2) for _ in range(2)], "p2p": rng.choice([0, 1])},
            "memory": {"activation": act, "weight_hold": [rng.choice([0, a / 2]) for a in act],
                       "capacity": [a * rng.choice([1, 1.5, 2]) for a in act]}}
    if lever in ("recompute", "both"):
        data["recompute"] = {"keep": [a * rng.choice([0, 0.25, 0.5]) for a in act],
                             "time": [rng.randint(1, 2) for _ in range(2)]}
    if lever in ("offload", "both"):
        data["offload"] = {"fraction": rng.choice([0.5, 1]),
                           "bandwidth": {"d2h": rng.choice([0.5, 1, 2]), "h2d": rng.choice([0.5, 1, 2])}}
    return problem_from_dict(data)


# The solver's claims are checked against its own model's proof: the foundation's analytic bound (a cut
# of the model, ppsolve.bounds) is switched off here, since its validity with recompute is tested with
# the bounds (tests/bounds/test_bound_validity.py), and a bound that were too high would hide a wrong model.
def model_solve(problem, **changes):
    with mock.patch("ppsolve.solvers.phases.makespan_lower_bound", lambda p: MakespanBound(0.0, (), 0.0)):
        return solved(problem, **changes)


def solved(problem, **changes):
    result = solve(problem, SolveOptions(**{"time_limit": 6, "threads": 1, **changes}))
    report = check(result.schedule)
    assert report.ok, [v.render() for v in report.violations]
    return result


# ----- tests -----

def test_partial_offload_beats_whole_shares():
    # issue 34: moving half of two activations (1 time unit each way) gives 15; whole shares gave 18
    problem = problem_from_dict({"format": "ppsolve/problem@1", "devices": 2, "microbatches": 2,
                                 "time": {"forward": 2, "backward_input": 2, "backward_weight": 2},
                                 "memory": {"activation": 1, "capacity": 1.5},
                                 "offload": {"bandwidth": {"d2h": 0.5, "h2d": 0.5}}})
    result = solved(problem, warm_start="none")
    assert result.schedule.makespan == pytest.approx(15)
    amounts = sorted(op.amount for op in result.schedule.ops if op.kind is _OFF)
    assert amounts and all(0 < a < problem.max_offload(0) for a in amounts)
    best = independent_optimum(problem)
    assert best is not None and best <= 15 + 1e-6
    if result.status == "optimal":
        assert best == pytest.approx(15)
    assert result.lower_bound <= best + 1e-6


def test_recompute_used_where_the_cap_binds_and_overhead_least():
    # one activation fits on each device: keeping everything runs microbatches one by one; recomputing
    # (the checkpoint is a quarter) lets the pipeline fill, and the overhead phase drops needless R
    problem = problem_from_dict({"format": "ppsolve/problem@1", "devices": 2, "microbatches": 3,
                                 "time": {"forward": 2, "backward_input": 2, "backward_weight": 2},
                                 "memory": {"activation": 1, "capacity": 1.5},
                                 "recompute": {"keep": 0.25, "time": 1}})
    kept = model_solve(problem, recompute=False)
    result = model_solve(problem)
    assert result.schedule.makespan < kept.schedule.makespan
    assert result.status == "optimal"
    assert result.schedule.makespan == pytest.approx(discrete_optimum(problem))
    assert 0 < result.schedule.recomputed < problem.microbatches * problem.num_stages
    assert result.schedule.method.extra["least_overhead"] in ("optimal", "feasible")
    # no schedule as short recomputes less (the discrete model, with the recompute count capped)
    fewer = result.schedule.recomputed - 1
    assert result.schedule.method.extra["least_overhead"] != "optimal" or \
        discrete_optimum(problem, most_recomputed=fewer) is None or \
        discrete_optimum(problem, most_recomputed=fewer) > result.schedule.makespan


def test_no_recompute_without_a_cap():
    problem = problem_from_dict({"format": "ppsolve/problem@1", "devices": 2, "microbatches": 3,
                                 "time": {"forward": 2, "backward_input": 2, "backward_weight": 2},
                                 "memory": {"activation": 1}, "recompute": {"keep": 0.25}})
    result = model_solve(problem)
    assert result.status == "optimal"
    assert result.schedule.recomputed == 0


@pytest.mark.parametrize("seed", range(50))
def test_optimal_claims_hold_with_recompute(seed):
    problem = tiny(seed, "recompute")
    result = model_solve(problem)
    best = discrete_optimum(problem)
    assert best is not None
    assert result.schedule.makespan >= best - 1e-6  # a valid schedule is never below the optimum
    assert result.lower_bound <= best + 1e-6
    if result.status == "optimal":
        assert result.schedule.makespan == pytest.approx(best)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_claims_hold_for_continuous_amounts(seed):
    problem = tiny(seed, "offload" if seed % 2 else "both", microbatches=(2,))
    result = model_solve(problem)
    best = independent_optimum(problem, seconds=120)
    assert best is not None, "the independent model proved nothing in time: the claims went unjudged"
    assert result.schedule.makespan >= best - 1e-6
    assert result.lower_bound <= best + 1e-6
    if result.status == "optimal":
        assert result.schedule.makespan == pytest.approx(best, abs=1e-6)


# ----- windows (large-neighbourhood search) -----

def _lns_problem(**extra):
    """4 devices x 8 microbatches, room for about one activation per device: 1F1B needs more."""
    return problem_from_dict({"format": "ppsolve/problem@1", "devices": 4, "microbatches": 8,
                              "time": {"forward": 2, "backward_input": 2, "backward_weight": 1},
                              "memory": {"activation": 1, "weight_hold": 0.25, "capacity": 1.5}, **extra})


def _serial(problem, recomputed=()):
    from ppsolve.baselines.common import with_recompute
    from ppsolve.schedule import make_schedule
    from ppsolve.simulator import simulate
    from ppsolve.solvers.warm_start.plans import serial_orders

    return make_schedule(problem, simulate(problem, with_recompute(serial_orders(problem), recomputed)), "serial")


def _window_solution(problem, start, t1, offload=None, recompute=True):
    """The window of every device over [0, t1) of ``start``, solved; (window, its placement, composed).
    ``offload`` (default: the problem's) and ``recompute``: the levers the window may add."""
    import time

    from ppsolve.schedule import make_schedule
    from ppsolve.solvers.api import Phase, PhaseTask
    from ppsolve.solvers.budget import Budget, Limit
    from ppsolve.solvers.cpsat import backend
    from ppsolve.solvers.progress import Progress
    from ppsolve.solvers.scaling import build_scaling
    from ppsolve.solvers.search.window import Incumbent, compose, make_window

    inc = Incumbent(start)
    offload = problem.can_offload if offload is None else offload
    window = make_window(inc, range(problem.devices), 0.0, t1, offload=offload, orders=not offload,
                         recompute=recompute)
    budget = Budget(30, False)
    task = PhaseTask(problem, build_scaling(problem), Phase.MAKESPAN, SolveOptions(threads=1), budget,
                     Limit(time.monotonic() + 20), Progress(budget, "cpsat"), window=window)
    answer = backend.run_phase(task)
    assert answer.status is Status.OPTIMAL
    placed = answer.solutions[-1]
    return window, placed, make_schedule(problem, compose(inc, [(window, placed)]), "composed")


@pytest.mark.parametrize("lever", ["recompute", "offload"])
def test_a_window_adds_recompute_or_a_partial_offload(lever):
    # a serial schedule keeps one activation per device; a window over its start may recompute or
    # offload (any amount) so that the next microbatch starts before the first one's backward
    extra = ({"recompute": {"keep": 0.25, "time": 1}} if lever == "recompute"
             else {"offload": {"fraction": 1, "bandwidth": {"d2h": 1, "h2d": 1}}})
    problem = _lns_problem(**extra)
    start = _serial(problem)
    window, placed, composed = _window_solution(problem, start, 40.0)
    assert window.choosable
    assert window.measure(placed)[0] < window.current
    assert check(composed).ok and composed.makespan < start.makespan
    kind = _R if lever == "recompute" else _OFF
    assert any(op.kind is kind for op in placed)


@pytest.mark.parametrize("lever", ["recompute", "offload"])
def test_a_window_adds_only_the_levers_it_is_given(lever):
    # both levers in the problem, one of them switched off for the search (SolveOptions(offload=False) or
    # (recompute=False)): the window still gains the other one, never the one switched off
    problem = _lns_problem(recompute={"keep": 0.25, "time": 1},
                           offload={"fraction": 1, "bandwidth": {"d2h": 1, "h2d": 1}})
    start = _serial(problem)
    window, placed, composed = _window_solution(problem, start, 40.0, offload=lever == "offload",
                                                recompute=lever == "recompute")
    kinds = {op.kind for op in placed}
    assert check(composed).ok and composed.makespan < start.makespan
    if lever == "offload":
        assert _OFF in kinds and _R not in kinds
    else:
        assert _R in kinds and _OFF not in kinds


def test_a_window_drops_recompute_that_does_not_help():
    # every activation recomputed, memory unbounded: the window's best path drops the R ops it holds
    problem = _lns_problem(recompute={"keep": 0.25, "time": 1}).replace(capacity=None)
    keys = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)]
    start = _serial(problem, keys)
    window, placed, composed = _window_solution(problem, start, 40.0)
    before = sum(1 for op in window.free if op.kind is _R)
    assert before > 0 and sum(1 for op in placed if op.kind is _R) < before
    assert check(composed).ok and composed.makespan < start.makespan


def test_shedding_drops_recompute_the_makespan_does_not_need():
    # every activation recomputed, memory unbounded: each R can go; the times stay, the schedule checks
    from ppsolve.solvers.shed import shed_levers

    problem = _lns_problem(recompute={"keep": 0.25, "time": 1})
    keys = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)]
    start = _serial(problem, keys)
    shed = shed_levers(start)
    assert check(shed).ok and shed.makespan <= start.makespan
    assert shed.recomputed < start.recomputed
    # what stays is needed: dropping any one more R breaks the cap
    from ppsolve.memory import peak_memory

    for op in (o for o in shed.ops if o.kind is _R):
        peaks = peak_memory(problem, [o for o in shed.ops if o is not op])
        assert any(p > c + 1e-9 for p, c in zip(peaks, problem.capacity))


def test_overhead_windows_lower_recompute_at_the_same_makespan():
    # every activation recomputed under a cap that needs only some: windows of one device drop R ops
    # (placing the device's ops again), never lengthening the schedule
    from ppsolve.solvers.budget import Budget, Limit
    from ppsolve.solvers.cpsat import backend
    from ppsolve.solvers.progress import Progress
    from ppsolve.solvers.scaling import build_scaling
    from ppsolve.solvers.search.overhead import lower_overhead, overhead_key

    problem = _lns_problem(recompute={"keep": 0.25, "time": 1}).replace(capacity=(2.5,) * 4)
    keys = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)]
    start = _serial(problem, keys)
    budget = Budget(600, True)  # 3 s of deterministic work end it; the wall clock only guards a runaway
    limit = Limit(time_limit_from_now(600), 3.0)
    best, windows, better, _ = lower_overhead(problem, build_scaling(problem), SolveOptions(threads=1), budget,
                                              Progress(budget, "cpsat"), backend, start, limit)
    assert windows > 0 and better > 0
    assert check(best).ok and best.makespan <= start.makespan
    assert overhead_key(best) < overhead_key(start)


def time_limit_from_now(seconds: float) -> float:
    import time

    return time.monotonic() + seconds


def test_shedding_trims_offloads_to_what_the_cap_needs():
    # one device holds stages 0 and 1 (activation 2 each, cap 3): while F(1,0) runs, 1 of stage 0's
    # activation must be away; a plan that offloads both activations whole fits, and after the pass
    # stage 1's offload is gone and stage 0's moves 1 (room over [its offload's end, its reload's start)
    # is 3 - 2)
    from ppsolve.memory import peak_memory
    from ppsolve.schedule import make_schedule
    from ppsolve.simulator import forwards_wait_for_offloads, simulate
    from ppsolve.solvers.shed import shed_levers, trim_amounts
    from tests.helpers import make_problem, serial_orders

    problem = make_problem(devices=1, chunks=2, placement="interleaved", microbatches=1, memory_activation=2,
                           memory_capacity=3, offload={"bandwidth": {"d2h": 1, "h2d": 1}})
    orders = serial_orders(problem, offload=True)
    start = make_schedule(problem, simulate(problem, orders, waits=forwards_wait_for_offloads(orders)), "whole")
    assert check(start).ok and start.offloaded == 4
    trimmed = trim_amounts(problem, list(start.ops))
    assert {(op.stage, op.amount) for op in trimmed if op.kind is OpKind.OFFLOAD} == {(0, 1.0), (1, 1.0)}
    assert all(op.end - op.start == pytest.approx(op.amount) for op in trimmed if op.kind.is_transfer)  # bandwidth 1
    assert max(peak_memory(problem, trimmed)) <= 3 + 1e-9
    shed = shed_levers(start)
    assert check(shed).ok and shed.makespan <= start.makespan + 1e-9
    assert [(op.stage, op.amount) for op in shed.ops if op.kind is OpKind.OFFLOAD] == [(0, 1.0)]


def test_whole_shares_first_is_a_restriction_the_overhead_phase_goes_beyond(example_problem):
    # the OVERHEAD phase first searches offloads of whole shares, then any amount from that start: on
    # the bundled example (the warm start meets the bound, so OVERHEAD is the only search) the first
    # step's solutions move whole shares only, and the answer moves no more than the best of them
    from ppsolve.solvers import phases

    problem = example_problem
    seen = []
    real = phases.Run.phase

    def spy(self, phase, limit, hint, horizon=None, makespan_cap=None, whole_shares=False):
        answer = real(self, phase, limit, hint, horizon, makespan_cap, whole_shares)
        if whole_shares:
            seen.extend([op for op in ops if op.kind is _OFF] for ops in answer.solutions)
        return answer

    with mock.patch.object(phases.Run, "phase", spy):
        result = solved(problem, time_limit=8)
    assert seen and all(op.amount == pytest.approx(problem.max_offload(op.stage)) for ops in seen for op in ops)
    assert result.schedule.offloaded <= min(sum(op.amount for op in ops) for ops in seen) + 1e-9


def test_time_kept_for_the_overhead_phase_goes_back_to_the_search_when_no_lever_is_used():
    # a problem with an offload link: the makespan search keeps time for the overhead phase; when its
    # best schedule uses no lever (and is not proven), that phase does not run and the search goes on
    # with the time (the whole model is stubbed to "not proven" so that the search runs at all)
    from ppsolve.solvers import phases
    from tests.helpers import make_problem

    problem = make_problem(devices=4, microbatches=24, time_forward=[1, 1, 1, 3],
                           offload={"bandwidth": {"d2h": 0.25, "h2d": 0.25}})
    calls = []
    real = phases.large_neighbourhoods

    def spy(run, start, share, keep):
        calls.append(keep)
        return real(run, start, share, keep)

    with mock.patch.object(phases, "large_neighbourhoods", spy), \
            mock.patch.object(phases, "minimise_makespan", lambda run, warm, share, keep: (warm, run.lb, False)):
        result = solved(problem, time_limit=12)
    assert calls and calls[0] > 0  # the first search keeps time for the overhead phase
    if result.schedule.offloaded or result.schedule.recomputed:
        assert len(calls) == 1
    else:
        assert calls[-1] == 0.0 and len(calls) == 2
