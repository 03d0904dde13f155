"""Every installed solver backend on tiny problems with a derived optimum, offload, shared links,
memory caps, the memory objective, determinism and the end-to-end time limit."""

from __future__ import annotations

import json
import time

import pytest

from ppsolve.checker import check
from ppsolve.errors import NotApplicableError
from ppsolve.solvers import BACKENDS, DEFAULT_SOLVER, METHODS, SolveOptions, solve
from ppsolve.solvers.backends import load_backend
from tests.helpers import make_problem
from tests.solvers.determinism import decided_by_the_clock, deterministic_options
from tests.solvers.cases import brute_force
from tests.helpers import ROOT



def _installed() -> list[str]:
    out = []
    for name in BACKENDS:
        try:
            load_backend(name)
        except NotApplicableError:
            continue
        out.append(name)
    return out


INSTALLED = _installed()


def test_the_default_solver_is_a_backend_and_each_record_is_a_method():
    assert DEFAULT_SOLVER in BACKENDS and SolveOptions().solver == DEFAULT_SOLVER
    assert {m.name: m.description for m in METHODS} == {name: r.description for name, r in BACKENDS.items()}


def test_a_module_that_is_not_a_backend_is_named_with_what_it_lacks(monkeypatch):
    from dataclasses import replace

    from ppsolve.solvers import backends

    monkeypatch.setitem(BACKENDS, "cpsat", replace(BACKENDS["cpsat"], module="ppsolve.solvers.symmetry"))
    with pytest.raises(TypeError, match="ppsolve.solvers.symmetry is not a solver backend: it lacks why_not, "
                                        "engine, run_phase"):
        backends.load_backend("cpsat")


@pytest.fixture(params=INSTALLED)
def solver(request) -> str:
    return request.param


def solved(problem, solver, **changes):
    result = solve(problem, SolveOptions(solver=solver, **{"time_limit": 20, "threads": 2, **changes}))
    report = check(result.schedule)
    assert report.ok, [v.render() for v in report.violations]
    assert result.schedule.method.name == solver
    return result


def test_both_backends_installed():
    # pulp and highspy are dependencies: both backends are there (a CBC-only MILP still counts)
    assert INSTALLED == ["cpsat", "milp"]


# (case, optimum, derivation)
DERIVED = [
    (dict(microbatches=2), 7,
     "F = B = W = 1, 2 devices: device 1 starts at 1 (after F(0,0)) and has 6 units of work; F B F B W W reaches it"),
    (dict(microbatches=2, memory_capacity=1), 9,
     "one activation per device: F(0,1) waits for B(0,0), so microbatches form a chain ending with W(0,1) at 9"),
    (dict(microbatches=2, backward="fused"), 9,
     "fused B = 2: device 1 starts at 1 with 6 units of work, then B(0,1) (2 units) follows its last B"),
    (dict(devices=3, microbatches=4), 14,
     "device 2 starts after F(0,0), F(1,0) (t = 2) and has 4 x 3 = 12 units of work; 1F1B reaches it"),
]


@pytest.mark.parametrize("case,optimum,why", DERIVED, ids=[str(i) for i in range(len(DERIVED))])
def test_derived_optimum(solver, case, optimum, why):
    result = solved(make_problem(**case), solver)
    assert result.status == "optimal"
    assert result.schedule.makespan == optimum
    assert result.lower_bound == optimum


BRUTE_CASES = [
    dict(microbatches=2, time_forward=[1, 2], time_backward_input=[2, 1], time_backward_weight=[1, 3], time_p2p=1),
    dict(microbatches=2, memory_activation=[2, 1], memory_weight_hold=[1, 0], memory_capacity=[3, 1]),
    dict(microbatches=3, backward="fused", memory_capacity=2, time_forward=[1, 2], time_backward_input=1),
    dict(microbatches=3, backward="fused", time_p2p=2, time_forward=[2, 1], time_backward_input=[1, 2]),
]


@pytest.mark.parametrize("case", BRUTE_CASES, ids=[str(i) for i in range(len(BRUTE_CASES))])
def test_brute_force_optimum(solver, case):
    # the optimum over every pair of device orders (tests/solvers/cases.py), each timed as early as possible
    problem = make_problem(**case)
    result = solved(problem, solver)
    assert result.status == "optimal"
    assert result.schedule.makespan == pytest.approx(brute_force(problem))


OFFLOAD_2 = {"fraction": 1, "bandwidth": {"d2h": 2, "h2d": 2}}
OFFLOAD_4 = {"fraction": 1, "bandwidth": {"d2h": 4, "h2d": 4}}
# Cases where CP-SAT proves the optimum; every backend must prove the same one (makespan, then the
# least offload at it). 1F1B-like overlap needs more than one activation per device, so at capacity 1
# offload is what helps; every case but the last two offloads at its optimum.
CROSS = [
    dict(devices=2, microbatches=3, memory_capacity=1, offload=OFFLOAD_2),
    dict(devices=2, microbatches=3, memory_capacity=1, offload={**OFFLOAD_2, "links": [[0, 1]], "duplex": False}),
    dict(devices=2, microbatches=3, memory_capacity=1,
         offload={"fraction": 0.5, "bandwidth": {"d2h": 1, "h2d": 2}, "links": [[0, 1]]}),
    # three devices on one half-duplex link: 12.5, 6 offloaded
    dict(devices=3, microbatches=3, memory_capacity=1, offload={**OFFLOAD_2, "links": [[0, 1, 2]], "duplex": False}),
    # fused backward, two links (devices 0 and 1 share one): 15, 6 offloaded
    dict(devices=3, microbatches=3, backward="fused", memory_capacity=1, offload={**OFFLOAD_2, "links": [[0, 1], [2]]}),
    # transfers a quarter of a compute op: 13, 4 offloaded
    dict(devices=2, microbatches=4, memory_capacity=1, offload=OFFLOAD_4),
    # 14.25, 8 offloaded (the lower bound is 14: the MILP needs some 10 to 30 CPU seconds to prove it)
    pytest.param(dict(devices=3, microbatches=4, memory_capacity=1, offload=OFFLOAD_4), marks=pytest.mark.long),
    dict(devices=3, microbatches=3, memory_capacity=[2, 1.5, 1], memory_activation=1, memory_weight_hold=0.5),
    dict(devices=2, microbatches=3, chunks=2, placement="vshape", memory_capacity=2, time_p2p=1),
]


def continuous(solver: str) -> bool:
    """Whether the backend's offloaded amounts are continuous (else on a grid: its proof is for the grid)."""
    return BACKENDS[solver].continuous_amounts


def model_optimal(result) -> bool:
    """Optimal, or optimal on the backend's grid of offloaded amounts (its model's bound reached)."""
    bound = result.model_bound
    return result.status == "optimal" or (bound is not None and result.schedule.makespan <= bound + 1e-9)


@pytest.mark.parametrize("case", CROSS, ids=[str(i) for i in range(len(CROSS))])
@pytest.mark.slow
def test_same_optimum_as_cpsat(solver, case):
    problem = make_problem(**case)
    reference = solved(problem, "cpsat")
    assert model_optimal(reference)
    result = reference if solver == "cpsat" else solved(problem, solver, time_limit=120)
    assert model_optimal(result)
    if not problem.can_offload or continuous(solver) == continuous("cpsat"):
        assert result.schedule.makespan == pytest.approx(reference.schedule.makespan)
        # and the least overhead at that makespan (phase two) agrees too
        assert result.schedule.offloaded == pytest.approx(reference.schedule.offloaded)
    elif continuous(solver):  # continuous amounts: at most CP-SAT's grid optimum
        assert result.schedule.makespan <= reference.schedule.makespan + 1e-9
    else:  # whole shares only: at least CP-SAT's grid optimum (the grid holds the whole shares)
        assert result.schedule.makespan >= reference.schedule.makespan - 1e-9


def test_offload_used_only_when_it_helps(solver):
    problem = make_problem(devices=2, microbatches=3, memory_capacity=1, offload=OFFLOAD_2)
    with_off = solved(problem, solver)
    without = solved(problem, solver, offload=False)
    assert without.status == "optimal" and model_optimal(with_off)
    assert with_off.schedule.makespan < without.schedule.makespan
    assert with_off.schedule.offloaded > 0
    # the least amount at that makespan, proven only where amounts are continuous
    assert with_off.schedule.method.extra["least_overhead"] == ("optimal" if continuous(solver) else "feasible")
    assert "least_overhead" not in without.schedule.method.extra  # no overhead phase without a lever
    # unbounded memory: transfers can only cost, so nothing moves
    assert solved(make_problem(devices=2, microbatches=3, offload=OFFLOAD_2), solver).schedule.offloaded == 0


def test_memory_objective(solver):
    # 3 devices, 4 microbatches, F = B = W = 1: at the fastest makespan (14) device 0 holds 3
    # activations (1F1B's warm-up); without a limit one activation per device is enough.
    problem = make_problem(devices=3, microbatches=4)
    tight = solved(problem, solver, objective="memory", makespan_limit=14)
    assert tight.schedule.makespan <= 14 and max(tight.schedule.peak_memory) == 3
    assert tight.status == "optimal"
    free = solved(problem, solver, objective="memory")
    assert free.schedule.peak_memory == [1, 1, 1] and free.status == "optimal"


def test_never_worse_than_warm_start(solver):
    problem = make_problem(devices=4, microbatches=8, memory_capacity=2)
    result = solved(problem, solver, time_limit=3)
    assert result.warm_start is not None
    assert result.schedule.makespan <= result.warm_start.makespan


@pytest.mark.slow
def test_threads_1_is_identical(solver):
    # the example (4 x 8, offload, cap 2) three times under deterministic limits only: the same file
    # apart from method.seconds
    from ppsolve.problem import load_problem

    problem = load_problem(ROOT / "instances/example.json")
    runs = [solve(problem, deterministic_options(solver, seed=3)) for _ in range(3)]
    assert not any(decided_by_the_clock(run) for run in runs)
    texts = []
    for run in runs:
        data = run.schedule.to_dict()
        data["method"].pop("seconds")
        texts.append(json.dumps(data, sort_keys=True))
    assert texts[0] == texts[1] == texts[2]


@pytest.mark.parametrize("threads", [None, 1], ids=["threads-all", "threads-1"])
def test_time_limit_is_the_whole_run(solver, threads):
    # 16 x 32 with offload on shared links and a cap; no proof within a second, so the limit binds.
    # With --threads 1 the wall clock is the hard guard as well.
    problem_path = ROOT / "instances/suite/lin-d16-m32-split-cap1_3-k0.5-shared4.json"
    from ppsolve.problem import load_problem

    problem = load_problem(problem_path)
    began = time.monotonic()
    result = solve(problem, SolveOptions(solver=solver, time_limit=4, threads=threads))
    took = time.monotonic() - began
    assert check(result.schedule).ok
    assert took <= 4 * 1.1 + 1 + 3  # the promise is 10% + 1 s; 3 s more for this shared test machine
