"""How far below the optimum is the lower bound? Small analogues of instances/scale, proven.

    python -m benchmarks.reports.bound_tightness [--time-limit 150] [--threads N] [--sizes 4x8,4x16]
        [--match REGEX]

The gaps of the scale benchmark (a makespan found against the foundation's lower bound) mix two
things: how far the search is from the optimum, and how far the bound is below it. On problems
small enough for the whole CP-SAT model to prove its optimum, the second is measured alone. This
script builds the same families as benchmarks/makers/scale.py (uneven transformer-like stages,
p2p, cap at half of 1F1B's peak; linear and V-shape without offload, linear and interleaved with
offload at k = 1.5 on links shared by two devices) at small sizes, solves each with the whole
model only (no neighbourhood search), and prints a Markdown table: the foundation's bound, the
solve's makespan and proven bound, the bound's distance below the optimum (when proven), and the
seconds to the answer.
"""

from __future__ import annotations

import re
import sys
import time
from fractions import Fraction

from benchmarks import harness
from benchmarks.makers import suite
from ppsolve.bounds import makespan_lower_bound
from ppsolve.problem import problem_from_dict
from ppsolve.solvers import SolveOptions, solve
from ppsolve.solvers.settings import PhaseSettings, Settings

FAMILIES = (("linear", 1, None), ("vshape", 2, None), ("linear", 1, 1.5), ("interleaved", 2, 1.5))


def problems(sizes: list[tuple[int, int]]):
    for d, m in sizes:
        for placement, chunks, k in FAMILIES:
            spec = suite.Spec(d, m, placement, chunks, "split", suite.TRANSFORMER, uneven=True, cap=Fraction(1, 2),
                              p2p=0.5, k=k, link_size=2 if k else 1, k_basis="FB")
            yield spec.name, problem_from_dict(suite.build(spec))


def main(argv=None) -> int:
    parser = harness.parser(__doc__, time_limit=150.0, threads=None)
    parser.add_argument("--sizes", default="4x8,4x16", help="d x m pairs")
    parser.add_argument("--match", default="", help="only the problems whose name this regex finds")
    args = parser.parse_args(argv)
    sizes = [tuple(int(x) for x in pair.split("x")) for pair in args.sizes.split(",")]
    print("\n".join(harness.table(["problem", "foundation's bound", "makespan", "status", "proven bound",
                                   "bound below optimum", "seconds"])))
    # the whole model at every size: no switch to the neighbourhood search
    whole_model = Settings(phases=PhaseSettings(lns_after_ops=10**12, whole_model_ops=10**12))
    for name, problem in problems(sizes):
        if not re.search(args.match, name):
            continue
        lb = makespan_lower_bound(problem).value
        began = time.monotonic()
        r = solve(problem, SolveOptions(time_limit=args.time_limit, threads=args.threads, settings=whole_model))
        seconds = time.monotonic() - began
        makespan = r.schedule.makespan
        below = f"{100 * (makespan - lb) / makespan:.1f}%" if r.status == "optimal" else "-"
        print(harness.row([name, f"{lb:g}", f"{makespan:g}", r.status, f"{r.lower_bound:g}", below,
                           f"{seconds:.0f}"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
