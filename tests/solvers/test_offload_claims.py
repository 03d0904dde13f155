"""Both backends' claims on random small problems with offload, against an independent exact model that may
move any amount (tests/solvers/test_solver_recompute.py's MILP over continuous times and amounts, solved by
CBC; it shares nothing with the solvers but the problem and the dependency table).

Whenever a backend writes "optimal", its makespan is the independent optimum; whenever it writes
"least_overhead": "optimal", no schedule as short offloads less; every ``lower_bound`` it writes (and the
MILP's ``model_makespan_bound``, a bound of a model of the whole contract) is at most the optimum; every
schedule is valid and no shorter than the optimum. ``-s`` prints how many claims were checked.
"""

from __future__ import annotations

import os

import pulp
import pytest

from ppsolve.checker import check
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.milp import highs_process
from tests.solvers.test_solver_recompute import _Milp, independent_optimum, tiny

ORACLE_SECONDS = 120.0  # CBC proves these in about a second; the limit only ends a runaway
TOL = 1e-5
BACKENDS = ("cpsat", "milp") if highs_process.available() else ("cpsat",)


def offload_problem(seed: int):
    """2 devices x 2 microbatches, split or fused, uneven times, p2p 0 or 1, a cap of 1, 1.5 or 2
    activations, an offload share of half or all, bandwidths 0.5 to 2 each way."""
    return tiny(seed, "offload", microbatches=(2,))


def least_offload(problem, makespan: float, seconds: float = ORACLE_SECONDS) -> float | None:
    """The least total amount offloaded by any schedule no longer than ``makespan`` (None: not proven)."""
    model = _Milp(problem)
    model.lp += model.C <= makespan + TOL / 10
    model.lp.setObjective(pulp.lpSum(a for _, a in model.amount.values()))
    status = model.lp.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=seconds))
    if pulp.LpStatus[status] != "Optimal" or model.lp.sol_status != pulp.LpSolutionOptimal:
        return None
    return pulp.value(model.lp.objective) or 0.0


def checked_claims(problem, makespans: dict | None = None) -> dict[str, int] | None:
    """Each claim of each backend on ``problem`` checked (AssertionError on a wrong one); the counts, by
    kind of claim; None when the independent model proved nothing in time. ``makespans`` gets each
    backend's makespan."""
    best = independent_optimum(problem, ORACLE_SECONDS)
    if best is None:
        return None
    counts = {}
    makespans = {} if makespans is None else makespans

    def count(kind: str) -> None:
        counts[kind] = counts.get(kind, 0) + 1

    for backend in BACKENDS:
        result = solve(problem, SolveOptions(solver=backend, time_limit=6, threads=1))
        schedule, method = result.schedule, result.schedule.method
        makespans[backend] = schedule.makespan
        where = (backend, problem.to_dict())
        assert check(schedule).ok, where
        assert schedule.makespan >= best - TOL, where  # no valid schedule beats the optimum
        assert method.lower_bound is not None and method.lower_bound <= best + TOL, (method.lower_bound, best, where)
        count(f"{backend} lower bound")
        model_bound = method.extra.get("model_makespan_bound")
        if backend == "milp" and model_bound is not None:
            assert model_bound <= best + TOL, (model_bound, best, where)
            count("milp model bound")
        if method.status == "optimal":
            assert schedule.makespan == pytest.approx(best, abs=TOL), (schedule.makespan, best, where)
            count(f"{backend} optimal")
        if method.extra.get("least_overhead") == "optimal":
            least = least_offload(problem, schedule.makespan)
            assert least is not None, where
            assert schedule.offloaded <= least + TOL, (schedule.offloaded, least, where)
            count(f"{backend} least offload")
    return counts


def _tally(seeds, wanted: int) -> tuple[dict[str, int], int, list[int]]:
    """Claims checked over ``seeds`` until ``wanted`` problems are verified: (counts, verified, unproven)."""
    total, verified, unproven = {}, 0, []
    for seed in seeds:
        if verified == wanted:
            break
        counts = checked_claims(offload_problem(seed))
        if counts is None:
            unproven.append(seed)
            continue
        verified += 1
        for kind, n in counts.items():
            total[kind] = total.get(kind, 0) + n
    return total, verified, unproven


def test_the_smallest_partial_offload_case_on_both_backends():
    # issue 34's case: whole shares give 18, half of two activations 15; both backends find 15, and a
    # claim of optimality is the true optimum (the MILP proves it; CP-SAT says "optimal" only if it is)
    from ppsolve.problem import problem_from_dict

    problem = problem_from_dict({"format": "ppsolve/problem@1", "devices": 2, "microbatches": 2,
                                 "time": {"forward": 2, "backward_input": 2, "backward_weight": 2},
                                 "memory": {"activation": 1, "capacity": 1.5},
                                 "offload": {"bandwidth": {"d2h": 0.5, "h2d": 0.5}}})
    assert independent_optimum(problem) == pytest.approx(15)
    makespans = {}
    counts = checked_claims(problem, makespans)
    assert counts is not None
    assert makespans == {backend: pytest.approx(15) for backend in BACKENDS}
    if "milp" in BACKENDS:
        assert counts.get("milp optimal") == 1


def test_claims_hold_on_a_few_random_problems():
    total, verified, unproven = _tally(range(12), 6)
    print(f"\n{verified} problems, claims checked: {total}, unproven by the independent model: {unproven}")
    _assert_enough_compared(total, verified, 6)


def _assert_enough_compared(total: dict[str, int], verified: int, wanted: int) -> None:
    """The independent model judged ``wanted`` problems, every backend's bound on each, and some optimum."""
    assert verified == wanted, f"the independent model proved only {verified} of {wanted} problems"
    for backend in BACKENDS:
        assert total.get(f"{backend} lower bound") == verified
    assert sum(n for kind, n in total.items() if kind.endswith(" optimal")) >= 1


# how many random problems the slow run checks: 30 in CI (about 1 minute); the full campaign of 200
# (914 claims, none wrong) is PPSOLVE_CLAIM_PROBLEMS=200 python -m pytest -m long -s tests/solvers/test_offload_claims.py
CLAIM_PROBLEMS = int(os.environ.get("PPSOLVE_CLAIM_PROBLEMS", "20"))


@pytest.mark.long
def test_claims_hold_on_random_problems():
    total, verified, unproven = _tally(range(6, 6 + 2 * CLAIM_PROBLEMS), CLAIM_PROBLEMS)
    print(f"\n{verified} problems, claims checked: {total}, unproven by the independent model: {unproven}")
    _assert_enough_compared(total, verified, CLAIM_PROBLEMS)
