"""The MILP decides keep / offload / recompute per (stage, microbatch), with partial offload amounts:
its proven optimum equals an independent one (a brute force over recompute choices and device orders,
timed by the simulator, memory by ``ppsolve.memory``), and its schedules pass the checker."""

from __future__ import annotations

import itertools
import random
from unittest import mock

import pytest

from ppsolve.bounds import MakespanBound
from ppsolve.checker import check
from ppsolve.errors import DeadlockError
from ppsolve.memory import peak_memory
from ppsolve.ops import Op, OpKind
from ppsolve.schedule import ScheduledOp, make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.api import Phase, PhaseTask, Status
from ppsolve.solvers.budget import Budget
from ppsolve.solvers.milp import backend
from ppsolve.solvers.progress import Progress
from ppsolve.solvers.scaling import build_scaling
from ppsolve.baselines.common import with_recompute
from tests.helpers import make_problem, schedule_from_orders, serial_orders


_F, _B, _W, _R = OpKind.F, OpKind.B, OpKind.W, OpKind.R


def _milp(problem, time_limit: float = 30):
    """The MILP's answer with the foundation's bound switched off (its cut cannot steer the search):
    what it proves is the model's own claim."""
    with mock.patch("ppsolve.solvers.phases.makespan_lower_bound", lambda p: MakespanBound(0.0, (), 0.0)):
        return solve(problem, SolveOptions(solver="milp", time_limit=time_limit, threads=1))


# ----- the independent optimum -----

def _chains(problem, device, recomputed):
    """Each microbatch's ops of ``device`` in the order rules 2-4 and 9 force on them."""
    chains = []
    for s in problem.stages_of_device[device]:
        for j in range(problem.microbatches):
            chain = [Op(_F, s, j)] + ([Op(_R, s, j)] if (s, j) in recomputed else []) + [Op(_B, s, j)]
            chains.append(chain + ([Op(_W, s, j)] if problem.split_backward else []))
    return chains


def _interleavings(chains):
    """Every merge of the chains that keeps each chain's order."""
    if not any(chains):
        yield []
        return
    for i, chain in enumerate(chains):
        if chain:
            rest = chains[:i] + [chain[1:]] + chains[i + 1:]
            for tail in _interleavings(rest):
                yield [chain[0]] + tail


def _fits(problem, device, order) -> bool:
    """The device's peak under ``order`` (ops back to back: without transfers only the order matters)."""
    ops = []
    for t, op in enumerate(order):
        ops.append(ScheduledOp(op.kind, op.stage, op.microbatch, device, float(t), float(t + 1)))
    cap = problem.capacity[device]
    return cap is None or peak_memory(problem, ops)[device] <= cap + 1e-9


def _load(problem, order) -> float:
    return sum(problem.duration(op.kind, op.stage) for op in order)


def _needed(problem, device, order) -> bool:
    """Whether every R of ``order`` is needed: without any one of them the device breaks its cap
    (else that order is dominated: dropping an op from a device list delays nothing)."""
    return all(not _fits(problem, device, [o for o in order if o != op]) for op in order if op.kind is _R)


def _first_in_order(order) -> bool:
    """Microbatches are identical: relabelled, any schedule has F(0, 0) before F(0, 1) (a microbatch's
    choices go with it)."""
    firsts = [op.microbatch for op in order if op.kind is _F and op.stage == 0]
    return firsts == sorted(firsts)


def brute_force(problem) -> tuple[float, float] | None:
    """(least makespan, least recompute time at it) over every recompute choice and every device
    order (each device's memory checked on its own), timed as soon as possible by the simulator;
    None when nothing fits."""
    keys = [(s, j) for s in range(problem.num_stages) for j in range(problem.microbatches)
            if problem.recompute_saving(s) > 0]
    best = None
    per_device = []
    for d in range(problem.devices):
        mine = [k for k in keys if problem.placement[k[0]] == d]
        orders = []
        for n in range(len(mine) + 1):
            for chosen in itertools.combinations(mine, n):
                orders += [o for o in _interleavings(_chains(problem, d, set(chosen)))
                           if _first_in_order(o) and _fits(problem, d, o) and _needed(problem, d, o)]
        per_device.append(sorted(orders, key=lambda o: _load(problem, o)))
    for combo in itertools.product(*per_device):
        if best is not None and max(_load(problem, o) for o in combo) > best[0] + 1e-9:
            continue
        try:
            ops = simulate(problem, [list(o) for o in combo])
        except DeadlockError:
            continue
        value = (max(op.end for op in ops), sum(op.end - op.start for op in ops if op.kind is _R))
        if best is None or value < (best[0] - 1e-9, best[1] - 1e-9):
            assert check(make_schedule(problem, ops, "brute")).ok
            best = value
    return best


def _least_overhead(problem, makespan: float):
    """The MILP's OVERHEAD phase at ``makespan``: (its answer, the scaling)."""
    scaling = build_scaling(problem)
    budget = Budget(60, False)
    task = PhaseTask(problem, scaling, Phase.OVERHEAD, SolveOptions(solver="milp", threads=1), budget,
                     budget.search(0.5), Progress(budget, "milp", True, None), makespan_cap=scaling.time(makespan))
    return backend.run_phase(task), scaling


def _random_problem(rng: random.Random):
    split = rng.random() < 0.4
    activation = [rng.choice([1, 2]) for _ in range(2)]
    keep = [rng.choice([0, 0.5]) * a for a in activation]
    data = dict(devices=2, microbatches=2,
                time_forward=[rng.randint(1, 3) for _ in range(2)],
                time_backward_input=[rng.randint(1, 3) for _ in range(2)],
                time_backward_weight=[rng.randint(1, 2) for _ in range(2)],
                time_p2p=rng.choice([0, 0, 1]),
                memory_activation=activation,
                memory_capacity=[a * rng.choice([1, 1.5, 2]) for a in activation],
                recompute={"keep": keep, "time": [rng.randint(1, 3) for _ in range(2)]})
    if not split:
        data["backward"] = "fused"
    return make_problem(**data)


CASES = 44


@pytest.mark.slow
def test_recompute_optimum_equals_brute_force():
    # the least makespan (solve), then at it the least recompute time (the OVERHEAD phase)
    rng = random.Random(31)
    compared = recomputing = 0
    for _ in range(CASES):
        problem = _random_problem(rng)
        expected = brute_force(problem)
        if expected is None:
            continue
        makespan, recompute = expected
        result = _milp(problem)
        assert result.status == "optimal", problem.to_dict()
        assert result.schedule.makespan == pytest.approx(makespan), problem.to_dict()
        assert check(result.schedule).ok
        answer, scaling = _least_overhead(problem, makespan)
        assert answer.status is Status.OPTIMAL, problem.to_dict()
        ops = answer.solutions[-1]
        assert check(make_schedule(problem, ops, "milp")).ok
        assert sum(op.end - op.start for op in ops if op.kind is _R) == pytest.approx(recompute), problem.to_dict()
        assert answer.bound == pytest.approx(scaling.overhead(scaling.time(recompute), 0))
        compared += 1
        recomputing += recompute > 0
    assert compared >= 40 and recomputing >= 10


# ----- offloads of any amount, beside recompute -----

LINK = {"fraction": 1, "bandwidth": {"d2h": 0.5, "h2d": 0.5}}


def _hint(problem, offloaded: dict, recomputed: set):
    """A serial schedule that offloads ``offloaded`` ((s, j) -> amount) and recomputes ``recomputed``."""
    orders = [[op for op in order if not op.kind.is_transfer or (op.stage, op.microbatch) in offloaded]
              for order in serial_orders(problem, offload=True)]
    return schedule_from_orders(problem, with_recompute(orders, recomputed), amounts=offloaded)


def test_starting_solution_with_recompute_and_partial_amounts_is_a_solution_of_the_model():
    # the warm start may recompute some (s, j) and move part of others' share: every variable's
    # value sits in its bounds and every row holds (HiGHS drops a start that breaks one)
    problem = make_problem(devices=2, microbatches=3, memory_capacity=1.5, offload=LINK, recompute={"keep": 0.25})
    hint = _hint(problem, {(0, 0): 0.5, (1, 1): 0.25}, {(0, 1), (1, 2)})
    assert check(hint).ok and hint.recomputed and hint.offloaded == pytest.approx(0.75)
    scaling = build_scaling(problem)
    budget = Budget(60, False)
    task = PhaseTask(problem, scaling, Phase.MAKESPAN, SolveOptions(solver="milp"), budget, budget.search(0.5),
                     Progress(budget, "milp", True, None), hint=hint)
    m = backend.build_model(task)
    assert m.v.continuous and m.v.recomputes and m.v.transfers
    values = backend.start_values(m, hint)
    assert values
    for var in m.v.lp.variables():
        var.varValue = values[var.name]
        assert var.valid(1e-9), (var.name, values[var.name], var.lowBound, var.upBound)
    assert not [c.name for c in m.v.lp.constraints() if not c.valid(1e-9)]
    assert values["makespan"] == pytest.approx(scaling.time_scale * hint.makespan)


def test_offload_and_recompute_together_lie_between_no_cap_and_recompute_alone():
    # with a link beside recompute the optimum is at most recompute alone's (brute force) and at
    # least that of no cap at all (brute force): partial amounts have no finite brute force
    rng = random.Random(7)
    compared = below = 0
    for _ in range(8):
        problem = _random_problem(rng)
        alone = brute_force(problem)
        if alone is None:
            continue
        free = brute_force(problem.replace(capacity=None))
        both = problem.replace(offload=LINK)
        result = _milp(both)
        assert result.status == "optimal" and check(result.schedule).ok
        assert free[0] - 1e-9 <= result.schedule.makespan <= alone[0] + 1e-9, both.to_dict()
        compared += 1
        below += result.schedule.makespan < alone[0] - 1e-9
    assert compared >= 6 and below >= 1


def test_partial_amounts_never_lose_to_whole_shares():
    # every schedule that moves whole shares is one of the model's: its optimum is at most CP-SAT's
    # proven optimum over whole shares (equal once CP-SAT moves any amount too), on offload problems;
    # with seed 3 the first problem is one where moving part of a share is faster (14.25 < 14.5)
    rng = random.Random(3)
    compared = 0
    for _ in range(8):
        problem = _random_problem(rng).replace(recompute=None, offload={
            "fraction": rng.choice([0.5, 1]), "bandwidth": {"d2h": rng.choice([0.5, 1, 2]), "h2d": rng.choice([1, 2])}})
        reference = solve(problem, SolveOptions(time_limit=20, threads=1))
        bound = reference.model_bound  # CP-SAT's own proof, on its grid of amounts
        if reference.status != "optimal" and (bound is None or reference.schedule.makespan > bound + 1e-9):
            continue
        result = _milp(problem)
        assert result.status == "optimal" and check(result.schedule).ok, problem.to_dict()
        assert result.schedule.makespan <= reference.schedule.makespan + 1e-9, problem.to_dict()
        compared += 1
    assert compared >= 6


# Seeds of tests/solvers/test_solver_recompute.py's tiny problems whose independent optimum CBC proves in about
# a second (offload 22: 15.5, a partial amount); that file (the CP-SAT side's) holds the oracle: a MILP of
# its own over continuous times and amounts, sharing nothing with this backend but the dependency table.
ORACLE_CASES = [("offload", seed) for seed in (1, 2, 3, 4, 9, 12, 13, 22, 25, 28, 31)] + \
    [("both", seed) for seed in (2, 4, 9)]


@pytest.mark.slow
def test_same_optimum_as_the_independent_continuous_model():
    oracle = pytest.importorskip("tests.solvers.test_solver_recompute")
    for lever, seed in ORACLE_CASES:
        problem = oracle.tiny(seed, lever)
        expected = oracle.independent_optimum(problem, 30)
        assert expected is not None, (lever, seed)
        result = _milp(problem)
        assert result.status == "optimal" and check(result.schedule).ok, (lever, seed)
        assert result.schedule.makespan == pytest.approx(expected), (lever, seed)
