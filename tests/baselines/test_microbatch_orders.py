"""Baselines on per-microbatch costs (contract version 4), and the same schedules in other microbatch orders."""

from __future__ import annotations

import random

import pytest

from ppsolve.baselines import METHODS, get_baseline, microbatch_order
from ppsolve.baselines.microbatch_order import (ORDERS, critical_costs, in_order, longest_first, search_budget,
                                                shortest_first)
from ppsolve.baselines.families.onef1b import onef1b_orders
from ppsolve.errors import NotApplicableError
from ppsolve.memory import peak_memory
from ppsolve.methods import INFEASIBLE, SKIPPED, RunOptions, all_methods, get_method, run_and_check
from ppsolve.problem import load_problem
from ppsolve.simulator import simulate
from tests.baselines.problems import make_problem, with_multipliers
from tests.helpers import ROOT

BASELINES = [m.name for m in METHODS]
OFFLOAD = {"fraction": 0.5, "bandwidth": {"d2h": 2, "h2d": 2}}
EXAMPLE = ROOT / "instances" / "per-microbatch" / "example.json"


def multipliers(m: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [round(rng.uniform(0.3, 2.0), 3) for _ in range(m)]


def varied(placement: str, backward: str, capacity=None, offload=None, recompute=None, seed=0, m=8):
    base = make_problem(4, m, placement, backward, costs="uneven", capacity=capacity, offload=offload)
    if recompute is not None:
        base = base.replace(recompute=recompute)
    return with_multipliers(base, multipliers(m, seed))


# every placement and backward; caps that some schedules keep and others break; offload; recompute
CASES = {f"{placement}-{backward}": varied(placement, backward)
         for placement in ("linear", "interleaved", "vshape") for backward in ("split", "fused")}
CASES.update({  # caps at 0.6 to 0.9 of interleaved 1F1B's (zb-v's) peak: some schedules fit, others need levers
    "linear-split-cap": varied("linear", "split", capacity=11.3, seed=1),
    "interleaved-split-cap": varied("interleaved", "split", capacity=18.4, seed=2),
    "vshape-split-cap": varied("vshape", "split", capacity=10.05, seed=3),
    "linear-split-offload": varied("linear", "split", capacity=6.58, offload=OFFLOAD, seed=4),
    "interleaved-split-offload": varied("interleaved", "split", capacity=19.23, offload=OFFLOAD, seed=5),
    "linear-fused-recompute": varied("linear", "fused", capacity=7.72, recompute={"keep": 0.2}, seed=6),
    "interleaved-split-recompute": varied("interleaved", "split", capacity=10.98, recompute={"keep": 0.2}, seed=7),
    "example": load_problem(EXAMPLE),
})


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_baseline_on_per_microbatch_costs_passes_the_checker(case):
    problem = CASES[case]
    assert problem.per_microbatch
    built = []
    for method in METHODS:
        outcome = run_and_check(method, problem, RunOptions())
        assert outcome.status != "error", (method.name, outcome.note)
        if outcome.schedule is not None:
            assert outcome.valid, (method.name, outcome.note)
            built.append(outcome.schedule)
        else:
            assert outcome.status in (SKIPPED, INFEASIBLE), (method.name, outcome.status)
    assert len(built) >= 2
    if "offload" in case:  # the levers move per-microbatch amounts
        assert any(s.offloaded > 0 for s in built)
    if "recompute" in case:
        assert any(s.recomputed > 0 for s in built)


@pytest.mark.parametrize("case", ["linear-split", "interleaved-split-offload", "linear-fused-recompute"])
def test_every_baseline_in_every_order_passes_the_checker(case, monkeypatch):
    monkeypatch.setattr(microbatch_order, "SEARCH_BUDGET", 16)  # the search's builds: a short search will do
    problem = CASES[case]
    for method in METHODS:
        for order in ORDERS:
            outcome = run_and_check(get_baseline(f"{method.name}@{order}"), problem, RunOptions())
            assert outcome.status != "error", (method.name, order, outcome.note)
            if outcome.schedule is not None:
                assert outcome.valid, (method.name, order, outcome.note)
                assert outcome.schedule.method.name == f"{method.name}@{order}"


def test_data_order_one_f_one_b_is_timed_on_each_microbatch_s_costs():
    # an independent timing: 1F1B's ops one by one on a linear split problem, each on its own microbatch's costs
    problem = CASES["linear-split"]
    schedule = get_method("1f1b").run(problem, RunOptions())
    by_op = {op.op: op for op in schedule.ops}
    for op in schedule.ops:
        assert op.end - op.start == pytest.approx(problem.duration(op.kind, op.stage, op.microbatch))
        if op.kind.name == "F" and op.stage > 0:
            before = by_op[op.op._replace(stage=op.stage - 1)]
            assert op.start >= before.end + problem.p2p_times[op.microbatch] - 1e-9


def test_a_sorted_order_equals_the_renamed_orders_simulated_on_the_problem():
    """Renaming after building on the renumbered problem = simulating the renamed orders on the problem itself."""
    problem = CASES["linear-split"]
    for make in (longest_first, shortest_first):
        permutation = make(problem)
        schedule = in_order(get_method("1f1b"), problem, permutation, RunOptions())
        renamed = [[op._replace(microbatch=permutation[op.microbatch]) for op in order]
                   for order in onef1b_orders(problem)]
        ops = simulate(problem, renamed)
        assert sorted(schedule.ops) == sorted(ops)
        assert schedule.peak_memory == peak_memory(problem, ops)


def test_the_sorts_follow_the_critical_cost():
    problem = CASES["linear-fused"]
    costs = critical_costs(problem)
    longest = longest_first(problem)
    assert [costs[j] for j in longest] == sorted(costs, reverse=True)
    assert shortest_first(problem) == sorted(range(problem.microbatches), key=lambda j: (costs[j], j))
    schedule = get_method("gpipe@shortest-first").run(problem, RunOptions())
    assert schedule.method.params["microbatch_order"] == shortest_first(problem)
    first = min((op for op in schedule.ops if op.kind.name == "F" and op.stage == 0), key=lambda op: op.start)
    assert first.microbatch == shortest_first(problem)[0]


@pytest.mark.parametrize("placement, backward", [("linear", "split"), ("interleaved", "fused"), ("vshape", "split")])
def test_permuting_the_microbatches_of_a_uniform_problem_changes_nothing(placement, backward):
    for costs in ("uniform", "uneven"):
        problem = make_problem(4, 8, placement, backward, costs, capacity=None)
        assert not problem.per_microbatch
        rng = random.Random(1)
        for method in METHODS:
            if method.why_not(problem) is not None:
                continue
            plain = method.run(problem, RunOptions())
            for _ in range(2):
                permutation = rng.sample(range(problem.microbatches), problem.microbatches)
                other = in_order(method, problem, permutation, RunOptions())
                assert other.makespan == plain.makespan, method.name
                assert other.peak_memory == plain.peak_memory, method.name
            for order in ORDERS:  # every order of a uniform problem is data order: the same ops
                assert get_baseline(f"{method.name}@{order}").run(problem, RunOptions()).ops == plain.ops


@pytest.mark.parametrize("seed", range(6))
def test_the_order_search_is_never_worse_than_data_order_that_fits(seed):
    placement, backward = [("linear", "split"), ("linear", "fused"), ("interleaved", "split")][seed % 3]
    problem = varied(placement, backward, seed=10 + seed, m=6)
    capped = problem.replace(capacity=[1.2 * p for p in get_method("1f1b" if placement == "linear" else
                                                                    "interleaved-1f1b")
                                       .run(problem, RunOptions()).peak_memory])
    for method in ("1f1b", "gpipe", "zb-h1", "interleaved-1f1b", "greedy"):
        base = get_method(method)
        if base.why_not(problem) is not None:
            continue
        for instance in (problem, capped):
            data = run_and_check(base, instance, RunOptions())
            found = run_and_check(get_method(f"{method}@search"), instance, RunOptions(seed=seed))
            if data.schedule is None:
                continue
            assert found.valid, found.note
            assert found.schedule.makespan <= data.schedule.makespan + 1e-9, method
            assert found.schedule.method.params["orders_tried"] <= search_budget(instance)


def test_the_search_beats_data_order_on_the_example():
    problem = load_problem(EXAMPLE).replace(capacity=None)
    data = get_method("1f1b").run(problem, RunOptions())
    found = get_method("1f1b@search").run(problem, RunOptions())
    assert found.makespan < data.makespan
    assert found.method.params["microbatch_order"] != list(range(problem.microbatches))


def test_order_names_in_the_registry():
    assert get_method("1F1B@Longest-First").name == "1f1b@longest-first"
    assert get_method("zb-h1@search").family == "baseline"
    assert not get_method("zb-h1@search").published
    assert not any("@" in m.name for m in all_methods())  # made on demand, not listed
    with pytest.raises(NotApplicableError, match="orders: longest-first, shortest-first, search"):
        get_method("1f1b@sideways")
    with pytest.raises(NotApplicableError, match="unknown method"):
        get_method("nothing@longest-first")
    problem = make_problem(4, 8, "vshape", "split")
    assert get_method("1f1b@search").why_not(problem) == get_method("1f1b").why_not(problem)


def test_the_cli_builds_an_order(tmp_path, capsys):
    from ppsolve.cli import main

    out = tmp_path / "s.json"
    assert main(["baseline", str(EXAMPLE), "--method", "1f1b-offload@shortest-first", "-o", str(out)]) == 0
    assert "1f1b-offload@shortest-first" in capsys.readouterr().out


def test_the_warm_start_and_the_advice_try_the_orders():
    from ppsolve.solvers.warm_start import best_warm_start
    from ppsolve.studies.advice import Advice, compare_orders, compare_published

    problem = load_problem(EXAMPLE).replace(capacity=None)
    found = []
    warm = best_warm_start(problem, sink=found)
    names = {s.method.name for s in found}
    assert {"1f1b@longest-first", "1f1b@shortest-first"} <= names and any(n.endswith("@search") for n in names)
    assert warm.makespan <= min(s.makespan for s in found)
    best, _ = compare_published(problem)
    order = compare_orders(problem, best)
    assert "@" in order.name and order.makespan <= best.makespan
    assert compare_orders(make_problem(4, 8, "linear", "split"), best) is None
    advice = Advice(makespan=order.makespan, best=best, refused=(), gap="", offload="", unbounded_makespan=None,
                    least_cap=None, least_cap_by=None, least_cap_command=None, best_order=order)
    assert (f"this batch in data order: {best.name}, {best.makespan:g}; best published order: {order.name}, "
            f"{order.makespan:g} (this solve is as fast as it)") in advice.lines()
    assert advice.to_dict()["best_published_order"]["name"] == order.name
