"""Recompute baselines (Megatron's full recompute, AdaPipe-like per stage) and fitting a plan by recompute."""

from __future__ import annotations

import pytest

from ppsolve.baselines.common import over_capacity, with_recompute
from ppsolve.baselines.families.onef1b import onef1b_orders
from ppsolve.baselines.families.recompute import PREFER, adapipe_stages, fit_by_recompute, interleaved_plain, stage_pairs
from ppsolve.checker import check
from ppsolve.errors import InfeasibleError
from ppsolve.memory import peak_memory
from ppsolve.methods import RunOptions, get_method
from ppsolve.ops import OpKind
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from tests.helpers import make_problem

FULL = ("1f1b-recompute", "interleaved-1f1b-recompute")
ADAPIPE = ("1f1b-adapipe", "interleaved-1f1b-adapipe")


def _problem(chunks=1, backward="split", capacity=None, **extra):
    placement = "interleaved" if chunks > 1 else "linear"
    return make_problem(devices=3, microbatches=6, chunks=chunks, placement=placement, backward=backward,
                        time_forward=1, time_backward_input=1.5, time_backward_weight=1,
                        memory_activation=4, memory_weight_hold=1, memory_capacity=capacity,
                        recompute={"keep": 0.5, "time": 1.2}, **extra)


@pytest.mark.parametrize("backward", ["split", "fused"])
@pytest.mark.parametrize("name, chunks", [(name, 1) for name in FULL + ADAPIPE]
                         + [(name, 2) for name in FULL + ADAPIPE if name.startswith("interleaved")])
def test_recompute_baselines_are_valid(name, chunks, backward):
    # capped at 9: plain 1F1B holds 3 activations of 4 on device 0 (interleaved more), so both need recompute
    problem = _problem(chunks, backward, capacity=9)
    assert get_method(name).why_not(problem) is None
    schedule = get_method(name).run(problem, RunOptions())
    assert check(schedule).ok
    assert schedule.recomputed > 0 and max(schedule.peak_memory) <= 9 + 1e-9


@pytest.mark.parametrize("name, chunks", [("1f1b-recompute", 1), ("interleaved-1f1b-recompute", 2)])
def test_full_recompute_reruns_every_forward_right_before_its_backward(name, chunks):
    problem = _problem(chunks)
    schedule = get_method(name).run(problem, RunOptions())
    rs = [op for op in schedule.ops if op.kind is OpKind.R]
    assert len(rs) == problem.num_stages * problem.microbatches
    assert {(op.stage, op.microbatch) for op in rs} == set(stage_pairs(problem, range(problem.num_stages)))
    for device in range(problem.devices):
        compute = sorted((op for op in schedule.ops if op.device == device and op.kind.is_compute),
                         key=lambda op: op.start)
        for at, op in enumerate(compute):
            if op.kind is OpKind.R:
                after = compute[at + 1]
                assert (after.kind, after.stage, after.microbatch) == (OpKind.B, op.stage, op.microbatch)


def test_full_recompute_keeps_the_plain_order():
    problem = _problem()
    plain = get_method("1f1b").run(problem, RunOptions())
    full = get_method("1f1b-recompute").run(problem, RunOptions())
    key = lambda s: [[(op.kind, op.stage, op.microbatch) for op in sorted(
        (o for o in s.ops if o.device == d and o.kind is not OpKind.R), key=lambda o: o.start)]
        for d in range(problem.devices)]
    assert key(plain) == key(full)


def _two_chunk_problem(cheap_stage: int):
    # d = 2, v = 2, m = 3: device 0 holds stages 0 and 2; Megatron's warm-up runs all 6 forwards before
    # its first backward: 6 activations of 4 (24). Recomputing stage 0 alone keeps 1 of each of its 3:
    # 3 + 12 = 15 (its R come after stage 2's backwards). Stage 2 alone: 12 + 3 = 15 after the forwards,
    # but R(2, 0) comes first and rebuilds 3 while stage 0's 12 are held: 18. Both save 3 per activation;
    # the one named recomputes in 1 against 3 for the other: the least recompute time per memory saved.
    times = [3, 1, 3, 1]
    times[cheap_stage], times[2 - cheap_stage] = 1, 3
    return make_problem(devices=2, microbatches=3, chunks=2, placement="interleaved",
                        memory_activation=4, recompute={"keep": 1, "time": times})


@pytest.mark.parametrize("cheap", [0, 2])
def test_adapipe_recomputes_the_cheapest_stage_first(cheap):
    free = _two_chunk_problem(cheap)
    orders = interleaved_plain(free)

    def peak0(stages):
        return peak_memory(free, simulate(free, with_recompute(orders, stage_pairs(free, stages))))[0]

    # the cap of device 0 is what recomputing only the cheap stage needs (with stage 2 cheap, recomputing
    # stage 0 would fit as well, but costs more per memory saved); device 1 has room
    assert (peak0([]), peak0([0]), peak0([2])) == (24, 15, 18)
    problem = free.replace(capacity=(peak0([cheap]), 1000.0))
    chosen, ops = adapipe_stages(problem, orders)
    assert chosen == [cheap] and not over_capacity(problem, ops)
    schedule = get_method("interleaved-1f1b-adapipe").run(problem, RunOptions())
    assert schedule.method.params["recomputed_stages"] == [cheap] and check(schedule).ok


def test_adapipe_recomputes_only_the_devices_over_the_cap():
    # linear 1F1B holds d - i activations on device i: 12, 8, 4 against a cap of 9 -> only device 0 recomputes
    problem = _problem(capacity=9)
    schedule = get_method("1f1b-adapipe").run(problem, RunOptions())
    assert schedule.method.params["recomputed_stages"] == [0]
    assert set(schedule.recomputed_by_stage()) == {0}


def test_adapipe_refuses_with_what_it_needs():
    problem = _problem(capacity=2)  # below even one activation with every stage recomputed
    with pytest.raises(InfeasibleError, match=r"1f1b-adapipe needs .* on device \d with every stage of it recomputed"):
        get_method("1f1b-adapipe").run(problem, RunOptions())
    broken = get_method("1f1b-adapipe").run(problem, RunOptions(ignore_capacity=True))
    assert broken.method.extra["capacity_broken"]


@pytest.mark.parametrize("name", FULL + ADAPIPE)
def test_without_a_recompute_block_the_methods_say_why(name):
    problem = make_problem(devices=2, microbatches=3)
    reason = get_method(name).why_not(problem)
    assert reason is not None and "recompute" in reason and "\n" not in reason


@pytest.mark.parametrize("prefer", sorted(PREFER))
@pytest.mark.parametrize("chunks", [1, 2])
def test_fit_by_recompute_recomputes_only_where_the_cap_is_broken(chunks, prefer):
    problem = _problem(chunks, capacity=9)
    orders = onef1b_orders(problem) if chunks == 1 else interleaved_plain(problem)
    over = {d for d, _, _ in over_capacity(problem, simulate(problem, orders))}
    plan, ops = fit_by_recompute(problem, orders, prefer=prefer)
    assert not over_capacity(problem, ops)
    recomputed = {(op.stage, op.microbatch) for op in ops if op.kind is OpKind.R}
    assert recomputed and {problem.placement[s] for s, _ in recomputed} <= over
    assert len(recomputed) < problem.microbatches * sum(problem.placement[s] in over
                                                        for s in range(problem.num_stages))
    assert check(make_schedule(problem, ops, "fit")).ok


def test_fit_by_recompute_refuses_when_nothing_helps():
    with pytest.raises(InfeasibleError, match="recomputing does not fit device"):
        fit_by_recompute(_problem(capacity=2), onef1b_orders(_problem(capacity=2)))
