"""Test-only problems, plans and methods for the plot/export/bench/frontier tests.

Nothing here is registered in the package: tests register these methods with
``monkeypatch`` so that the registry is restored afterwards.
"""

from __future__ import annotations

from ppsolve import methods as registry
from ppsolve.methods import Method
from ppsolve.ops import Op, OpKind
from ppsolve.problem import Problem, problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from tests.helpers import one_f_one_b_orders


def tiny_problem(devices: int = 2, microbatches: int = 3, capacity=None, offload: dict | None = None,
                 chunks: int = 1, placement: str = "linear", backward: str = "split", name: str = "tiny") -> Problem:
    data = {"format": "ppsolve/problem@1", "name": name, "devices": devices, "microbatches": microbatches,
            "chunks": chunks, "placement": placement, "backward": backward,
            "time": {"forward": 2, "backward_input": 2, "backward_weight": 1, "p2p": 0},
            "memory": {"activation": 1, "weight_hold": 0.5, "capacity": capacity}}
    if offload is not None:
        data["offload"] = offload
    return problem_from_dict(data)


def serial_orders(problem: Problem, offload: bool = False) -> list[list[Op]]:
    """Microbatches one after another: F down the stages, B back up, W after each B.

    With ``offload``, every activation goes to host right after its F and comes
    back right before its B.
    """
    orders: list[list[Op]] = [[] for _ in range(problem.devices)]
    last = problem.num_stages - 1
    for j in range(problem.microbatches):
        for s in range(problem.num_stages):
            orders[problem.placement[s]].append(Op(OpKind.F, s, j))
            if offload and s < last:
                orders[problem.placement[s]].append(Op(OpKind.OFFLOAD, s, j))
        for s in range(last, -1, -1):
            if offload and s < last:
                orders[problem.placement[s]].append(Op(OpKind.RELOAD, s, j))
            orders[problem.placement[s]].append(Op(OpKind.B, s, j))
            if problem.split_backward:
                orders[problem.placement[s]].append(Op(OpKind.W, s, j))
    return orders


def serial_schedule(problem: Problem, offload: bool = False, name: str = "serial"):
    return make_schedule(problem, simulate(problem, serial_orders(problem, offload)), name)


def _serial_build(problem, options):
    return serial_schedule(problem, offload=problem.can_offload and problem.capacity[0] is not None)


def _linear_only(problem: Problem):
    return None if problem.placement_name == "linear" else "needs a linear placement"


SERIAL = Method("serial", "baseline", "test: one microbatch at a time", "any", lambda p: None, _serial_build)
ONE_F_ONE_B = Method("1f1b-test", "baseline", "test: 1F1B", "linear placement", _linear_only,
                     lambda p, o: make_schedule(p, simulate(p, one_f_one_b_orders(p)), "1f1b-test"))


def register_for_test(monkeypatch, *methods: Method) -> None:
    """Register ``methods`` for one test; the registry is restored afterwards."""
    registry.all_methods()  # load the real providers first, so they cannot clash later
    for method in methods:
        monkeypatch.setitem(registry._REGISTRY, method.name.lower(), method)


def gpipe_orders(problem: Problem) -> list[list[Op]]:
    """All forwards, then all backwards (linear placement)."""
    m = problem.microbatches
    orders = []
    for i in range(problem.devices):
        order = [Op(OpKind.F, i, j) for j in range(m)]
        for j in range(m):
            order.append(Op(OpKind.B, i, j))
            if problem.split_backward:
                order.append(Op(OpKind.W, i, j))
        orders.append(order)
    return orders


def _best_candidate(problem: Problem, options) -> "object":
    """A stand-in solver for linear problems: the fastest of a few fixed orders within capacity."""
    from ppsolve.errors import InfeasibleError
    from ppsolve.memory import peak_memory

    best = None
    for orders in (serial_orders(problem), one_f_one_b_orders(problem), gpipe_orders(problem)):
        ops = simulate(problem, orders)
        peaks = peak_memory(problem, ops)
        if any(cap is not None and peak > cap + 1e-9 for peak, cap in zip(peaks, problem.capacity)):
            continue
        makespan = max(op.end for op in ops)
        if best is None or makespan < best[0]:
            best = (makespan, ops)
    if best is None:
        raise InfeasibleError("no candidate order fits the capacity")
    return make_schedule(problem, best[1], "cpsat", status="feasible")


FAKE_SOLVER = Method("cpsat", "solver", "test: best of serial, 1F1B and GPipe within capacity", "linear",
                     _linear_only, _best_candidate)
