"""How far below the optimum is the lower bound? Small analogues of instances/scale, proven.

    PYTHONPATH=. python benchmarks/bound_tightness.py [--time-limit 150] [--threads 0]
        [--sizes 4x8,4x16] [--match REGEX] [--without-tail-cuts] [--without-next-release]

The gaps of the scale benchmark (a makespan found against the foundation's lower bound) mix two
things: how far the search is from the optimum, and how far the bound is below it. On problems
small enough for the whole CP-SAT model to prove its optimum, the second is measured alone. This
script builds the same families as benchmarks/make_scale.py (uneven transformer-like stages,
p2p, cap at half of 1F1B's peak; linear and V-shape without offload, linear and interleaved with
offload at k = 1.5 on links shared by two devices) at small sizes, solves each with the whole
model only (no neighbourhood search), and prints a Markdown table: the foundation's bound, the
solve's makespan and proven bound, the bound's distance below the optimum (when proven), and the
seconds to the answer. ``--without-tail-cuts`` leaves the redundant tail cuts
(``constraints.tail_cuts``) out of the model, ``--without-next-release`` the disjunctive memory
precedences (``constraints.NEXT_RELEASE``), to compare proof times in one run.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from fractions import Fraction
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import make_scale  # noqa: E402  (benchmarks/ is on the path when run as a script)

from ppsolve.bounds import makespan_lower_bound  # noqa: E402
from ppsolve.problem import problem_from_dict  # noqa: E402
from ppsolve.solvers import SolveOptions, solve  # noqa: E402
from ppsolve.solvers.cpsat import constraints  # noqa: E402
from ppsolve.solvers.settings import PhaseSettings, Settings  # noqa: E402

FAMILIES = (("linear", 1, None), ("vshape", 2, None), ("linear", 1, 1.5), ("interleaved", 2, 1.5))


def problems(sizes: list[tuple[int, int]]):
    suite = make_scale.suite
    for d, m in sizes:
        for placement, chunks, k in FAMILIES:
            spec = suite.Spec(d, m, placement, chunks, "split", suite.TRANSFORMER, uneven=True, cap=Fraction(1, 2),
                              p2p=0.5, k=k, link_size=2 if k else 1, k_basis="FB")
            yield spec.name, problem_from_dict(suite.build(spec))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=150.0)
    parser.add_argument("--threads", type=int, default=0, help="0: all cores")
    parser.add_argument("--sizes", default="4x8,4x16", help="d x m pairs")
    parser.add_argument("--match", default="", help="only the problems whose name this regex finds")
    parser.add_argument("--without-tail-cuts", action="store_true")
    parser.add_argument("--without-next-release", action="store_true")
    args = parser.parse_args(argv)
    sizes = [tuple(int(x) for x in pair.split("x")) for pair in args.sizes.split(",")]
    print("| problem | foundation's bound | makespan | status | proven bound | bound below optimum | seconds |")
    print("|---|---|---|---|---|---|---|")
    whole_model = Settings(phases=PhaseSettings(lns_after_ops=10**12, whole_model_ops=10**12))
    patches = []
    if args.without_tail_cuts:
        patches.append(mock.patch.object(constraints, "tail_cuts", lambda *a, **k: None))
    if args.without_next_release:
        patches.append(mock.patch.object(constraints, "NEXT_RELEASE", False))
    for patch in patches:
        patch.start()
    try:
        for name, problem in problems(sizes):
            if not re.search(args.match, name):
                continue
            lb = makespan_lower_bound(problem).value
            began = time.monotonic()
            r = solve(problem, SolveOptions(time_limit=args.time_limit, threads=args.threads or None,
                                            settings=whole_model))
            seconds = time.monotonic() - began
            makespan = r.schedule.makespan
            below = f"{100 * (makespan - lb) / makespan:.1f}%" if r.status == "optimal" else "-"
            print(f"| {name} | {lb:g} | {makespan:g} | {r.status} | {r.lower_bound:g} | {below} | {seconds:.0f} |",
                  flush=True)
    finally:
        for patch in patches:
            patch.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
