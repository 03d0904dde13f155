"""The slot bound (``ppsolve.bounds.slots``): where a cap lets a device hold few activations at once, it
rises above every other figure and stays under an independent optimum or a checked witness schedule.
Its validity on 200 drawn tiny problems with levers is part of ``tests/bounds/test_bound_levers.py``."""

from __future__ import annotations

import pytest

from ppsolve.bounds import makespan_lower_bound
from ppsolve.checker import check
from ppsolve.ops import Op, OpKind
from ppsolve.problem import problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from tests.bounds.test_bound_levers import _others
from tests.bounds.test_bound_per_microbatch import Tiny, optimum

F, B, W, R = OpKind.F, OpKind.B, OpKind.W, OpKind.R


def _rest(bound) -> float:
    return max(_others(bound), max(bound.drain_bounds), max(bound.last_backward_bounds))


def test_one_slot_on_a_v_shape_matches_the_hand_figure_and_stays_under_the_enumerated_optimum():
    # One device, two stages (F 2 and 4, fused B 6 and 3), activations 3 under a cap of 4.5: one activation
    # above 2.25 at a time. Kept, stage 0 holds it 15 (F0 F1 B1 B0), stage 1 7 (F1 B1): 44 for both
    # microbatches, against T over [0, T]. Recomputing saves 5 (R 4) and 2 (R 2) of it, and R time is
    # T - 30 (the load) at most: 44 - T <= 1.25 (T - 30), T >= 81.5 / 2.25.
    data = {"format": "ppsolve/problem@1", "devices": 1, "microbatches": 2, "chunks": 2, "placement": [0, 0],
            "backward": "fused",
            "time": {"forward": [[2, 2], [4, 4]], "backward_input": [[3, 3], [2, 2]],
                     "backward_weight": [[3, 3], [1, 1]], "p2p": [2, 2]},
            "memory": {"activation": [[3, 3], [3, 3]], "weight_hold": [[1, 1], [3, 3]], "capacity": [4.5]},
            "recompute": {"keep": [[0, 0], [0, 0]], "time": [[4, 4], [2, 2]]}}
    problem = problem_from_dict(data)
    bound = makespan_lower_bound(problem)
    assert bound.slot_bounds[0] == pytest.approx(81.5 / 2.25, abs=1e-6)
    assert bound.value == bound.slot_bounds[0] > _rest(bound) + 1
    assert "hold at once" in bound.binding
    assert bound.value <= optimum(Tiny(data), problem, [4.5]) == 38


def _four_stage_cut() -> dict:
    """A 13B-like model's stages 0, 1, 2 and the last on four devices, 8 microbatches, 5.5 GiB: one whole
    activation at a time, checkpoints beside it (``instances/realistic`` has the 8-device problem)."""
    return {"format": "ppsolve/problem@1", "devices": 4, "microbatches": 8, "placement": "linear",
            "backward": "split",
            "time": {"forward": [33.43, 33.43, 33.43, 36.48], "backward_input": [37.34, 37.34, 37.34, 40.39],
                     "backward_weight": [29.53, 29.53, 29.53, 32.58], "p2p": 0.1},
            "memory": {"activation": [3.359, 3.34, 3.34, 3.906], "weight_hold": [3.143, 3.143, 3.143, 3.182],
                       "capacity": 5.5},
            "recompute": {"keep": [0.215, 0.195, 0.195, 0.762], "time": [33.43, 33.43, 33.43, 33.43]},
            "offload": {"fraction": 1, "bandwidth": {"d2h": 0.019558, "h2d": 0.019558}}}


def test_the_four_stage_cut_is_bound_by_device_2s_slot_under_a_checked_schedule():
    problem = problem_from_dict(_four_stage_cut())
    bound = makespan_lower_bound(problem)
    # Device 2: kept, an activation is above 2.75 GiB for 177.37 ms (F2 F3 B3 B2 W2), offloaded by 0.59 GiB
    # 160.6, recomputed 100.3 (R B W); the big intervals fit [66.96, T - 104.41 + 29.53] and
    # T >= 944.24 + 33.43 r (its ops before its last B, the B chain after it). Eight offloaded and the
    # rest of the need met by recompute (60.3 more saved per 33.43 ms of R): T = 1116.3.
    assert bound.slot_bounds[2] == pytest.approx(1116.3, abs=0.5)
    assert bound.value == bound.slot_bounds[2] > _rest(bound) + 30  # the last device's 1085.46 before
    # A witness: GPipe-like forwards on devices 0-2, every microbatch but the first recomputed there, 1F1B
    # on the last device, simulated and checked.
    m, orders = problem.microbatches, []
    for d in range(3):
        order = [Op(F, d, j) for j in range(m)]
        for j in range(m):
            order += ([Op(R, d, j)] if j else []) + [Op(B, d, j), Op(W, d, j)]
        orders.append(order)
    orders.append([Op(kind, 3, j) for j in range(m) for kind in (F, B, W)])
    witness = make_schedule(problem, simulate(problem, orders), "witness")
    assert check(witness).ok
    assert bound.value <= witness.makespan == pytest.approx(1178.35, abs=0.01)
