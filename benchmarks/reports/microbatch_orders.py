"""Published schedules in other microbatch orders on DynaPipe-like batches (per-microbatch costs).

    python -m benchmarks.reports.microbatch_orders [--sigma 0.4 0.8] [--seeds 3] [--stages 8] [--microbatches 32]

DynaPipe's generator: multipliers clip(N(1, sigma), 0.1, 10) normalised to mean 1; F = 40 x multiplier,
fused B = 2F, activation = multiplier, linear placement. Each row: a method's makespan over data-order
1F1B's, without a cap and with the cap at data-order 1F1B's peak on each device ("-": over the cap),
the mean over the seeds (of the seeds where it fits), and its CPU seconds.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks import harness
from ppsolve.methods import RunOptions, get_method, run_and_check
from ppsolve.problem import Problem, problem_from_dict

METHODS = ("1f1b", "1f1b@longest-first", "1f1b@shortest-first", "1f1b@search", "gpipe@search", "greedy",
           "greedy@search")


def dynapipe_problem(stages: int, microbatches: int, sigma: float, seed: int) -> Problem:
    rng = np.random.default_rng(seed)
    mult = np.clip(rng.normal(1.0, sigma, microbatches), 0.1, 10.0)
    mult /= mult.mean()
    forward = [[round(40.0 * k, 4) for k in mult] for _ in range(stages)]
    return problem_from_dict({
        "format": "ppsolve/problem@1", "devices": stages, "microbatches": microbatches, "chunks": 1,
        "placement": "linear", "backward": "fused",
        "time": {"forward": forward, "backward_input": [[2 * x for x in row] for row in forward],
                 "backward_weight": 0},
        "memory": {"activation": [[round(float(k), 4) for k in mult] for _ in range(stages)]}})


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--sigma", type=float, nargs="+", default=[0.4, 0.8])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=32)
    args = parser.parse_args()
    print("| sigma | method | uncapped / data-order 1F1B | capped / data-order 1F1B (fits) | CPU s |")
    print("|---|---|---|---|---|")
    for sigma in args.sigma:
        ratios: dict[str, tuple[list[float], list[float], list[float]]] = {m: ([], [], []) for m in METHODS}
        for seed in range(args.seeds):
            free = dynapipe_problem(args.stages, args.microbatches, sigma, seed)
            data = get_method("1f1b").run(free, RunOptions())
            capped = free.replace(capacity=list(data.peak_memory))
            for name in METHODS:
                for column, problem in enumerate((free, capped)):
                    began = time.process_time()
                    outcome = run_and_check(get_method(name), problem, RunOptions(seed=seed))
                    ratios[name][2].append(time.process_time() - began)
                    if outcome.schedule is not None:
                        assert outcome.valid, outcome.note
                        ratios[name][column].append(outcome.schedule.makespan / data.makespan)
        for name, (free_r, capped_r, cpu) in ratios.items():
            fits = f"{np.mean(capped_r):.3f} ({len(capped_r)}/{args.seeds})" if capped_r else "-"
            print(f"| {sigma:g} | {name} | {np.mean(free_r):.3f} | {fits} | {np.mean(cpu):.2f} |")


if __name__ == "__main__":
    main()
