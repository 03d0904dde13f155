"""The placer times ops one at a time exactly as the simulator times whole orders."""

from __future__ import annotations

import random

import pytest

from ppsolve.baselines.engines.placer import Placer
from ppsolve.ops import OpKind
from ppsolve.simulator import simulate
from ppsolve.solvers.warm_start.plans import serial_orders
from tests.helpers import make_problem, one_f_one_b_orders


def _random_problem(rng: random.Random, placement: str):
    d, chunks = rng.choice([2, 3, 4]), 2 if placement == "vshape" else 1
    S = d * chunks
    return make_problem(devices=d, microbatches=rng.choice([2, 3, 5]), chunks=chunks, placement=placement,
                        time_forward=[rng.choice([1, 1.5, 2.25]) for _ in range(S)],
                        time_backward_input=[rng.choice([1, 2, 3.5]) for _ in range(S)],
                        time_backward_weight=[rng.choice([0.5, 1]) for _ in range(S)],
                        time_p2p=rng.choice([0, 0.1, 0.75]))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("placement", ["linear", "vshape"])
def test_placing_in_start_order_gives_the_simulators_times(seed, placement):
    rng = random.Random(seed)
    problem = _random_problem(rng, placement)
    orders = one_f_one_b_orders(problem) if placement == "linear" and rng.random() < 0.5 else serial_orders(problem)
    timed = simulate(problem, orders)
    placer = Placer(problem)
    for op in sorted(timed, key=lambda o: (o.start, o.end)):  # every op after those it waits for
        assert placer.placed(op.kind, op.stage) == op.microbatch
        assert placer.put(op.kind, op.stage) == pytest.approx(op.end, abs=1e-12)
    assert max(placer.free) == pytest.approx(max(op.end for op in timed), abs=1e-12)


def test_an_op_whose_input_is_not_placed_is_not_placed():
    problem = make_problem(devices=2, microbatches=2, time_p2p=0.5)
    placer = Placer(problem)
    assert placer.put(OpKind.B, 0) is None and placer.placed(OpKind.B, 0) == 0  # B(1,0) is missing
    assert placer.ready(OpKind.F, 1, 0) is None
    assert placer.put(OpKind.F, 0) == 1.0
    assert placer.ready(OpKind.F, 1, 0) == 1.5  # F(0,0) ends at 1, then the p2p latency
    assert placer.put(OpKind.F, 1) == 2.5
    assert placer.ready(OpKind.F, 0, 1) == 0.0  # the first stage waits for nothing
