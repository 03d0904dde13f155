"""Warm starts come from the baselines (``ppsolve.baselines.METHODS``) and plans of our own."""

from __future__ import annotations

import random

import pytest

from ppsolve import baselines, methods
from ppsolve.baselines.common import with_recompute
from ppsolve.baselines.engines.offload_fit import fit_by_offload, link_first
from ppsolve.baselines.families.recompute import fit_by_recompute
from ppsolve.checker import check
from ppsolve.errors import InputError, NotApplicableError, PpsolveError
from ppsolve.methods import Method
from ppsolve.ops import OpKind
from ppsolve.problem import load_problem
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.settings import PhaseSettings, Settings
from ppsolve.solvers.warm_start import best_warm_start, fifo_relabel, given_warm_start, shortest
from ppsolve.solvers.warm_start.plans import (fit_by_both, fit_link_first, is_mixed_plan, limited_1f1b_orders,
                                              list_plan, mixed_plan_name, serial_orders)
from tests.helpers import make_problem
from tests.helpers import ROOT


def _fake(name, build, why_not=lambda p: None):
    return Method(name=name, family="baseline", description="test double", requirements="-",
                  why_not=why_not, build=build)


@pytest.fixture
def fake_baselines(monkeypatch):
    problem = make_problem(devices=3, microbatches=4, memory_capacity=2)
    good = make_schedule(problem, simulate(problem, list_plan(problem)), "fake-good")

    def too_big(p, o):  # ignores the capacity: must be rejected by the checker
        free = p.replace(capacity=None)
        ops = simulate(free, [[op for op in order] for order in list_plan(free, "FBW")])
        return make_schedule(p, ops, "fake-too-big")

    def broken(p, o):
        raise PpsolveError("cannot")

    fakes = (_fake("fake-good", lambda p, o: good), _fake("fake-too-big", too_big),
             _fake("fake-broken", broken), _fake("fake-na", broken, why_not=lambda p: "never applies"))
    monkeypatch.setattr(baselines, "METHODS", baselines.METHODS + fakes)
    return problem, good


def test_auto_keeps_the_best_acceptable_baseline(fake_baselines):
    problem, good = fake_baselines
    warm = best_warm_start(problem, "auto")
    assert check(warm).ok
    assert warm.makespan <= good.makespan
    assert not check(baselines.get_baseline("fake-too-big").run(problem)).ok


def test_named_warm_start(fake_baselines):
    problem, good = fake_baselines
    assert best_warm_start(problem, "fake-good").method.name == "fake-good"
    with pytest.raises(NotApplicableError):
        best_warm_start(problem, "no-such-method")
    with pytest.raises(PpsolveError):
        best_warm_start(problem, "fake-na")
    result = solve(problem, SolveOptions(time_limit=5, warm_start="fake-good"))
    assert check(result.schedule).ok and result.schedule.makespan <= good.makespan


def test_own_warm_start_without_baselines():
    # Serial orders always fit the least capacity: a warm start exists even with no baseline installed.
    problem = make_problem(devices=3, microbatches=3, chunks=2, placement="vshape", memory_capacity=2)
    warm = best_warm_start(problem, "auto")
    assert warm is not None and check(warm).ok
    serial = make_schedule(problem, simulate(problem, serial_orders(problem)), "serial")
    assert warm.makespan <= serial.makespan
    assert best_warm_start(problem, "none") is None


def test_a_counted_warm_start_tries_only_methods_that_apply():
    # --threads 1 gives the warm start a number of tries fixed by the problem's size. Methods that do
    # not apply (the linear ones, on a V-shape) must not use them up: with six tries, a V-shape
    # problem still gets its V-shape schedules, not the serial plan (3650 against 995 before).
    problem = make_problem(devices=8, microbatches=32, chunks=2, placement="vshape")
    applicable = [m for m in methods.all_methods("baseline") if m.why_not(problem) is None]
    assert len(applicable) < len(methods.all_methods("baseline"))
    unlimited = best_warm_start(problem, "auto")
    counted = best_warm_start(problem, "auto", max_tries=6)
    assert counted.makespan == unlimited.makespan
    assert not counted.method.name.startswith("warm:serial")


def _realistic_like(devices, microbatches, chunks, backward, capacity, bandwidth, placement="interleaved"):
    # the shape of the Llama-8B-like case scaled to F = 1: a heavier last stage whose logits are not
    # recomputed (keep 4.2 of 7.4), 0.25 kept of 4.5 elsewhere, an offload link of 0.8 to 20 per unit time
    S = devices * chunks
    heavy = [1.0] * (S - 1) + [1.2]
    return make_problem(devices=devices, microbatches=microbatches, chunks=chunks,
                        placement="linear" if chunks == 1 else placement, backward=backward,
                        time_forward=heavy, time_backward_input=[1.25 * h for h in heavy],
                        time_backward_weight=[0.75 * h for h in heavy], time_p2p=0.004,
                        memory_activation=[4.5] * (S - 1) + [7.4], memory_weight_hold=[4.2] * (S - 1) + [3.2],
                        memory_capacity=capacity, offload={"bandwidth": {"d2h": bandwidth, "h2d": bandwidth}},
                        recompute={"keep": [0.25] * (S - 1) + [4.2]})


@pytest.mark.parametrize("seed", range(12))
def test_with_both_levers_the_warm_start_is_never_worse_than_either_alone(seed):
    # The frontier guarantee: with offload and recompute, the warm start (hence the solve) is at most
    # the better of the warm starts with offload only and with recompute only, at any cap.
    rng = random.Random(seed)
    devices, chunks = rng.choice([2, 3, 4]), rng.choice([1, 1, 2])
    capacity = round(rng.uniform(8, 0.8 * devices * chunks * 4.5 + 4), 2)
    problem = _realistic_like(devices, rng.choice([4, 6, 8]), chunks, rng.choice(["split", "fused"]), capacity,
                              rng.choice([0.8, 4, 20]), rng.choice(["interleaved", "vshape"]))
    both = best_warm_start(problem)
    offload_only = best_warm_start(problem.replace(recompute=None))
    recompute_only = best_warm_start(problem.replace(offload=None))
    assert check(both).ok
    singles = [s.makespan for s in (offload_only, recompute_only) if s is not None]
    assert singles and both.makespan <= min(singles) + 1e-9


def test_recompute_fits_the_cap_where_1f1b_does_not_without_slowing_it():
    # 1F1B holds d - i activations on device i; at a cap of 3 activations the first three devices
    # recompute some of their microbatches in the wait for the backwards, and 1F1B's makespan stays,
    # well below the best plan without recompute (no offload link)
    problem = _realistic_like(6, 12, 1, "split", 3 * 4.5 + 1, 1).replace(offload=None)
    plain = methods.get_method("1f1b").run(problem.replace(capacity=None))
    assert max(plain.peak_memory) > 3 * 4.5 + 1
    warm = best_warm_start(problem)
    assert check(warm).ok and 0 < warm.recomputed < 3 * problem.microbatches
    assert warm.makespan <= plain.makespan + 1e-9
    assert warm.makespan < best_warm_start(problem.replace(recompute=None)).makespan


def test_fifo_relabel_renames_whole_microbatches_when_they_recompute():
    # a recompute belongs to one (stage, microbatch): renaming must move it with its F and B
    problem = _realistic_like(4, 8, 1, "split", 2 * 4.5 + 1, 1).replace(offload=None)
    found = best_warm_start(problem)
    assert found.recomputed > 0
    m = problem.microbatches  # the same schedule with microbatches named backwards
    warm = Schedule(problem, found.method, tuple(o._replace(microbatch=m - 1 - o.microbatch) for o in found.ops))
    assert check(warm).ok
    relabelled = fifo_relabel(warm)
    assert check(relabelled).ok
    assert sorted((o.kind.value, o.stage, o.start, o.end) for o in relabelled.ops) == \
        sorted((o.kind.value, o.stage, o.start, o.end) for o in warm.ops)
    firsts = sorted((o.start, o.microbatch) for o in relabelled.ops if o.kind is OpKind.F and o.stage == 0)
    assert [j for _, j in firsts] == list(range(problem.microbatches))


def test_a_single_lever_answer_starts_a_solve_with_both_levers():
    # what an offload-only or recompute-only run found is valid with both levers: it may start that solve
    problem = _realistic_like(3, 6, 1, "split", 2 * 4.5 + 1, 1)
    for single in (problem.replace(offload=None), problem.replace(recompute=None)):
        found = best_warm_start(single)
        assert given_warm_start(problem, found).makespan == found.makespan
    # a lever the schedule uses must be the problem's
    recomputing = best_warm_start(problem.replace(offload=None))
    assert recomputing.recomputed > 0
    with pytest.raises(InputError, match="warm-start.*another problem: recompute"):
        given_warm_start(problem.replace(recompute=None), recomputing)


# the tightest cap of each model and placement in instances/realistic/ (names sort by model, placement, then
# cap, three caps each), where both levers matter most; the test also runs each at the least cap recompute admits.
# All 12 take about 3 minutes of CI's budget
REALISTIC = sorted((ROOT / "instances" / "realistic").glob("*.json"))[::3]


@pytest.mark.slow
@pytest.mark.parametrize("path", REALISTIC, ids=lambda p: p.stem)
def test_on_the_bundled_realistic_problems_both_levers_start_no_worse_than_either(path):
    # the same guarantee on every problem of instances/realistic/, at its own cap and at the least cap
    # recompute admits (what a frontier's first point uses)
    from ppsolve.bounds import min_capacity

    problem = load_problem(path)
    least = max(min_capacity(problem, offload=True, recompute=True))
    for capped in (problem, problem.replace(capacity=least)):
        both = best_warm_start(capped)
        singles = [s.makespan for s in (best_warm_start(capped.replace(recompute=None)),
                                        best_warm_start(capped.replace(offload=None))) if s is not None]
        assert both is not None and check(both).ok
        assert not singles or both.makespan <= min(singles) + 1e-9


def _long_pipeline(capacity, microbatches=16, **link):
    # 13B-like figures (ms, GiB) on 8 devices: 1F1B holds 8, 7, 6, ... activations of 3.34 on devices 0, 1, 2, ...;
    # an R costs a forward, and the link moves a whole activation in 170 ms each way
    return make_problem(devices=8, microbatches=microbatches, backward="split", time_forward=33.4,
                        time_backward_input=37.3, time_backward_weight=29.5, time_p2p=0.1, memory_activation=3.34,
                        memory_weight_hold=3.14, memory_capacity=capacity,
                        offload={"bandwidth": {"d2h": 0.0196, "h2d": 0.0196}, **link}, recompute={"keep": 0.2})


def test_both_levers_together_beat_each_alone_on_a_long_pipeline():
    # At a cap of about 4 activations recomputing all the excess makes device 0 the bottleneck, and the link is
    # too slow to move it all; recomputing some (to the cap raised by 0.75 activations) and offloading part of
    # the rest is faster than either alone on the same orders, and the warm start finds it when asked
    problem = _long_pipeline(13)
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    plan = fit_by_both(problem, orders, 0.75)
    mixed = make_schedule(problem, plan.time(problem), "mixed")
    assert check(mixed).ok
    recomputed = {(op.stage, op.microbatch) for op in mixed.ops if op.kind is OpKind.R}
    offloaded = {(op.stage, op.microbatch) for op in mixed.ops if op.kind is OpKind.OFFLOAD}
    assert recomputed and offloaded and offloaded == set(plan.amounts)
    _, alone = fit_by_recompute(problem.replace(offload=None), orders)
    _, by_link, stuck = fit_by_offload(problem.replace(recompute=None), orders)
    assert not stuck
    assert mixed.makespan < min(max(op.end for op in alone), max(op.end for op in by_link)) - 30
    assert len(recomputed) < sum(op.kind is OpKind.R for op in alone)
    assert best_warm_start(problem, mixed=True).makespan <= mixed.makespan + 1e-9
    assert best_warm_start(problem).makespan > mixed.makespan  # only when asked (the solver asks: PhaseSettings)


def test_link_first_takes_whole_activations_the_idle_link_moves_at_once():
    # 1F1B on the long pipeline at 11 GiB: device 0 holds 8 microbatches through round trips longer than both
    # transfers. The pairs taken start their OFFLOAD right at their F's end, one at a time on the device's d2h
    # lane, and come back well within their round trip; nothing qualifies when the margin asks for more
    problem = _long_pipeline(11, microbatches=24)
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    _, timing = fit_by_recompute(problem.replace(offload=None), orders)
    taken = link_first(problem, timing, 0.3)
    assert taken and all(amount == problem.max_offload(*pair) for pair, amount in taken.items())
    ends = {(op.kind, op.stage, op.microbatch): op for op in timing}
    move = 2 * 3.34 / 0.0196
    for device in {problem.placement[s] for s, _ in taken}:
        mine = sorted(ends[(OpKind.F, *pair)].end for pair in taken if problem.placement[pair[0]] == device)
        assert all(b - a >= 3.34 / 0.0196 - 1e-6 for a, b in zip(mine, mine[1:]))  # one offload at a time
    for pair in taken:
        assert ends[(OpKind.B, *pair)].start - ends[(OpKind.F, *pair)].end >= 1.3 * move - 1e-6
    assert link_first(problem, timing, 100.0) == {}


def test_whole_offloads_first_beat_the_other_fits_on_a_long_pipeline():
    # the same pipeline: fitted with whole offloads first it recomputes less and ends sooner than recompute
    # alone and than recompute first (fit_by_both); the warm start finds it by default
    problem = _long_pipeline(11, microbatches=24)
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    plan = fit_link_first(problem, orders, 0.3, gap=4)
    whole = make_schedule(problem, plan.time(problem), "whole-first")
    assert check(whole).ok and plan.amounts
    _, alone = fit_by_recompute(problem.replace(offload=None), orders)
    both = make_schedule(problem, fit_by_both(problem, orders, 0.25).time(problem), "both")
    assert whole.recomputed < sum(op.kind is OpKind.R for op in alone)
    assert whole.makespan < both.makespan - 10 and both.makespan < max(op.end for op in alone)
    warm = best_warm_start(problem)
    assert "+offload-whole-" in warm.method.name and warm.makespan <= whole.makespan + 1e-9


@pytest.mark.parametrize("link", [{"duplex": False}, {"links": [[0, 1], [2, 3], [4, 5], [6, 7]]}])
def test_whole_offloads_first_keep_to_shared_and_half_duplex_links(link):
    # a link that carries one transfer at a time, or one that two devices share: the plan still checks
    problem = _long_pipeline(11, microbatches=24, **link)
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    plan = fit_link_first(problem, orders, 0.0, gap=4)
    schedule = make_schedule(problem, plan.time(problem), "whole-first")
    assert plan.amounts and check(schedule).ok


def test_whole_offloads_first_need_a_lever_to_trade():
    problem = _long_pipeline(40)
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    with pytest.raises(NotApplicableError):
        fit_link_first(problem, orders, 0.3)


def test_each_fit_leaves_the_other_levers_pairs_alone():
    # rule 10: a recomputed pair is not offloaded. Offloading orders that recompute some pairs moves
    # only the others, and recomputing orders that already recompute or offload some adds only new pairs
    problem = _long_pipeline(17)
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    first = {(s, j) for s in range(3) for j in range(s, problem.microbatches, 3)}
    plan, _, stuck = fit_by_offload(problem, with_recompute(orders, first))
    assert not stuck and plan.amounts and not set(plan.amounts) & first
    tighter = problem.replace(capacity=15)
    again, _ = fit_by_recompute(tighter, plan.orders, plan.waits, amounts=plan.amounts)
    pairs = [(op.stage, op.microbatch) for order in again for op in order if op.kind is OpKind.R]
    assert len(pairs) == len(set(pairs)) > len(first) and not set(pairs) & set(plan.amounts)
    assert check(make_schedule(tighter, simulate(tighter, again, plan.amounts, plan.waits), "again")).ok
    recomputing, _ = fit_by_recompute(tighter.replace(offload=None), with_recompute(orders, first))
    pairs = [(op.stage, op.microbatch) for order in recomputing for op in order if op.kind is OpKind.R]
    assert len(pairs) == len(set(pairs)) > len(first)


def test_a_solve_starts_from_a_plan_with_both_levers_where_it_is_shortest():
    # on by default; PhaseSettings(mixed_plans=False) leaves them out
    problem = _long_pipeline(13)
    default = solve(problem, SolveOptions(time_limit=12, threads=1, seed=0))
    assert is_mixed_plan(default.warm_start.method.name) and default.warm_start.recomputed
    assert default.warm_start.offloaded and check(default.schedule).ok
    assert default.schedule.makespan <= default.warm_start.makespan
    off = solve(problem, SolveOptions(time_limit=12, threads=1, seed=0,
                                      settings=Settings(phases=PhaseSettings(mixed_plans=False))))
    assert not is_mixed_plan(off.warm_start.method.name)
    assert off.warm_start.makespan > default.warm_start.makespan


def test_a_plan_with_both_levers_is_the_warm_start_only_where_it_is_shorter():
    # shorter than the plan with recompute alone on the same orders, it wins; the same plan under another name
    # ties with it, and the tie goes to the one not named as a plan with both levers, either way round
    problem = _long_pipeline(13)
    orders = limited_1f1b_orders(problem.replace(offload=None, recompute=None), problem.devices)
    name = mixed_plan_name("1f1b", "hidden", 0.75)
    assert is_mixed_plan(f"warm:{name}") and not is_mixed_plan("warm:1f1b+offload-whole-m0.3-gap8+recompute-longest")
    assert not is_mixed_plan("warm:greedy-BFW-cap+1.5act+offload-gap2")
    mixed = make_schedule(problem, fit_by_both(problem, orders, 0.75).time(problem), f"warm:{name}")
    recomputing, _ = fit_by_recompute(problem.replace(offload=None), orders)
    alone = make_schedule(problem, simulate(problem, recomputing), "warm:1f1b+recompute-longest")
    assert mixed.makespan < alone.makespan and shortest([alone, mixed]) is mixed
    twin = make_schedule(problem, mixed.ops, "warm:twin")
    assert twin.makespan == mixed.makespan and twin.offloaded == mixed.offloaded
    assert shortest([mixed, twin]) is twin and shortest([twin, mixed]) is twin
