"""Small builders shared by the tests: problem dicts and simple valid orders."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ppsolve.baselines.families.onef1b import onef1b_orders
from ppsolve.ops import Op
from ppsolve.problem import Problem, problem_from_dict
from ppsolve.schedule import Schedule, make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers.warm_start import plans

# the repository's root (instances/, models/, benchmarks/ are read from it)
ROOT = Path(__file__).resolve().parent.parent


def problem_dict(**overrides: Any) -> dict:
    """A valid 2-device problem dict; ``overrides`` replace top-level fields, ``time_x``/``memory_x`` nested ones."""
    data: dict[str, Any] = {
        "format": "ppsolve/problem@1", "devices": 2, "microbatches": 3,
        "time": {"forward": 1, "backward_input": 1, "backward_weight": 1},
        "memory": {"activation": 1},
    }
    for key, value in overrides.items():
        if key.startswith("time_"):
            data["time"][key[5:]] = value
        elif key.startswith("memory_"):
            data["memory"][key[7:]] = value
        else:
            data[key] = value
    return copy.deepcopy(data)


def make_problem(**overrides: Any) -> Problem:
    return problem_from_dict(problem_dict(**overrides))


def serial_orders(problem: Problem, offload: bool = False) -> list[list[Op]]:
    """Microbatches one after another: F through all stages, then B (and W) back; with ``offload``
    every (stage, microbatch) that may offload is offloaded after its F and reloaded before its B
    (the warm start's serial plan, ``ppsolve.solvers.warm_start.plans.serial_orders``)."""
    return plans.serial_orders(problem, offload)


def one_f_one_b_orders(problem: Problem) -> list[list[Op]]:
    """1F1B on a linear placement (W right after its B when split): the 1f1b baseline's order."""
    return onef1b_orders(problem)


def schedule_from_orders(problem: Problem, orders, name: str = "test", amounts=None) -> Schedule:
    return make_schedule(problem, simulate(problem, orders, amounts), name)


def assert_waits_follow_the_contract(problem: Problem, issued, waits) -> None:
    """Contract version 2's waits written out, against ``waits`` in ``device_waits``' form.

    For each action of ``issued`` (timed, in issue order): it waits only for earlier actions of
    its own device planned to end by its planned start, at most one per other lane; and those,
    with the earlier actions of its device on each lane they (or it) are on, cover every action of
    its device planned to end by its start (on its own lane: before it in lane order). Lanes are SPEC.md's: the device's compute lane, and
    the host-link lanes (one for both directions on a half-duplex link).
    """
    lanes = [("compute", op.device) if op.kind.is_compute else ("link", problem.lane(op.device, op.kind))
             for op in issued]

    def up_to(w: int, device: int) -> set[int]:
        return {u for u in range(w + 1) if lanes[u] == lanes[w] and issued[u].device == device}

    for v, op in enumerate(issued):
        # on its own lane the lane order rules: two zero-duration ops at one instant end by each
        # other's start, and the later one waits for the earlier one only
        due = {u for u, other in enumerate(issued)
               if u != v and other.device == op.device and other.end <= op.start
               and (lanes[u] != lanes[v] or u < v)}
        awaited = list(waits[v])
        assert set(awaited) <= due, (op, [issued[u] for u in set(awaited) - due])
        assert all(u < v for u in awaited), (op, awaited)
        on = [lanes[u] for u in awaited]
        assert len(set(on)) == len(on) and lanes[v] not in on, (op, on)
        covered = up_to(v, op.device) - {v}
        for w in awaited:
            covered |= up_to(w, op.device)
        assert due <= covered, (op, [issued[u] for u in due - covered])
