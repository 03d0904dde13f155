"""Time every baseline at d = 32, m = 256 (v = 2; v = 1 for linear methods).

    python -m benchmarks.reports.baseline_speed [--devices 32] [--microbatches 256] [--uniform]
        [--capacity C] [--check]

Prints one row per method: method, d, m, v, seconds (the method's own build time,
simulation included: wall clock, and the process's CPU time, which other work on
a shared machine does not inflate), makespan and whether the checker accepts the output.
"""

from __future__ import annotations

import time

from benchmarks import harness
from ppsolve.checker import check
from ppsolve.methods import RunOptions, all_methods, run_and_check
from ppsolve.problem import problem_from_dict


def problem_for(requirements: str, d: int, m: int, uniform: bool, capacity: float | None = None):
    if requirements.startswith("vshape"):
        placement, v = "vshape", 2
    elif requirements.startswith("interleaved"):
        placement, v = "interleaved", 2
    elif requirements.startswith("linear"):
        placement, v = "linear", 1
    else:
        placement, v = "vshape", 2
    S = d * v
    if uniform:
        time_ = {"forward": 1, "backward_input": 1, "backward_weight": 1}
    else:
        time_ = {"forward": [1.0 + (s % 3) * 0.2 for s in range(S - 1)] + [2.0],
                 "backward_input": [1.0 + (s % 4) * 0.1 for s in range(S - 1)] + [2.2],
                 "backward_weight": [0.8 + (s % 2) * 0.2 for s in range(S)], "p2p": 0.05}
    return problem_from_dict({
        "format": "ppsolve/problem@1", "devices": d, "microbatches": m, "chunks": v, "placement": placement,
        "backward": "split", "time": time_,
        "memory": {"activation": 1.0} | ({} if capacity is None else {"capacity": capacity}),
        "offload": {"bandwidth": {"d2h": 4.0, "h2d": 4.0}}})


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--devices", type=int, default=32)
    parser.add_argument("--microbatches", type=int, default=256)
    parser.add_argument("--uniform", action="store_true", help="uniform costs instead of uneven ones")
    parser.add_argument("--capacity", type=float, help="memory cap per device, in activations (default: none); "
                        "methods that cannot keep it are listed as refused")
    parser.add_argument("--check", action="store_true", help="also run the checker on each output (slower)")
    args = parser.parse_args()
    print(f"{'method':<18}{'d':>4}{'m':>6}{'v':>3}{'seconds':>10}{'cpu s':>8}{'makespan':>12}  checked")
    for method in all_methods("baseline"):
        problem = problem_for(method.requirements, args.devices, args.microbatches, args.uniform, args.capacity)
        cpu = time.process_time()
        outcome = run_and_check(method, problem, RunOptions(), checked=False)
        seconds, cpu, schedule = outcome.seconds, time.process_time() - cpu, outcome.schedule
        if schedule is None:
            print(f"{method.name:<18}{problem.devices:>4}{problem.microbatches:>6}{problem.chunks:>3}  refused: "
                  f"{outcome.note[:70]}")
            continue
        ok = ("ok" if check(schedule).ok else "FAILED") if args.check else "-"
        print(f"{method.name:<18}{problem.devices:>4}{problem.microbatches:>6}{problem.chunks:>3}"
              f"{seconds:>10.3f}{cpu:>8.3f}{schedule.makespan:>12g}  {ok}")


if __name__ == "__main__":
    main()
