"""CP-SAT model size and solve figures on every bundled instance (for before/after comparisons).

    python benchmarks/cpsat_model_size.py --time-limit 10 --out model_size.json [instances/*.json]

For each problem: variables and constraints of the makespan model (phase A, with the
warm start's makespan as horizon), then one ``solve`` with the given limit: status,
makespan, lower bound, gap and wall seconds. Prints a markdown table; ``--out`` keeps JSON.
"""

from __future__ import annotations

import argparse
import importlib
import glob
import json
import sys
import time

from ppsolve.problem import load_problem
from ppsolve.solvers.scaling import build_scaling

from ppsolve.solvers import SolveOptions, solve  # noqa: E402
from ppsolve.solvers.api import Phase, PhaseTask  # noqa: E402
from ppsolve.solvers.budget import Budget  # noqa: E402
from ppsolve.solvers.progress import Progress  # noqa: E402

backend = importlib.import_module("ppsolve.solvers.cpsat.backend")


def model_size(problem) -> tuple[int, int]:
    budget = Budget(3600, False)
    task = PhaseTask(problem, build_scaling(problem), Phase.MAKESPAN, SolveOptions(), budget, budget.search(1.0),
                     Progress(budget, "cpsat"))
    proto = backend._build(task).model.proto
    return len(proto.variables), len(proto.constraints)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    paths = args.problems or sorted(glob.glob("instances/*.json"))
    rows = []
    print("| problem | variables | constraints | status | makespan | bound | gap | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        problem = load_problem(path)
        variables, constraints = model_size(problem)
        t = time.monotonic()
        try:
            result = solve(problem, SolveOptions(time_limit=args.time_limit, threads=args.threads))
            row = dict(status=result.status, makespan=result.schedule.makespan, bound=result.lower_bound,
                       gap=result.gap)
        except Exception as exc:  # a refusal (capacity) is a figure too
            row = dict(status=type(exc).__name__, makespan=None, bound=None, gap=None)
        row.update(problem=path.split("/")[-1].removesuffix(".json"), variables=variables,
                   constraints=constraints, seconds=round(time.monotonic() - t, 1))
        rows.append(row)
        fmt = lambda x, f="{:g}": "-" if x is None else f.format(x)  # noqa: E731
        print(f"| {row['problem']} | {variables} | {constraints} | {row['status']} | {fmt(row['makespan'])} "
              f"| {fmt(row['bound'])} | {fmt(row['gap'], '{:.2%}')} | {row['seconds']} |", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
