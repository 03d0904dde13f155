"""The CP-SAT solver's targets (issue 4), plus every file of an instances directory.

    python -m benchmarks.reports.solver_targets [--instances DIR] [--scale 1.0] [--skip-targets]

Prints one row per problem: status, makespan, bound, gap, seconds, the best
baseline (warm start) makespan, and for the offload target the best schedule
without offload at the same capacity. ``--scale`` multiplies every time limit.
1F1B's memory is the peak of a simulated 1F1B order on its busiest device.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks import harness
from ppsolve.problem import load_problem, problem_from_dict
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.warm_start.plans import limited_1f1b_orders


def uniform(d, m, placement="linear", cap=None, offload=None):
    chunks = 2 if placement == "vshape" else 1
    unit = 10 / chunks
    data = {"format": "ppsolve/problem@1", "name": f"{placement} {d}x{m}", "devices": d, "microbatches": m,
            "chunks": chunks, "placement": placement,
            "time": {"forward": unit, "backward_input": unit, "backward_weight": unit},
            "memory": {"activation": 1 / chunks, "capacity": cap}}
    if offload:
        data["offload"] = offload
    return problem_from_dict(data)


def one_f_one_b_memory(d, m):
    problem = uniform(d, m)
    return max(make_schedule(problem, simulate(problem, limited_1f1b_orders(problem, d)), "1f1b").peak_memory)


def row(name, problem, limit, threads, extra=""):
    t = time.monotonic()
    r = solve(problem, SolveOptions(time_limit=limit, threads=threads))
    s = r.schedule
    warm = r.warm_start.makespan if r.warm_start else float("nan")
    print(f"| {name} | {r.status} | {s.makespan:g} | {r.lower_bound:g} | {r.gap:.2%} | "
          f"{time.monotonic() - t:.1f} | {warm:g} | {s.offloaded:g} | {extra} |", flush=True)
    return r


def main() -> None:
    parser = harness.parser(__doc__, threads=None)
    parser.add_argument("--instances", type=Path, help="also solve every *.json of this directory")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every time limit")
    parser.add_argument("--skip-targets", action="store_true")
    args = parser.parse_args()
    print("| problem | status | makespan | bound | gap | seconds | best baseline | offloaded | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    if not args.skip_targets:
        row("4x8 linear, cap 1F1B (target < 2 s)", uniform(4, 8, cap=one_f_one_b_memory(4, 8)), 2 * args.scale,
            args.threads)
        cap8 = one_f_one_b_memory(8, 32)
        row("8x32 linear, cap 1F1B (target 60 s, gap <= 1%)", uniform(8, 32, cap=cap8), 60 * args.scale, args.threads)
        row("8x32 vshape, cap 1F1B (target 60 s, gap <= 1%)", uniform(8, 32, "vshape", cap=cap8), 60 * args.scale,
            args.threads)
        offload = {"fraction": 1, "bandwidth": {"d2h": 0.2, "h2d": 0.2}}  # transfer = 5 = F / 2
        quarter = cap8 / 4
        no_off = solve(uniform(8, 32, cap=quarter), SolveOptions(time_limit=30 * args.scale, threads=args.threads))
        row("8x32 linear + offload, cap 1F1B/4 (target 120 s, gap <= 2%)", uniform(8, 32, cap=quarter, offload=offload),
            120 * args.scale, args.threads,
            f"best without offload: {no_off.schedule.makespan:g} ({no_off.status})")
    if args.instances:
        for path in harness.problem_paths([], args.instances):
            row(path.stem, load_problem(path), 30 * args.scale, args.threads)


if __name__ == "__main__":
    main()
