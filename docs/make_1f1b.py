"""Example: a 1F1B-style schedule for any problem, built with ppsolve's simulator (no solver).

Usage: python docs/make_1f1b.py PROBLEM.json SCHEDULE.json [OFFLOAD_STAGE...]
Each device runs, per step t, the forward of microbatch t and the backward of
microbatch t - (devices - 1); with split backward the W follows one step later.
Stages listed after the paths offload every microbatch but the last (RELOAD just
before its B).
"""

import sys

from ppsolve.ops import B, F, OFFLOAD, RELOAD, W
from ppsolve.problem import load_problem
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate


def orders(problem, offload_stages=()):
    S, M, lag = problem.num_stages, problem.microbatches, problem.devices - 1
    chain = []
    for t in range(M + lag + 2):
        if t < M:
            chain += [F(s, t) for s in range(S)]
        if 0 <= t - lag < M:
            chain += [B(s, t - lag) for s in reversed(range(S))]
        if problem.split_backward and 0 <= t - lag - 1 < M:
            chain += [W(s, t - lag - 1) for s in reversed(range(S))]
    out = [[] for _ in range(problem.devices)]
    for op in chain:
        moved = op.stage in offload_stages and op.microbatch < M - 1
        device = out[problem.placement[op.stage]]
        if moved and op.kind.value == "B":
            device.append(RELOAD(op.stage, op.microbatch))
        device.append(op)
        if moved and op.kind.value == "F":
            device.append(OFFLOAD(op.stage, op.microbatch))
    return out


if __name__ == "__main__":
    problem = load_problem(sys.argv[1])
    offload = {int(s) for s in sys.argv[3:]}
    schedule = make_schedule(problem, simulate(problem, orders(problem, offload)), "1f1b-order")
    schedule.save(sys.argv[2])
    print(f"wrote {sys.argv[2]}: makespan {schedule.makespan:.3f}, peak memory "
          + ", ".join(f"{p:.3f}" for p in schedule.peak_memory))
