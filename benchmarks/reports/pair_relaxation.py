"""What an argument about the first and the last device alone can prove: the pair relaxation, solved.

    python -m benchmarks.reports.pair_relaxation [PROBLEM ...] [--time-limit 600] [--threads 2] [--seed 2]
        [--no-recompute]

For each linear problem (default: the 13B-like problem at 11 GiB, whose gap is the largest of the
realistic set), ``end_pair`` (``ppsolve/bounds/relaxation.py``) keeps its first and last stage on two
devices with the stages between them a latency, and ``solve`` runs on that pair. The pair's optimum
lies between its proven bound and the makespan found, and at most the problem's optimum: no bound
that reasons about those two devices alone, the others as delays, can prove more than the makespan
found. Printed per problem: the problem's analytic bound, the pair's, the pair's proven bound and the
makespan found, with what the pair's plan recomputes and offloads on the first device.
``--no-recompute``: the problem and the pair as if they had no recompute block (keep or offload only).
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.harness import ROOT
from ppsolve.bounds import makespan_lower_bound
from ppsolve.bounds.relaxation import end_pair
from ppsolve.ops import OpKind
from ppsolve.problem import load_problem
from ppsolve.solvers import SolveOptions, solve

DEFAULT = ROOT / "instances/realistic/llama13b-like-8x32-cap11-decide.json"


def main(argv=None) -> int:
    parser = harness.parser(__doc__, problems=True, time_limit=600.0, threads=2, section=None)
    parser.add_argument("--seed", type=int, default=2, help="the solver's seed (default %(default)s)")
    parser.add_argument("--no-recompute", action="store_true", help="keep or offload only")
    args = parser.parse_args(argv)
    run = harness.command(__spec__, "--time-limit", f"{args.time_limit:g}", "--threads", str(args.threads),
                          "--seed", str(args.seed), *(["--no-recompute"] if args.no_recompute else []))
    lines = ["## What the first and last device alone can prove", "",
             f"`{run}` (2-core machine): the problem's first and last stage on two devices, the stages between "
             "them a latency per microbatch (`end_pair`, `ppsolve/bounds/relaxation.py`), solved. Any schedule of "
             "the problem cut to those two stages is one of the pair, so the pair's optimum, at most *pair: found*, "
             "caps every bound that reasons about those two devices alone with the others as delays. Times in ms.",
             "", *harness.table(["problem", "bound", "pair: bound", "pair: proven", "pair: found", "first device: R, offloads"])]
    for path in args.problems or [DEFAULT]:
        problem = load_problem(path)
        if args.no_recompute:
            problem = problem.replace(recompute=None)
        pair = end_pair(problem)
        result = solve(pair, SolveOptions(time_limit=args.time_limit, threads=args.threads, seed=args.seed))
        first = [op for op in result.schedule.ops if op.device == 0]
        lines.append(harness.row([
            path.stem, f"{makespan_lower_bound(problem).value:.2f}", f"{makespan_lower_bound(pair).value:.2f}",
            f"{result.lower_bound:.2f}", f"{result.schedule.makespan:.2f}",
            f"{sum(op.kind is OpKind.R for op in first)}, {sum(op.kind is OpKind.OFFLOAD for op in first)}"]))
    return harness.publish("\n".join(lines), args.section)


if __name__ == "__main__":
    raise SystemExit(main())
