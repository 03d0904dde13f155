"""A recompute-aware start for the solver: 1F1B with W right after B, recomputing just enough
microbatches on the devices over the cap (of a device over its cap, the newest activation held at
its peak first, until every device fits). Writes it as a schedule file for ``ppsolve solve --warm-start FILE``.

    python benchmarks/recompute_start.py instances/realistic/llama8b-like-8x32-cap20-decide.json /tmp/start.json
"""

from __future__ import annotations

import sys

from ppsolve.baselines.common import with_recompute
from ppsolve.baselines.onef1b import onef1b_orders
from ppsolve.checker import check
from ppsolve.jsonio import write_json_atomic
from ppsolve.memory import peak_time
from ppsolve.ops import Op, OpKind
from ppsolve.problem import load_problem
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate


def recompute_start(problem):
    """(schedule, recomputed keys) of 1F1B that recomputes the fewest microbatches, device by device."""
    orders = onef1b_orders(problem)
    chosen: list[tuple[int, int]] = []
    while True:
        schedule = make_schedule(problem, simulate(problem, with_recompute(orders, chosen)), "1f1b-recompute")
        over = [d for d, (peak, cap) in enumerate(zip(schedule.peak_memory, problem.capacity))
                if cap is not None and peak > cap + 1e-9]
        if not over:
            return schedule, chosen
        d = over[0]
        at = peak_time(problem, schedule.ops, d)
        by_op = {op.op: op for op in schedule.ops}
        held = [(op.stage, op.microbatch) for op in schedule.ops
                if op.kind is OpKind.F and op.device == d and op.start <= at
                and (op.stage, op.microbatch) not in chosen and problem.recompute_saving(op.stage) > 0
                and by_op[Op(OpKind.B, op.stage, op.microbatch)].start > at]
        if not held:
            raise SystemExit(f"device {d} is over its cap at {at:g} with every activation held there recomputed")
        chosen.append(max(held, key=lambda k: by_op[Op(OpKind.F, *k)].start))  # the newest held


def main(argv: list[str]) -> int:
    problem = load_problem(argv[0])
    schedule, chosen = recompute_start(problem)
    assert check(schedule).ok
    print(f"makespan {schedule.makespan:g}, recomputed {len(chosen)}: {schedule.describe_recompute()}")
    write_json_atomic(argv[1], schedule.to_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
